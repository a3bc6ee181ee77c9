"""The read path of the `zk:` source: znodes read into the view, one read in flight per path.

A read sets its node's watch (zk_watches follows it) and ends by its own deadline whatever
ZooKeeper does; every lookup that misses the same node waits on that one read. kazoo completes
a read on its connection thread, which hands the reply to the event loop; the view is only ever
written on the loop. A reply of a session that was lost since is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import cast

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import WatchedEvent

from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure, NodeNotLoaded
from pulsar_lookup_gateway.lookup.model import BROKERS_ROOT
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.metadata_store.kazoo_threads import HandedResult
from pulsar_lookup_gateway.metadata_store.pending_read import PendingRead
from pulsar_lookup_gateway.metadata_store.zk_session import ZkSession

CHILDREN = "/"  # suffix of a fetch path that asks for a node's children
#: Where the time goes from a watch to the view (bench.freshness): called with (stage, path)
#: on kazoo's threads and on the loop.
Trace = Callable[[str, str], None]


def unavailable(message: str) -> LookupFailure:
    return LookupFailure(FailureKind.METADATA_UNAVAILABLE, message)


def _no_watch(event: WatchedEvent) -> None:  # pragma: no cover - (replaced before any read)
    pass


class ZnodeReader:
    def __init__(self, client: KazooClient, session: ZkSession, read_timeout: float) -> None:
        self._client = client
        self._session = session
        self.read_timeout = read_timeout
        self.view = ClusterView(complete=False)
        self._inflight: dict[str, PendingRead] = {}
        self.reads = 0  # ZooKeeper reads issued; concurrent misses for one node share one
        self.trace: Trace | None = None  # None costs one test per event
        #: The watch every read sets: zk_watches.ZnodeWatches sets its own here.
        self.watch: Callable[[WatchedEvent], None] = _no_watch

    async def fetch(self, path: str) -> None:
        if not self._session.connected:
            raise unavailable(f"ZooKeeper at {self._session.url} is not reachable")
        read = self._inflight.get(path) or self.start(path)
        await read.wait()  # the read's LookupFailure, if it failed or its deadline passed
        if path == BROKERS_ROOT + CHILDREN:
            await self.fetch_children(BROKERS_ROOT)

    async def fetch_children(self, parent: str) -> None:
        # A lookup that lists brokers reads every registration: read them together.
        view = self.view
        missing = []
        for name in view.children(parent):
            child = f"{parent}/{name}"
            try:
                view.exists(child)
            except NodeNotLoaded:
                missing.append(child)
        if missing:
            await asyncio.gather(*(self.fetch(child) for child in missing))

    def in_flight(self, path: str) -> PendingRead | None:
        return self._inflight.get(path)

    def start(
        self, path: str, timeout: float | None = None, sent: HandedResult | None = None
    ) -> PendingRead:
        """Ask ZooKeeper for `path` (and set its watch), or follow `sent`, that read already
        sent (and maybe answered). The read is listed for other lookups of the same path only
        once kazoo took it, and ends by its own deadline whatever ZooKeeper does: one timer
        per read, however many lookups wait on it."""
        loop = self._session.loop
        assert loop is not None
        read = PendingRead(path)
        generation = self._session.generation
        try:
            result = sent if sent is not None else self.send(path)
        except Exception as exc:  # kazoo refused the call itself (a path it finds invalid)
            read.finish(self._read_error(path, exc))
            return read
        self.reads += 1
        self._inflight[path] = read
        read.deadline = loop.call_later(
            timeout or self.read_timeout,
            self._finish,
            read,
            unavailable(f"reading {path} from ZooKeeper timed out"),
        )
        self._when_done(result, path, lambda r: self._read(read, generation, r))
        return read

    def batch(self) -> contextlib.AbstractContextManager[object]:
        """Reads sent in this block wake kazoo's connection thread once (BatchingClient)."""
        batch = getattr(self._client, "batch", None)
        return batch() if batch is not None else contextlib.nullcontext()

    def send(self, path: str, *, watched: bool = True) -> HandedResult:
        """Send the read of `path` (a node, or with CHILDREN its children list) with its watch
        (`watched` False: none, for a list read only to find what to read): on the loop, or on
        kazoo's connection thread when a watch fires."""
        watch = self.watch if watched else None
        if path.endswith(CHILDREN):
            # (with the parent's stat: its pzxid dates the list, for the ownership watch)
            parent = path[: -len(CHILDREN)]
            result = self._client.get_children_async(parent, watch=watch, include_data=True)
        else:
            result = self._client.get_async(path, watch=watch)
        return cast(HandedResult, result)  # (LoopHandler's results)

    def _when_done(
        self, result: HandedResult, path: str, then: Callable[[HandedResult], None]
    ) -> None:
        """Run `then(result)` on the event loop once kazoo completes `result`: at once if it
        is complete (a watch's re-read reaches the loop with its reply)."""
        if result.ready():
            then(result)
            return
        loop = self._session.loop
        assert loop is not None

        def hand_over(done: HandedResult) -> None:  # on kazoo's connection thread
            if self.trace is not None:
                self.trace("reply", path)
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting
                loop.call_soon_threadsafe(then, done)

        result.when_done(hand_over)

    def _read(self, read: PendingRead, generation: int, result: HandedResult) -> None:
        if generation != self._session.generation:
            return self._finish(read, unavailable("ZooKeeper session was lost"))
        self._finish(read, self.store(read.path, result))
        if self.trace is not None:
            self.trace("view", read.path)

    def store(self, path: str, result: HandedResult) -> LookupFailure | None:
        """Write the reply to the read of `path` (sent by `send`, complete, of this session)
        into the view; the failure if it failed."""
        if path.endswith(CHILDREN):
            parent = path[: -len(CHILDREN)]
            if result.successful():
                children, stat = result.value
                self.view.set_children(parent, children, stat.pzxid)
                return None
            if isinstance(result.exception, NoNodeError):
                # A parent of real entities that does not exist yet (a namespace with no owned
                # bundle): watch for its creation. Made-up names never get here, their own
                # parents' lists do not name them.
                self.view.set_children(parent, [])
                exists = self._client.exists_async(parent, watch=self.watch)
                self._when_done(exists, parent, lambda r: None)
                return None
            return self._read_error(parent, result.exception)
        if result.successful():
            data, stat = result.value
            self.view.put_bytes(path, data or b"", (stat.czxid, stat.mzxid))
            return None
        if isinstance(result.exception, NoNodeError):
            # Gone since its parent listed it. No watch of its own: the parent's children
            # watch says when it is back (the view reads existence from children lists).
            self.view.put_absent(path)
            return None
        return self._read_error(path, result.exception)

    def _finish(self, read: PendingRead, error: LookupFailure | None) -> None:
        """End one read for all its waiters; a newer read of the same path may be listed."""
        if self._inflight.get(read.path) is read:
            del self._inflight[read.path]
        read.finish(error)

    def _read_error(self, path: str, exc: BaseException | None) -> LookupFailure:
        return unavailable(f"reading {path} from ZooKeeper failed: {exc!r}")

    def fail_all(self, message: str) -> None:
        """End every read in flight with `message`."""
        inflight, self._inflight = self._inflight, {}
        for read in inflight.values():
            read.finish(unavailable(message))

    def session_lost(self) -> None:
        """The session expired, its watches with it: a new, empty view takes the old one's
        observers (the ownership watch re-reads what it watches), and every read fails."""
        view, self.view = self.view, ClusterView(complete=False)
        view.hand_over(self.view)
        self.fail_all("ZooKeeper session was lost")
