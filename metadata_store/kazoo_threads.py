"""A kazoo handler that runs the gateway's hand-overs to the event loop on the thread that has
the event, instead of on kazoo's callback threads; and a client that wakes its connection
thread once for many requests (BatchingClient).

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

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionClosedError
from kazoo.handlers.threading import AsyncResult, SequentialThreadingHandler
from kazoo.protocol.states import KeeperState

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])
_INLINE = "_kazoo_inline"
_REFUSING = (KeeperState.AUTH_FAILED, KeeperState.CLOSED, KeeperState.EXPIRED_SESSION)


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


class BatchingClient(KazooClient):  # type: ignore[misc]
    """A KazooClient whose requests sent together (`batch()`, on one thread) wake its
    connection thread with one write instead of one each.

    kazoo queues a request and writes one byte to its connection thread's wake-up socket per
    request; the thread sends one request per byte it reads. Each of those writes releases the
    GIL to a connection thread busy reading replies, and takes it back only at the next switch
    interval: reading 100,000 znodes ahead spent most of its time there. In a batch the
    requests are queued as kazoo queues them and the bytes are written at its end, all at once.
    """

    _batch: list[Any] | None = None
    _batch_thread = 0

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        if self._batch is not None:  # (nested: the outer batch wakes the thread)
            yield
            return
        self._batch, self._batch_thread = [], threading.get_ident()
        try:
            yield
        finally:
            batched, self._batch = self._batch, None
            if batched:
                self._wake(batched)

    def _call(self, request: Any, async_object: Any) -> Any:
        batched = self._batch
        if (
            batched is None
            or threading.get_ident() != self._batch_thread
            or self._state in _REFUSING  # (kazoo fails the request itself)
        ):
            return super()._call(request, async_object)
        self._queue.append((request, async_object))
        batched.append(async_object)
        return None

    def _wake(self, batched: list[Any]) -> None:
        write_sock = self._connection._write_sock
        try:
            if write_sock is None:
                raise ConnectionClosedError("Connection has been closed")
            write_sock.sendall(b"\0" * len(batched))
        except Exception:
            for async_object in batched:
                async_object.set_exception(ConnectionClosedError("Connection has been closed"))
