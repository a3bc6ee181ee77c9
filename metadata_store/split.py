"""A cluster whose configuration store is separate (`configurationMetadataStoreUrl`): two
metadata sources, one for each store, read as one view.

Pulsar keeps namespace policies, tenants, partitioned-topic metadata and cluster data in the
configuration store, and local policies, bundle ownership, the load manager's nodes and managed
ledgers in the local store (lookup.model.is_configuration_path). Each source caches and watches
its own store; reads and fetches go to the store that holds the path.
"""

from __future__ import annotations

import asyncio

from pulsar_lookup_gateway.lookup.model import is_configuration_path
from pulsar_lookup_gateway.lookup.source import MetadataSource, SourceStatus
from pulsar_lookup_gateway.lookup.view import ClusterView, SplitView


class SplitSource:
    def __init__(self, local: MetadataSource, configuration: MetadataSource) -> None:
        self.local = local
        self.configuration = configuration
        self._view: SplitView | None = None

    @property
    def view(self) -> ClusterView:
        """One view over both stores' views, made again when either source replaces its view
        (a reload, a lost session), so that answers cached for the old one are dropped."""
        local, configuration = self.local.view, self.configuration.view
        view = self._view
        if view is None or view.local is not local or view.configuration is not configuration:
            view = self._view = SplitView(local, configuration)
        return view

    async def start(self) -> None:
        results = await asyncio.gather(
            self.local.start(), self.configuration.start(), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                await self.close()
                raise result

    async def close(self) -> None:
        await asyncio.gather(self.local.close(), self.configuration.close())

    async def fetch(self, path: str) -> None:
        store = self.configuration if is_configuration_path(path) else self.local
        await store.fetch(path)

    def status(self) -> SourceStatus:
        local, configuration = self.local.status(), self.configuration.status()
        reasons = [
            f"{store}: {status.reason}"
            for store, status in (("local store", local), ("configuration store", configuration))
            if status.reason
        ]
        return SourceStatus(
            local.ready and configuration.ready,
            "; ".join(reasons),
            stale=local.stale or configuration.stale,
        )
