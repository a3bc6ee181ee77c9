"""Log lines for events a client can repeat thousands of times a second, at most one per
interval, each saying how many events it stands for."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

LOG_INTERVAL = 10.0  # seconds between two lines about one kind of event


class LogThrottle:
    """One log line per `interval` for a repeatable event (a refused connection, a failed
    accept). The events the last line did not mention are counted in the next one."""

    def __init__(
        self,
        logger: logging.Logger,
        level: int,
        interval: float = LOG_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._level = level
        self._interval = interval
        self._clock = clock
        self._last: float | None = None
        self._unreported = 0
        self.total = 0  # events, logged or not

    def event(self, message: str, *args: object) -> None:
        self.total += 1
        self._unreported += 1
        now = self._clock()
        if self._last is not None and now - self._last < self._interval:
            return
        more = self._unreported - 1
        since = now - self._last if self._last is not None else 0.0
        self._last, self._unreported = now, 0
        if more:
            message += " (and %d more like it in the last %.0fs)"
            args = (*args, more, since)
        self._logger.log(self._level, message, *args)


class FirstSeen:
    """Whether a key is seen for the first time, among at most `limit` remembered (at the
    bound they start over): to log a repeating condition once per key, in bounded memory."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._seen: set[object] = set()

    def first(self, key: object) -> bool:
        if key in self._seen:
            return False
        if len(self._seen) >= self._limit:
            self._seen.clear()
        self._seen.add(key)
        return True
