"""The ownership watch's retries: topics whose state could not be told are looked up again
after RETRY_INTERVAL, all of them at once (later while the metadata's session is lost and its
cache not ready). Bounded by the topics watched (a set: a topic is in it once)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from pulsar_lookup_gateway.serving.watch_index import WatchedTopic

RETRY_INTERVAL = 1.0  # seconds before a topic whose state cannot be told is tried again


class Retries:
    def __init__(self, ready: Callable[[], bool], again: Callable[[WatchedTopic], None]) -> None:
        self._ready = ready  # whether the metadata can be read (else: wait for it)
        self._again = again  # looks a topic up again
        self._topics: set[WatchedTopic] = set()
        self._timer: asyncio.TimerHandle | None = None

    def later(self, entry: WatchedTopic) -> None:
        self._topics.add(entry)
        if self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(RETRY_INTERVAL, self._now)

    def discard(self, entry: WatchedTopic) -> None:
        self._topics.discard(entry)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _now(self) -> None:
        self._timer = None
        if not self._topics:
            return
        if not self._ready():  # (a lost session: wait for the cache)
            self._timer = asyncio.get_running_loop().call_later(RETRY_INTERVAL, self._now)
            return
        retry, self._topics = self._topics, set()
        for entry in retry:
            if not entry.removed:
                self._again(entry)
