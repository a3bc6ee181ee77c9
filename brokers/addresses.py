"""Which broker, at which address: the live brokers of the cluster view (their registrations
under ``/loadbalance/brokers``), at their **internal** listener's binary URL (the registration's
``advertisedListeners[internalListenerName]``, else its default ``pulsarServiceUrl``;
``pulsar+ssl`` with ``tlsEnabledWithBroker=true``), taken in turn, those in their failure
cooldown last."""

from __future__ import annotations

import itertools
from collections.abc import Collection

from pulsar_lookup_gateway.brokers.cooldown import Cooldown
from pulsar_lookup_gateway.brokers.failures import unavailable
from pulsar_lookup_gateway.brokers.settings import LinkSettings
from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure, NodeNotLoaded
from pulsar_lookup_gateway.lookup.model import BrokerData
from pulsar_lookup_gateway.lookup.source import MetadataSource
from pulsar_lookup_gateway.lookup.view import BrokerRegistry

__all__ = ["BrokerAddresses"]

#: Reads of the registrations that may each find a node missing (fetched, then read again).
_REGISTRY_READS = 8


class BrokerAddresses:
    def __init__(self, source: MetadataSource, settings: LinkSettings, cooldown: Cooldown) -> None:
        self._source = source
        self._settings = settings
        self._cooldown = cooldown
        self._turn = itertools.count()

    async def registry(self) -> BrokerRegistry:
        """The live brokers' registrations, fetching those the view has not loaded yet."""
        for _ in range(_REGISTRY_READS):
            try:
                return self._source.view.broker_registry()
            except NodeNotLoaded as missing:
                await self._source.fetch(missing.path)
        raise unavailable("the broker registrations kept changing while they were read")

    def url_of(self, broker: BrokerData) -> str | None:
        """`broker`'s binary URL on the internal listener (None: it registered none)."""
        tls = self._settings.tls
        listener = broker.advertised_listeners.get(self._settings.internal_listener or "")
        if listener is not None:
            url = listener.broker_service_url_tls if tls else listener.broker_service_url
            if url:
                return url
        return broker.pulsar_service_url_tls if tls else broker.pulsar_service_url

    def live_urls(self, registry: BrokerRegistry) -> list[str]:
        """The live brokers' URLs for the link (sorted; a registration without one left out)."""
        return sorted({url for data in registry.brokers.values() if (url := self.url_of(data))})

    async def in_turn(self) -> list[str]:
        """The brokers' URLs, starting at the next in turn; those that failed recently last."""
        urls = self.live_urls(await self.registry())
        if not urls:
            return []
        start = next(self._turn) % len(urls)
        return self._cooldown.healthy_first(urls[start:] + urls[:start])

    def holder_urls(self, registry: BrokerRegistry, holders: Collection[str] | None) -> list[str]:
        """The URLs of the brokers `holders` (ids; None: every live broker), sorted."""
        if holders is None:
            urls = self.live_urls(registry)
            if not urls:
                raise LookupFailure(FailureKind.NO_BROKER, "No broker was available")
            return urls
        found = set()
        for broker_id in holders:
            data = registry.brokers.get(broker_id)
            if data is None:  # (it left since the owners were read)
                raise LookupFailure(
                    FailureKind.OWNER_INACTIVE,
                    "a broker that owns bundles of the namespace is not registered; retry",
                    f"owner {broker_id}",
                )
            url = self.url_of(data)
            if url is None:
                raise unavailable(
                    "a broker's registration is unusable; retry later",
                    f"{broker_id}: no binary URL for the internal listener",
                )
            found.add(url)
        return sorted(found)
