"""The live metadata source for a `metadataStoreUrl` (and a `configurationMetadataStoreUrl`)."""

from __future__ import annotations

from pulsar_lookup_gateway.lookup.source import MetadataSource
from pulsar_lookup_gateway.metadata_store.file import FileSource
from pulsar_lookup_gateway.metadata_store.split import SplitSource
from pulsar_lookup_gateway.metadata_store.url import MetadataUrl
from pulsar_lookup_gateway.metadata_store.zookeeper import WARM_PATHS, ZooKeeperSource


def open_source(
    url: MetadataUrl,
    *,
    configuration: MetadataUrl | None = None,
    start_timeout: float | None = None,
) -> MetadataSource:
    """`configuration`: a separate configuration store (None, or the same URL: `url` holds
    everything). `start_timeout`: how long start() waits for ZooKeeper (None: the default)."""
    local = _open(url, start_timeout, WARM_PATHS)
    if configuration is None or configuration == url:
        return local
    return SplitSource(local, _open(configuration, start_timeout, ()))


def _open(
    url: MetadataUrl, start_timeout: float | None, warm_paths: tuple[str, ...]
) -> MetadataSource:
    if url.kind == "file":
        return FileSource(url.path)
    if start_timeout is None:
        return ZooKeeperSource(url, warm_paths=warm_paths)
    return ZooKeeperSource(url, start_timeout=start_timeout, warm_paths=warm_paths)
