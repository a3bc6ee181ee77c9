"""Running one connection's requests: each to its first suspension at once, the rest in a task,
so that pipelined requests are answered concurrently and a slow one holds up no other. A
request is a coroutine that ends in its answer frame."""

from __future__ import annotations

import asyncio
import types
from collections.abc import Callable, Coroutine, Generator
from typing import Any, TypeVar

from pulsar_lookup_gateway.listeners.binary.replies import OnError, failure

T = TypeVar("T")

#: A request of one connection: a coroutine that ends in the frame that answers it.
Request = Coroutine[Any, Any, bytes]

#: Requests of one connection waiting on metadata reads; beyond this its socket is not read until
#: some are answered (maxConcurrentLookupRequest bounds lookups across connections; this also
#: bounds PARTITIONED_METADATA, which that limit does not count).
MAX_IN_FLIGHT_PER_CONNECTION = 1024


class RequestRunner:
    """The requests of one connection in flight. `send` writes frames that are ready later;
    `busy_changed` is called when the connection reaches or leaves the in-flight cap."""

    def __init__(
        self, send: Callable[[list[bytes]], None], busy_changed: Callable[[], None]
    ) -> None:
        self._send = send
        self._busy_changed = busy_changed
        self._loop = asyncio.get_running_loop()
        self.tasks: set[asyncio.Task[None]] = set()

    @property
    def busy(self) -> bool:
        return len(self.tasks) >= MAX_IN_FLIGHT_PER_CONNECTION

    def run(self, request: Request, request_id: int, on_error: OnError, out: list[bytes]) -> None:
        """Run a request's coroutine up to its first suspension right here (a snapshot lookup
        never suspends, and so costs no task); if it suspends, a task finishes it and writes
        the answer whenever it is ready, so later requests are not held up. A request that
        fails is answered by `on_error` under its `request_id`.

        This is what Python 3.12's eager tasks do; 3.11 has no such thing.
        """
        try:
            suspended_on = request.send(None)
        except StopIteration as done:
            out.append(done.value)
            return
        except Exception as exc:
            out.append(failure(request_id, exc, on_error))
            return
        task = self._loop.create_task(
            self._finish(_resume(request, suspended_on), request_id, on_error)
        )
        self.tasks.add(task)
        task.add_done_callback(self._task_done)
        if len(self.tasks) >= MAX_IN_FLIGHT_PER_CONNECTION:
            self._busy_changed()  # read no more requests until some are answered

    def cancel(self) -> None:
        for task in list(self.tasks):
            task.cancel()

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if len(self.tasks) == MAX_IN_FLIGHT_PER_CONNECTION - 1:
            self._busy_changed()

    async def _finish(
        self, request: Coroutine[Any, Any, bytes], request_id: int, on_error: OnError
    ) -> None:
        try:
            frame = await request
        except Exception as exc:
            frame = failure(request_id, exc, on_error)
        self._send([frame])


@types.coroutine
def _resume(coro: Coroutine[Any, Any, T], suspended_on: Any) -> Generator[Any, Any, T]:
    """Continue, inside a task, a coroutine that was stepped by hand until it yielded
    ``suspended_on``: hand that to the task, then pass every value and exception through
    (``yield from`` semantics)."""
    yielded = suspended_on
    while True:
        try:
            sent = yield yielded
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:
            try:
                yielded = coro.throw(exc)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
        else:
            try:
                yielded = coro.send(sent)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
