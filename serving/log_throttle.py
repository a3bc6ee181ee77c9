"""Log lines for events a client can repeat thousands of times a second, a few per interval,
the first of each saying how many events went unmentioned before it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

LOG_INTERVAL = 10.0  # seconds between two lines about one kind of event


class LogThrottle:
    """At most `burst` log lines per `interval` for a repeatable event (a refused connection,
    a failed accept, a refused lookup). The events the lines did not mention are counted in
    the first line of the next interval."""

    def __init__(
        self,
        logger: logging.Logger,
        level: int,
        interval: float = LOG_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        burst: int = 1,
    ) -> None:
        self._logger = logger
        self._level = level
        self._interval = interval
        self._clock = clock
        self._burst = burst
        self._started: float | None = None  # when the current interval began
        self._lines = 0  # lines logged in it
        self._unreported = 0
        self.total = 0  # events, logged or not

    def event(self, message: str, *args: object) -> None:
        self.total += 1
        now = self._clock()
        started = self._started
        if started is not None and now - started < self._interval:
            if self._lines >= self._burst:
                self._unreported += 1
                return
        else:
            more, self._unreported = self._unreported, 0
            self._started, self._lines = now, 0
            if more:
                message += " (and %d more like it in the last %.0fs)"
                args = (*args, more, now - started if started is not None else 0.0)
        self._lines += 1
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
