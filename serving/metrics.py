"""Lookup metrics under Pulsar's names, for binary and HTTP lookups alike, and the gateway's
own (`pulsar_lookup_gateway_*`). docs/operating/metrics.md lists every series.

One process (`run`, `standalone`): gauges that mirror a value of ours (lookups in flight, the
metadata source's state) read it at scrape time. `run --workers N`: prometheus-client's
multiprocess mode (PROMETHEUS_MULTIPROC_DIR was set before it was imported): every process
writes its samples to files that /metrics merges, so those gauges are copied into the files by
`refresh()`, which the gateway calls once a second and before a scrape; each gauge's
`multiprocess_mode` says how the workers' values combine.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    values,
)

from pulsar_lookup_gateway.lookup.source import SourceStatus

# No `_created` series: they double the exposition and nothing here needs them. The switch is
# process-wide and read at collection time, and every process that serves /metrics imports this.
disable_created_metrics()  # type: ignore[no-untyped-call]

LABELS = ("listener", "chosen_by", "protocol")
# Lookups take from ~50 us (a cached answer) to seconds (a cold read from ZooKeeper).
LATENCY_BUCKETS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
PREFIX = "pulsar_lookup_gateway_"
#: Counted by the `run --workers N` supervisor (gateway.workers), declared by every worker too.
WORKER_RESTARTS = PREFIX + "worker_restarts"
WORKER_RESTARTS_HELP = "Workers of run --workers N that died and were started again"
#: The `listener` label of a connection-level series on a legacy (untagged) socket, as in TLS's.
NO_LISTENER = "(none)"


def multiprocess() -> bool:
    """True when prometheus-client writes every sample to files (multiprocess mode, chosen when
    it was imported), where /metrics must read them back with a MultiProcessCollector."""
    return values.ValueClass is not values.MutexValue


class LookupTally:
    """Answered lookups of one label set, counted in plain numbers and added to their
    prometheus series when the registry is collected (a scrape) or refreshed: a prometheus
    update takes a lock, and a warm lookup made five of them. Used from the event loop's thread
    only, as the collection that flushes it is (the /metrics route runs on the loop).

    `immediate`: every lookup is flushed at once. Multiprocess mode (`run --workers N`) needs
    it: a scrape reaches one worker, and reads what the others have written to their files."""

    __slots__ = (
        "_answers", "_immediate", "_latency", "_redirects",
        "buckets", "connect", "redirect", "seconds",
    )  # fmt: skip

    def __init__(self, latency: Any, answers: Any, redirects: Any, immediate: bool) -> None:
        self._latency, self._answers, self._redirects = latency, answers, redirects
        self._immediate = immediate
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)  # the last one: +Inf
        self.seconds = 0.0
        self.connect = 0
        self.redirect = 0

    def answered(self, seconds: float, connect: bool) -> None:
        self.answered_together(1, seconds, connect)

    def answered_together(self, count: int, seconds_each: float, connect: bool) -> None:
        """`count` lookups answered in one go (memoised answers to one read), each counted at
        their mean time: the sum is exact, the bucket is the mean's."""
        # A histogram bucket holds the values up to and including its bound ("le").
        self.buckets[bisect_left(LATENCY_BUCKETS, seconds_each)] += count
        self.seconds += seconds_each * count
        if connect:
            self.connect += count
        else:
            self.redirect += count
        if self._immediate:
            self.flush()

    def flush(self) -> None:
        """Add what was counted since the last flush to the series. The histogram's own
        per-bucket values (non-cumulative, one per bound and +Inf, as `observe` keeps them)
        and its sum are added to directly: one update per bucket used, not one per lookup."""
        if self.connect:
            self._answers.inc(self.connect)
            self.connect = 0
        if self.redirect:
            self._redirects.inc(self.redirect)
            self.redirect = 0
        buckets = self.buckets
        for index, count in enumerate(buckets):
            if count:
                self._latency._buckets[index].inc(count)
                buckets[index] = 0
        if self.seconds:
            self._latency._sum.inc(self.seconds)
            self.seconds = 0.0


class _Flush:
    """A collector that exports nothing and flushes the tallies, registered before the
    series it feeds, so that every collection sees every lookup counted so far."""

    def __init__(self, metrics: LookupMetrics) -> None:
        self._metrics = metrics

    def describe(self) -> Iterable[Any]:
        return ()

    def collect(self) -> Iterable[Any]:
        self._metrics.flush()
        return ()


class LookupMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.multiprocess = multiprocess()
        registry = self.registry
        self._tallies: dict[tuple[str, str, str], LookupTally] = {}
        registry.register(_Flush(self))
        self.latency = Histogram(
            "pulsar_broker_lookup", "Lookup latency in seconds", LABELS,
            registry=registry, buckets=LATENCY_BUCKETS,
        )  # fmt: skip
        self.answers = Counter(
            "pulsar_broker_lookup_answers", "Lookups answered with Connect", LABELS,
            registry=registry,
        )  # fmt: skip
        self.redirects = Counter(
            "pulsar_broker_lookup_redirects", "Lookups answered with Redirect", LABELS,
            registry=registry,
        )  # fmt: skip
        self.failures = Counter(
            "pulsar_broker_lookup_failures", "Lookups that failed", (*LABELS, "error"),
            registry=registry,
        )  # fmt: skip
        self.pending = Gauge(
            "pulsar_broker_lookup_pending_requests", "Lookups in flight",
            registry=registry, multiprocess_mode="livesum",
        )  # fmt: skip
        self.ready = Gauge(
            PREFIX + "metadata_ready", "1 when the metadata source is connected and warm",
            registry=registry, multiprocess_mode="livemin",
        )  # fmt: skip
        self.stale = Gauge(
            PREFIX + "metadata_stale",
            "1 while lookups are answered from a cache that may lag the cluster",
            registry=registry, multiprocess_mode="livemax",
        )  # fmt: skip
        self.max_concurrent = Gauge(
            PREFIX + "max_concurrent_lookups",
            "maxConcurrentLookupRequest: lookups in flight beyond it are refused",
            registry=registry, multiprocess_mode="livemax",
        )  # fmt: skip
        self.connections_refused = Counter(
            PREFIX + "connections_refused",
            "Connections closed at accept or before their first request, by reason",
            ("listener", "reason"), registry=registry,
        )  # fmt: skip
        self.worker_restarts = Counter(WORKER_RESTARTS, WORKER_RESTARTS_HELP, registry=registry)
        self.build_info = Gauge(
            PREFIX + "build_info", "Always 1; the gateway's version in the label",
            ("version",), registry=registry, multiprocess_mode="livemax",
        )  # fmt: skip
        self._live: list[tuple[Gauge, Callable[[], float]]] = []
        self._refused: dict[tuple[str | None, str], Any] = {}

    def live(self, gauge: Gauge, read: Callable[[], float]) -> None:
        """`gauge` shows `read()`: taken at scrape time in one process, as of the last
        `refresh()` in multiprocess mode."""
        gauge.set_function(read)
        self._live.append((gauge, read))

    def refresh(self) -> None:
        """Copy the live gauges' values and the tallies into the shared files (multiprocess
        mode only: in one process they are read at collection time, and this is not needed)."""
        self.flush()
        for gauge, read in self._live:
            gauge.set(read())

    def tally(self, labels: tuple[str, str, str]) -> LookupTally:
        """The tally of answered lookups labelled (listener, chosen_by, protocol)."""
        tally = self._tallies.get(labels)
        if tally is None:
            tally = self._tallies[labels] = LookupTally(
                self.latency.labels(*labels),
                self.answers.labels(*labels),
                self.redirects.labels(*labels),
                immediate=self.multiprocess,
            )
        return tally

    def flush(self) -> None:
        for tally in self._tallies.values():
            tally.flush()

    def watch_source(self, status: Callable[[], SourceStatus]) -> None:
        """Expose the metadata source's state."""
        self.live(self.ready, lambda: float(status().ready))
        self.live(self.stale, lambda: float(status().stale))

    def set_build_info(self, version: str) -> None:
        self.build_info.labels(version).set(1)

    def refused(self, listener: str | None, reason: str) -> None:
        """Count a connection refused on `listener`'s socket (None: a legacy socket) for
        `reason`, a fixed word of the caller's (`max_connections`, `handshake_timeout`, ...),
        never client text. Cheap: the series is looked up once per (listener, reason)."""
        key = (listener, reason)
        series = self._refused.get(key)
        if series is None:
            label = NO_LISTENER if listener is None else listener
            series = self._refused[key] = self.connections_refused.labels(label, reason)
        series.inc()
