"""What the lookup service needs from a metadata source (a snapshot file, ZooKeeper)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from pulsar_lookup_gateway.lookup.view import ClusterView


@dataclass(frozen=True, slots=True)
class SourceStatus:
    ready: bool  # connected and warm: lookups are answered from current data
    reason: str  # why not ready, or what is degraded ("" when all is well)
    stale: bool = False  # serving a cache that may lag the cluster (ZooKeeper suspended)


class MetadataSource(Protocol):
    @property
    def view(self) -> ClusterView:
        """The current view; a source may replace it (reload, session loss)."""
        ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def fetch(self, path: str) -> None:
        """Read `path` (a trailing `/` means its children) into the view, and watch it.

        Raises LookupFailure(METADATA_UNAVAILABLE) quickly when the store cannot be reached.
        """
        ...

    def status(self) -> SourceStatus: ...
