"""Brokers skipped after a failure: a broker that could not be reached, or did not answer in
time, is asked last (or, by a REST topic list, not at all) for `seconds`."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from pulsar_lookup_gateway.lookup.errors import LookupFailure

__all__ = ["Cooldown"]

log = logging.getLogger(__name__)


class Cooldown:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._until: dict[str, float] = {}  # broker URL -> when it is tried again

    def failed(self, url: str, failure: LookupFailure) -> None:
        """Skip `url` for a while; the log (once per cooldown) has what the client was not
        told: the failure's detail."""
        if not self.active(url):
            log.warning("broker %s skipped for %.0fs: %s (%s)", url, self.seconds,
                        failure.message, failure.detail or "-")  # fmt: skip
        self._until[url] = time.monotonic() + self.seconds

    def active(self, url: str) -> bool:
        """Whether `url` is being skipped after a failure."""
        return self._until.get(url, 0.0) > time.monotonic()

    def healthy_first(self, urls: Sequence[str]) -> list[str]:
        """`urls` in their order, those that failed recently moved last."""
        now = time.monotonic()
        healthy = [url for url in urls if self._until.get(url, 0.0) <= now]
        return healthy + [url for url in urls if url not in healthy]
