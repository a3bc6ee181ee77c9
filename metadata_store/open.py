"""Open the metadata of a `metadataStoreUrl`: a live source for the gateway, or one snapshot."""

from __future__ import annotations

from typing import Any

from lookup.source import MetadataSource
from metadata_store.admin import connected, dump
from metadata_store.file import FileSource
from metadata_store.snapshot import read_snapshot
from metadata_store.url import MetadataUrl
from metadata_store.zookeeper import ZooKeeperSource


def open_source(url: MetadataUrl) -> MetadataSource:
    if url.kind == "file":
        return FileSource(url.path)
    return ZooKeeperSource(url)


def read_nodes(url: MetadataUrl) -> dict[str, Any]:
    """One consistent read of the metadata: the snapshot file, or a dump of ZooKeeper."""
    if url.kind == "file":
        return read_snapshot(url.path)
    with connected(url.connect_string) as client:
        return dump(client)
