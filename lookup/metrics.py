"""Lookup metrics under Pulsar's names, for binary and HTTP lookups alike."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Summary

from lookup.source import SourceStatus

LABELS = ("listener", "chosen_by", "protocol")


class LookupMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.latency = Summary(
            "pulsar_broker_lookup", "Lookup latency in seconds", LABELS, registry=self.registry
        )
        self.answers = Counter(
            "pulsar_broker_lookup_answers", "Lookups answered with Connect", LABELS,
            registry=self.registry,
        )  # fmt: skip
        self.redirects = Counter(
            "pulsar_broker_lookup_redirects", "Lookups answered with Redirect", LABELS,
            registry=self.registry,
        )  # fmt: skip
        self.failures = Counter(
            "pulsar_broker_lookup_failures", "Lookups that failed", (*LABELS, "error"),
            registry=self.registry,
        )  # fmt: skip
        self.pending = Gauge(
            "pulsar_broker_lookup_pending_requests", "Lookups in flight", registry=self.registry
        )

    def watch_source(self, status: Callable[[], SourceStatus]) -> None:
        """Expose the metadata source's state, read at scrape time."""
        ready = Gauge(
            "pulsar_gateway_metadata_ready",
            "1 when the metadata source is connected and warm",
            registry=self.registry,
        )
        stale = Gauge(
            "pulsar_gateway_metadata_stale",
            "1 while lookups are answered from a cache that may lag the cluster",
            registry=self.registry,
        )
        ready.set_function(lambda: float(status().ready))
        stale.set_function(lambda: float(status().stale))
