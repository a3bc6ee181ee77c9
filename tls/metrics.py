"""TLS metrics, registered in the lookup service's registry so they show on /metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

#: The `listener` label of legacy sockets (brokerServicePortTls, webServicePortTls).
NO_LISTENER = "(none)"


def listener_label(listener: str | None) -> str:
    return NO_LISTENER if listener is None else listener


class TlsMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.expiry = Gauge(
            "pulsar_lookup_gateway_tls_certificate_expiry_seconds",
            "notAfter of the certificate a listener's TLS sockets serve, as a unix time",
            ("listener",),
            registry=registry,
            # run --workers N: the soonest of the live workers' (they read the same files)
            multiprocess_mode="livemin",
        )
        self.reloads = Counter(
            "pulsar_lookup_gateway_tls_reloads",
            "Changed TLS material loaded (outcome=ok) or refused, keeping the old (failed)",
            ("listener", "outcome"),
            registry=registry,
        )
