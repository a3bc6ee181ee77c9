"""The ownership watch's hold on CPython's cyclic garbage collector while it pushes a change.

Why a module of its own: it turns a process-wide switch (`gc.disable()`) that every other part
of the process shares, so where and how long it is held is kept in one small, bounded place.
The pure core never touches it (tests/unit/test_layout.py: no `gc` in lookup/).
"""

from __future__ import annotations

import asyncio
import gc

HOLD_LIMIT = 0.25  # seconds the garbage collector may be held off at most


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
