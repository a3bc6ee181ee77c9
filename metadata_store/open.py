"""The live metadata source for a `metadataStoreUrl`."""

from __future__ import annotations

from lookup.source import MetadataSource
from metadata_store.file import FileSource
from metadata_store.url import MetadataUrl
from metadata_store.zookeeper import ZooKeeperSource


def open_source(url: MetadataUrl, *, start_timeout: float | None = None) -> MetadataSource:
    """`start_timeout`: how long start() waits for ZooKeeper (None: the source's default)."""
    if url.kind == "file":
        return FileSource(url.path)
    if start_timeout is None:
        return ZooKeeperSource(url)
    return ZooKeeperSource(url, start_timeout=start_timeout)
