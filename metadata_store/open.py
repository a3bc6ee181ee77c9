"""The live metadata source for a `metadataStoreUrl`."""

from __future__ import annotations

from lookup.source import MetadataSource
from metadata_store.file import FileSource
from metadata_store.url import MetadataUrl
from metadata_store.zookeeper import ZooKeeperSource


def open_source(url: MetadataUrl) -> MetadataSource:
    if url.kind == "file":
        return FileSource(url.path)
    return ZooKeeperSource(url)
