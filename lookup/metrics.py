"""Lookup metrics under Pulsar's names, for binary and HTTP lookups alike."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Summary

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
