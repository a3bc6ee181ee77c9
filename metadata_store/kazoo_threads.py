"""A kazoo handler that runs the gateway's hand-overs to the event loop on the thread that has
the event, instead of on kazoo's callback threads.

kazoo's threading handler queues every watch callback to one worker thread and every completed
request's callbacks to another. The gateway's callbacks only pass the event on to the asyncio
loop (call_soon_threadsafe), so each queue is one more thread that must be woken and take the GIL
from a loop busy with lookups (CPython hands the GIL over every switch interval, 5 ms by
default) before the loop even hears of a change. Callbacks marked `inline`, and a result's
`when_done` callback, run on kazoo's connection thread; they must be quick and never block
(that thread also reads every reply and sends every request). Anything else still goes through
kazoo's queues.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from kazoo.handlers.threading import AsyncResult, SequentialThreadingHandler

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])
_INLINE = "_kazoo_inline"


def inline(func: F) -> F:
    """Mark a watch callback (a function or a method) to run on kazoo's connection thread."""
    setattr(func, _INLINE, True)
    return func


class LoopHandler(SequentialThreadingHandler):  # type: ignore[misc]
    def dispatch_callback(self, callback: Any) -> None:
        if getattr(callback.func, _INLINE, False):
            _run(callback.func, *callback.args)
        else:
            super().dispatch_callback(callback)

    def async_result(self) -> HandedResult:
        return HandedResult(self)


class HandedResult(AsyncResult):  # type: ignore[misc]
    """A request's result whose `when_done` callback runs on the thread that completes it."""

    _then: Callable[[HandedResult], None] | None = None

    def when_done(self, then: Callable[[HandedResult], None]) -> None:
        """Call `then(self)` once the result is set: now (on this thread) if it is, else on
        the thread that sets it. At most one such callback."""
        with self._condition:
            if not self.ready():
                self._then = then
                return
        _run(then, self)

    def set(self, value: Any = None) -> None:
        super().set(value)
        self._hand_over()

    def set_exception(self, exception: BaseException) -> None:
        super().set_exception(exception)
        self._hand_over()

    def _hand_over(self) -> None:
        with self._condition:
            then, self._then = self._then, None
        if then is not None:
            _run(then, self)


def _run(func: Callable[..., Any], *args: Any) -> None:
    # An exception must not reach kazoo's connection loop (it would drop the connection).
    try:
        func(*args)
    except Exception:
        log.exception("error in a ZooKeeper callback")
