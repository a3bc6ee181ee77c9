"""ZooKeeper outages in the log: one line when one begins, a reminder every interval while it
lasts, one when it ends; and kazoo's own reconnect lines thinned to one per interval."""

from __future__ import annotations

import asyncio
import logging
import time

log = logging.getLogger("pulsar_lookup_gateway.metadata_store.zookeeper")

OUTAGE_REMINDER = 30.0  # seconds between two "still unreachable" lines while ZooKeeper is down


class QuietRetries(logging.Filter):
    """kazoo logs every reconnect attempt (about one a second while ZooKeeper is down): let
    one of its lines below ERROR through per interval; the source logs the outage itself."""

    def __init__(self, interval: float) -> None:
        super().__init__()
        self.interval = interval
        self._last = -interval

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return True
        now = time.monotonic()
        if now - self._last < self.interval:
            return False
        self._last = now
        return True


class OutageLog:
    """The outage lines of one source (`url`), on the event loop."""

    def __init__(self, url: object, reminder: float) -> None:
        self._url = url
        self.reminder_seconds = reminder
        self._down_since: float | None = None  # when the current outage began
        self._reminder: asyncio.TimerHandle | None = None
        self.closing = False  # the source is closing: an outage is no news

    def began(self, loop: asyncio.AbstractEventLoop, what: str) -> None:
        """Log an outage once, then remind every interval until it ends."""
        if self._down_since is not None or self.closing:
            return
        self._down_since = time.monotonic()
        log.warning("%s: ZooKeeper unreachable (%s); lookups of uncached names fail", self._url,
                    what)  # fmt: skip
        self._reminder = loop.call_later(self.reminder_seconds, self._remind, loop)

    def _remind(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._down_since is None or self.closing:
            return
        down = time.monotonic() - self._down_since
        log.warning("%s: ZooKeeper still unreachable after %.0fs", self._url, down)
        self._reminder = loop.call_later(self.reminder_seconds, self._remind, loop)

    def ended(self) -> None:
        self.cancel()
        if self._down_since is None:
            log.info("%s: connected", self._url)
            return
        down, self._down_since = time.monotonic() - self._down_since, None
        log.info("%s: connected again after %.0fs", self._url, down)

    def cancel(self) -> None:
        if self._reminder is not None:
            self._reminder.cancel()
            self._reminder = None
