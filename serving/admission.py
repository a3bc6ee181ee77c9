"""maxConcurrentLookupRequest: the one place that decides whether a lookup may run now.

Every lookup is admitted here, whichever path answers it (the service's full path, or a front
end's memo of warm answers), so the bound and its refusals mean the same for all of them."""

from __future__ import annotations

import logging

from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure
from pulsar_lookup_gateway.serving.log_throttle import LogThrottle
from pulsar_lookup_gateway.serving.metrics import LookupMetrics

#: Metric labels of a lookup: (listener, chosen_by, protocol).
Labels = tuple[str, str, str]


class Admission:
    """Counts the requests in flight against `max_concurrent`."""

    def __init__(self, max_concurrent: int, metrics: LookupMetrics, log: logging.Logger) -> None:
        self.max_concurrent = max_concurrent
        self.pending = 0
        self._metrics = metrics
        self._overloaded = LogThrottle(log, logging.INFO)

    def has_room(self) -> bool:
        """Whether a request admitted now would run (a memo of warm answers asks before it
        answers; where there is no room it leaves the request to `admit`, which refuses it)."""
        return self.pending < self.max_concurrent

    def admit(self, labels: Labels | None) -> None:
        """Raise LookupFailure(TOO_MANY_REQUESTS) when no request may start now; counted under
        `labels` (None: a request that is not a lookup, counted only in the log line)."""
        if self.pending < self.max_concurrent:
            return
        if labels is not None:
            self._metrics.failures.labels(*labels, "TooManyRequests").inc()
        # A burst refuses thousands a second: one line per interval, with the count.
        self._overloaded.event(
            "lookups refused: maxConcurrentLookupRequest=%d in flight (TooManyRequests)",
            self.max_concurrent,
        )
        refused = LookupFailure(
            FailureKind.TOO_MANY_REQUESTS,
            f"Too many concurrent lookups (maxConcurrentLookupRequest={self.max_concurrent})",
        )
        refused.logged = True  # the throttled line above stands for it
        raise refused
