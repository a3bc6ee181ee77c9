"""Many znodes read at once (a replica's preload before it says it is ready, the re-read of the
whole cache after a reconnect): pipelined, a window of reads in flight, and their replies handed
to the event loop in batches.

A lookup's read (zk_reader.start) costs a pending-read object, a timer and one hand-over from
kazoo's thread per reply (a write to the loop's self-pipe and a turn of the loop): hundreds of
microseconds of CPU each on a busy machine. Here a reply is appended to a queue on kazoo's
thread, and only the first reply of a batch wakes the loop, which stores every reply queued so
far (in slices of SLICE, so that lookups on other sockets go on in between) and sends as many
new reads as it stored. One deadline for the whole read: it fails when no reply came for
`timeout` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import deque
from collections.abc import Sequence
from typing import Any

from kazoo.exceptions import NoNodeError

from pulsar_lookup_gateway.lookup.errors import LookupFailure
from pulsar_lookup_gateway.metadata_store.kazoo_threads import HandedResult
from pulsar_lookup_gateway.metadata_store.zk_reader import CHILDREN, ZnodeReader, unavailable
from pulsar_lookup_gateway.metadata_store.zk_session import ZkSession

WINDOW = 2000  # reads in flight at once (kazoo holds each one's request and result)
SLICE = 500  # replies stored per turn of the loop


class BulkRead:
    """Read `paths` (nodes; a path ending in CHILDREN: that node's children list) into the
    view with their watches, or, `watched` False, only list children (no watch, nothing
    stored: lists read to find what to read). `run()` returns the children of every list read
    (absent parent: no entry) and raises the first failure."""

    def __init__(
        self,
        reader: ZnodeReader,
        session: ZkSession,
        paths: Sequence[str],
        *,
        watched: bool,
        timeout: float,
    ) -> None:
        self._reader = reader
        self._session = session
        self._generation = session.generation
        self._paths = list(dict.fromkeys(paths))
        self._watched = watched
        self._timeout = timeout
        self._next = 0
        self._stored = 0
        # (path, reply) appended on kazoo's thread; a drain of the loop takes them
        self._replies: deque[tuple[str, HandedResult]] = deque()
        self._woken = False  # a drain is scheduled (set on kazoo's thread, cleared on the loop)
        self._lists: dict[str, list[str]] = {}
        self._failure: LookupFailure | None = None
        self._done: asyncio.Future[None] | None = None

    async def run(self) -> dict[str, list[str]]:
        self._done = asyncio.get_running_loop().create_future()
        if not self._paths:
            return self._lists
        self._send(WINDOW)
        stored = -1
        while not self._done.done():
            # (no progress for `timeout` seconds: ZooKeeper is not answering)
            if self._stored == stored:
                self._fail(unavailable(f"reading {len(self._paths)} znodes timed out"))
                break
            stored = self._stored
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._done), self._timeout)
        await self._done
        return self._lists

    def _send(self, count: int) -> None:
        reader, watched = self._reader, self._watched
        end = min(self._next + count, len(self._paths))
        with reader.batch():  # (one wake-up of kazoo's connection thread for them all)
            for path in self._paths[self._next : end]:
                try:
                    sent = reader.send(path, watched=watched)
                except Exception as exc:  # kazoo refused the call itself (an invalid path)
                    self._fail(unavailable(f"reading {path} from ZooKeeper failed: {exc!r}"))
                    return
                reader.reads += 1
                sent.when_done(functools.partial(self._replied, path))
        self._next = end

    def _replied(self, path: str, result: HandedResult) -> None:  # on kazoo's thread
        self._replies.append((path, result))
        if not self._woken:
            self._woken = True
            loop = self._session.loop
            if loop is not None:
                with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting
                    loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        """On the loop: store up to SLICE replies, send as many new reads, and come back on
        the next turn if more are queued."""
        done = self._done
        if done is None or done.done():
            return
        if self._session.generation != self._generation:
            self._fail(unavailable("ZooKeeper session was lost"))
            return
        self._woken = False
        replies, count = self._replies, 0
        while replies and count < SLICE:
            path, result = replies.popleft()
            count += 1
            failure = self._store(path, result)
            if failure is not None:
                self._fail(failure)
                return
        self._stored += count
        if self._stored == len(self._paths):
            done.set_result(None)
            return
        self._send(count)
        if replies and not self._woken:
            self._woken = True
            asyncio.get_running_loop().call_soon(self._drain)

    def _store(self, path: str, result: HandedResult) -> LookupFailure | None:
        if self._watched:
            failure = self._reader.store(path, result)
            if failure is None and path.endswith(CHILDREN) and result.successful():
                self._lists[path] = list(result.value[0])
            return failure
        if result.successful():
            value: Any = result.value
            self._lists[path] = list(value[0])
            return None
        if isinstance(result.exception, NoNodeError):
            return None
        return unavailable(f"reading {path} from ZooKeeper failed: {result.exception!r}")

    def _fail(self, failure: LookupFailure) -> None:
        if self._failure is None:
            self._failure = failure
        if self._done is not None and not self._done.done():
            self._done.set_exception(failure)
