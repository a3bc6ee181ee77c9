"""The ownership watch's hold on CPython's cyclic garbage collector while it pushes a change.

Why a module of its own: it turns process-wide switches (`gc.disable()`, the young
generation's threshold) that every other part of the process shares, so where and how long
it is held is kept in one small, bounded place.
The pure core never touches it (tests/unit/test_layout.py: no `gc` in lookup/).
"""

from __future__ import annotations

import asyncio
import gc

HOLD_LIMIT = 0.25  # seconds the garbage collector may be held off at most
#: Allocations between two young collections (CPython's default: 700). A herd's streams
#: allocate objects that live as long as the stream: at 700, they are walked again and again
#: by young and middle collections and pushed into full ones (bench.watch_herd, 1,000 x 100:
#: 0.5 s of collections in the herd, two full ones of ~250 ms; at 10,000: ~0.1 s, none full).
#: What it costs: up to that many unreachable cycles wait a little longer to be freed.
YOUNG_THRESHOLD = 10_000


def raise_young_threshold() -> None:
    """Collect young objects every YOUNG_THRESHOLD allocations, not fewer (the other two
    thresholds as they are; a higher one, set by someone else, is left as it is)."""
    young, middle, old = gc.get_threshold()
    if 0 < young < YOUNG_THRESHOLD:
        gc.set_threshold(YOUNG_THRESHOLD, middle, old)


class CollectionHold:
    """Keeps CPython's cyclic garbage collector from starting while a change is pushed.

    A full collection walks every object of the process (1,000 WebSocket streams are some
    200,000 objects: ~100 ms of CPU here) and starts whenever allocations cross a threshold:
    during a push, every stream's message waits it out. So from the first write of a change
    until its streams were handed their messages (two loop iterations after the last lookup,
    when their writers have run), the collector is off; a collection that came due meanwhile
    runs just after. Bounded: on for at least a moment every HOLD_LIMIT seconds, however
    often changes come. Untouched when something else turned the collector off."""

    def __init__(self) -> None:
        raise_young_threshold()  # (the watch's herds: where the collector's costs show)
        self._holding = False
        self._limit: asyncio.TimerHandle | None = None

    def begin(self) -> None:
        if self._holding or not gc.isenabled():
            return
        gc.disable()
        self._holding = True
        self._limit = asyncio.get_running_loop().call_later(HOLD_LIMIT, self.release)

    def end(self) -> None:
        """The push is done once the writers it woke have run."""
        if self._holding:
            loop = asyncio.get_running_loop()
            loop.call_soon(loop.call_soon, self.release)

    def release(self) -> None:
        if self._limit is not None:
            self._limit.cancel()
            self._limit = None
        if self._holding:
            self._holding = False
            gc.enable()
