"""Pick the metadata source for a `metadataStoreUrl`."""

from __future__ import annotations

from lookup.file_source import FileSource
from lookup.metadata_url import MetadataUrl
from lookup.source import MetadataSource
from lookup.zk_source import ZooKeeperSource


def open_source(url: MetadataUrl) -> MetadataSource:
    if url.kind == "file":
        return FileSource(url.path)
    return ZooKeeperSource(url)
