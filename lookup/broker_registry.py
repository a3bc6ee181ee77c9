"""BrokerRegistry: the live brokers a view lists, with the indexes resolve() looks them up by."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pulsar_lookup_gateway.lookup.errors import MalformedNode
from pulsar_lookup_gateway.lookup.model import BrokerData


@dataclass(frozen=True, slots=True)
class BrokerRegistry:
    """The live brokers, valid registrations only, with the indexes resolve() needs."""

    brokers: Mapping[str, BrokerData]
    invalid: Mapping[str, MalformedNode]
    by_url: Mapping[str, str]  # any service or web URL of a broker -> broker id
    # With the extensible load manager, ownership lives in a system topic, not in /namespace.
    extensible: bool

    @classmethod
    def build(
        cls, brokers: Mapping[str, BrokerData], invalid: Mapping[str, MalformedNode]
    ) -> BrokerRegistry:
        by_url: dict[str, str] = {}
        for broker_id in sorted(brokers):
            data = brokers[broker_id]
            for url in (
                data.pulsar_service_url,
                data.pulsar_service_url_tls,
                data.web_service_url,
                data.web_service_url_tls,
            ):
                if url:
                    by_url.setdefault(url, broker_id)
        extensible = any(b.uses_extensible_load_manager for b in brokers.values())
        return cls(brokers, invalid, by_url, extensible)
