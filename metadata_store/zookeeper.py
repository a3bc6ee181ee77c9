"""`zk:` metadata: znodes read on first use, cached, and kept fresh by ZooKeeper watches.

kazoo runs its callbacks on its own threads; every result is handed to the event loop with
`call_soon_threadsafe`, and the view is only ever touched on the loop. The loop never blocks
on ZooKeeper.

A change reaches the view in as few thread hand-overs as possible, since each one waits for a
thread to be scheduled and to take the GIL from a loop that may be busy with lookups: the watch
event and the reply of its re-read are handed to the loop from kazoo's connection thread itself
(kazoo_threads), and that thread sends the re-read as soon as the watch fires, before the loop
hears of it.

Connection states (kazoo): SUSPENDED keeps the cache and serves it (stale); LOST means the
session expired and its watches are gone, so the cache is dropped and rebuilt on reconnect.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable
from typing import Any, cast

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import WatchedEvent
from kazoo.retry import KazooRetry

from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure, NodeNotLoaded
from pulsar_lookup_gateway.lookup.model import BROKERS_ROOT, LEADER_PATH
from pulsar_lookup_gateway.lookup.source import SourceStatus
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.metadata_store.kazoo_threads import HandedResult, LoopHandler, inline
from pulsar_lookup_gateway.metadata_store.outage_log import OUTAGE_REMINDER, OutageLog, QuietRetries
from pulsar_lookup_gateway.metadata_store.pending_read import PendingRead
from pulsar_lookup_gateway.metadata_store.url import MetadataUrl

log = logging.getLogger(__name__)

CHILDREN = "/"  # suffix of a fetch path that asks for a node's children
LEADER_PARENT = LEADER_PATH.rpartition("/")[0]
# Read at every (re)connect: the brokers, and /loadbalance's children, which say whether the
# leader node exists.
WARM_PATHS = (BROKERS_ROOT + CHILDREN, LEADER_PARENT + CHILDREN, LEADER_PATH)
WARM_BATCH = 5000  # re-reads in flight at once after a reconnect
RE_READ = ("CHILD", "CREATED", "CHANGED", "DELETED")  # watch events that call for a re-read


KAZOO_LOG = logging.getLogger("kazoo.client")
KAZOO_LOG.addFilter(QuietRetries(OUTAGE_REMINDER))


class ZooKeeperSource:
    def __init__(
        self,
        url: MetadataUrl,
        *,
        session_timeout: float = 10.0,
        read_timeout: float = 2.0,
        start_timeout: float = 10.0,
        outage_reminder: float = OUTAGE_REMINDER,
        warm_paths: tuple[str, ...] = WARM_PATHS,
    ) -> None:
        """`warm_paths`: what every (re)connect reads before the source is ready (a separate
        configuration store holds no brokers: it warms nothing but what the cache holds)."""
        self.url = url
        self.warm_paths = warm_paths
        self.read_timeout = read_timeout
        self.start_timeout = start_timeout
        self._client = KazooClient(
            hosts=url.connect_string,
            timeout=session_timeout,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0),
            logger=KAZOO_LOG,
            handler=LoopHandler(),
        )
        self.outage = OutageLog(url, outage_reminder)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._view = ClusterView(complete=False)
        self._inflight: dict[str, PendingRead] = {}
        self._generation = 0  # bumped on session loss; results of older reads are dropped
        self._connected = False
        self._warm = False
        self._ever_connected = False
        self._suspended_since: float | None = None
        self._warm_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # children re-reads after a watch
        self._warmed = asyncio.Event()
        self._closing = False
        self.reads = 0  # ZooKeeper reads issued; concurrent misses for one node share one
        #: Where the time goes from a watch to the view (bench.freshness): called with
        #: (stage, path) on kazoo's threads and on the loop; None costs one test per event.
        self.trace: Callable[[str, str], None] | None = None

    @property
    def view(self) -> ClusterView:
        return self._view

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Connect in the background; wait (bounded) until the cache is warm."""
        self._loop = asyncio.get_running_loop()
        self._client.add_listener(self._on_state)
        self._client.start_async()
        try:
            await asyncio.wait_for(self._warmed.wait(), self.start_timeout)
        except TimeoutError:
            if not self._connected:
                self._outage_began(f"not connected after {self.start_timeout:.0f}s")
            else:
                log.warning("%s: not ready after %.0fs; lookups fail until it is", self.url,
                            self.start_timeout)  # fmt: skip

    async def close(self) -> None:
        self._closing = True
        self.outage.closing = True
        self.outage.cancel()
        for task in list(self._tasks):
            task.cancel()
        if self._warm_task is not None:
            self._warm_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._warm_task
        self._connected = False
        self._fail_inflight("the metadata source is closing")
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._client.stop)
        await loop.run_in_executor(None, self._client.close)

    def status(self) -> SourceStatus:
        if self._connected and self._warm:
            return SourceStatus(True, "")
        if self._suspended_since is not None and self._ever_connected:
            lag = time.monotonic() - self._suspended_since
            reason = f"ZooKeeper connection suspended for {lag:.1f}s; serving cached metadata"
            return SourceStatus(False, reason, stale=True)
        if self._connected:
            return SourceStatus(False, f"reading cluster metadata from {self.url}")
        return SourceStatus(False, f"not connected to ZooKeeper at {self.url}")

    # -- reads --------------------------------------------------------------------------

    async def fetch(self, path: str) -> None:
        if not self._connected:
            raise self._unavailable(f"ZooKeeper at {self.url} is not reachable")
        read = self._inflight.get(path) or self._start_read(path)
        await read.wait()  # the read's LookupFailure, if it failed or its deadline passed
        if path == BROKERS_ROOT + CHILDREN:
            await self._fetch_children_data(BROKERS_ROOT)

    async def _fetch_children_data(self, parent: str) -> None:
        # A lookup that lists brokers reads every registration: read them together.
        view = self._view
        missing = []
        for name in view.children(parent):
            child = f"{parent}/{name}"
            try:
                view.exists(child)
            except NodeNotLoaded:
                missing.append(child)
        if missing:
            await asyncio.gather(*(self.fetch(child) for child in missing))

    def _start_read(
        self, path: str, timeout: float | None = None, sent: HandedResult | None = None
    ) -> PendingRead:
        """Ask ZooKeeper for `path` (and set its watch), or follow `sent`, that read already
        sent (and maybe answered). The read is listed for other lookups of the same path only
        once kazoo took it, and ends by its own deadline whatever ZooKeeper does: one timer
        per read, however many lookups wait on it."""
        loop = self._loop
        assert loop is not None
        read = PendingRead(path)
        generation = self._generation
        try:
            result = sent if sent is not None else self._send_read(path)
        except Exception as exc:  # kazoo refused the call itself (a path it finds invalid)
            read.finish(self._read_error(path, exc))
            return read
        self.reads += 1
        self._inflight[path] = read
        read.deadline = loop.call_later(
            timeout or self.read_timeout,
            self._finish,
            read,
            self._unavailable(f"reading {path} from ZooKeeper timed out"),
        )
        if path.endswith(CHILDREN):
            parent = path[: -len(CHILDREN)]
            self._when_done(
                result, path, lambda r: self._children_read(read, parent, generation, r)
            )
        else:
            self._when_done(result, path, lambda r: self._data_read(read, generation, r))
        return read

    def _send_read(self, path: str) -> HandedResult:
        """Send the read of `path` (a node, or with CHILDREN its children list) with its watch:
        on the loop, or on kazoo's connection thread when a watch fires."""
        if path.endswith(CHILDREN):
            # (with the parent's stat: its pzxid dates the list, for the ownership watch)
            parent = path[: -len(CHILDREN)]
            result = self._client.get_children_async(
                parent, watch=self._on_watch, include_data=True
            )
        else:
            result = self._client.get_async(path, watch=self._on_watch)
        return cast(HandedResult, result)  # (LoopHandler's results)

    def _when_done(
        self, result: HandedResult, path: str, then: Callable[[HandedResult], None]
    ) -> None:
        """Run `then(result)` on the event loop once kazoo completes `result`: at once if it
        is complete (a watch's re-read reaches the loop with its reply)."""
        if result.ready():
            then(result)
            return
        loop = self._loop
        assert loop is not None

        def hand_over(done: HandedResult) -> None:  # on kazoo's connection thread
            if self.trace is not None:
                self.trace("reply", path)
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting
                loop.call_soon_threadsafe(then, done)

        result.when_done(hand_over)

    def _data_read(self, read: PendingRead, generation: int, result: HandedResult) -> None:
        path = read.path
        if generation != self._generation:
            return self._finish(read, self._unavailable("ZooKeeper session was lost"))
        if result.successful():
            data, stat = result.value
            self._view.put_bytes(path, data or b"", (stat.czxid, stat.mzxid))
            if self.trace is not None:
                self.trace("view", path)
            return self._finish(read, None)
        if isinstance(result.exception, NoNodeError):
            # Gone since its parent listed it. No watch of its own: the parent's children
            # watch says when it is back (the view reads existence from children lists).
            self._view.put_absent(path)
            return self._finish(read, None)
        return self._finish(read, self._read_error(path, result.exception))

    def _children_read(
        self, read: PendingRead, parent: str, generation: int, result: HandedResult
    ) -> None:
        if generation != self._generation:
            return self._finish(read, self._unavailable("ZooKeeper session was lost"))
        if result.successful():
            children, stat = result.value
            self._view.set_children(parent, children, stat.pzxid)
            return self._finish(read, None)
        if isinstance(result.exception, NoNodeError):
            # A parent of real entities that does not exist yet (a namespace with no owned
            # bundle): watch for its creation. Made-up names never get here, their own
            # parents' lists do not name them.
            self._view.set_children(parent, [])
            exists = self._client.exists_async(parent, watch=self._on_watch)
            self._when_done(exists, parent, lambda r: None)
            return self._finish(read, None)
        return self._finish(read, self._read_error(parent, result.exception))

    def _finish(self, read: PendingRead, error: LookupFailure | None) -> None:
        """End one read for all its waiters; a newer read of the same path may be listed."""
        if self._inflight.get(read.path) is read:
            del self._inflight[read.path]
        read.finish(error)

    def _read_error(self, path: str, exc: BaseException | None) -> LookupFailure:
        return self._unavailable(f"reading {path} from ZooKeeper failed: {exc!r}")

    @staticmethod
    def _unavailable(message: str) -> LookupFailure:
        return LookupFailure(FailureKind.METADATA_UNAVAILABLE, message)

    def _fail_inflight(self, message: str) -> None:
        inflight, self._inflight = self._inflight, {}
        for read in inflight.values():
            read.finish(self._unavailable(message))

    # -- watches and connection states (called on kazoo's connection thread) ---------------

    @inline
    def _on_watch(self, event: WatchedEvent) -> None:
        path = event.path
        if path is None:
            return
        if self.trace is not None:
            self.trace("watch", path)
        if self._connected and not self._closing and event.type in RE_READ:
            # The re-read goes out now, and the loop hears of the watch with its reply: one
            # turn of a loop busy with lookups, not two, and one hand-over. (A stale
            # `_connected` costs at most a read the loop drops.)
            try:
                sent = self._send_read(path + CHILDREN if event.type == "CHILD" else path)
            except Exception:  # pragma: no cover - (the loop sends it again, and reports it)
                pass
            else:
                sent.when_done(functools.partial(self._replied, event, self._generation))
                return
        self._call_on_loop(self._watch_fired, event)

    def _replied(self, event: WatchedEvent, generation: int, sent: HandedResult) -> None:
        if self.trace is not None and event.path is not None:
            self.trace("reply", event.path)
        self._call_on_loop(self._watch_fired, event, sent, generation)

    def _on_state(self, state: str) -> None:
        self._call_on_loop(self._state_changed, state)

    def _call_on_loop(self, func: Callable[..., None], *args: Any) -> None:
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(func, *args)

    def _watch_fired(
        self, event: WatchedEvent, sent: HandedResult | None = None, generation: int = -1
    ) -> None:
        """`sent`: the re-read _on_watch sent, complete, if it did, in session `generation`."""
        if not self._connected or event.path is None:
            return
        if sent is not None and generation != self._generation:
            sent = None  # (read in a lost session: its watch went with it)
        if self.trace is not None:
            self.trace("watch-loop", event.path)
        if event.type == "CHILD":
            self._refresh(event.path + CHILDREN, sent)
        elif event.type in RE_READ:
            self._refresh(event.path, sent)
            if event.type != "CHANGED" and self._view.lists_children_of(event.path):
                # A parent whose children decide existence appeared or went: list it again.
                self._refresh(event.path + CHILDREN)

    def _refresh(self, path: str, sent: HandedResult | None = None) -> None:
        """Re-read a node a watch said changed; the cache serves the old value until then."""
        self._start_read(path, sent=sent)
        if path == BROKERS_ROOT + CHILDREN and self._loop is not None:
            task = self._loop.create_task(self._fetch_children_after(path))
            self._tasks.add(task)  # a reference, or the loop may collect it while it runs
            task.add_done_callback(self._tasks.discard)
            task.add_done_callback(_consume_exception)

    async def _fetch_children_after(self, path: str) -> None:
        read = self._inflight.get(path)
        if read is not None:
            await read.wait()
        await self._fetch_children_data(path[: -len(CHILDREN)])

    def _state_changed(self, state: str) -> None:
        if state == KazooState.SUSPENDED:
            # kazoo drops every watch on a connection loss: the cache may now lag the cluster.
            self._connected = False
            self._warm = False
            self._suspended_since = time.monotonic()
            self._outage_began("connection lost; serving cached metadata")
        elif state == KazooState.LOST:
            self._connected = False
            self._warm = False
            self._generation += 1
            view, self._view = self._view, ClusterView(complete=False)
            view.hand_over(self._view)  # (the ownership watch re-reads what it watches)
            self._fail_inflight("ZooKeeper session was lost")
            self._suspended_since = None
            if not self._closing:
                log.warning("%s: session lost; the metadata cache is dropped", self.url)
        elif state == KazooState.CONNECTED:
            self._connected = True
            self._ever_connected = True
            self.outage.ended()
            if self._loop is not None:
                if self._warm_task is not None:
                    self._warm_task.cancel()
                self._warm_task = self._loop.create_task(self._warm_up())

    def _outage_began(self, what: str) -> None:
        if self._loop is not None:
            self.outage.began(self._loop, what)

    async def _warm_up(self) -> None:
        """Read what every lookup needs (brokers, leader), and re-read (re-watch) everything
        the cache already holds, before calling the source ready."""
        generation = self._generation
        for attempt in range(1, 1_000_000):
            paths = list(dict.fromkeys([*self.warm_paths, *self._view.known_paths()]))
            try:
                for start in range(0, len(paths), WARM_BATCH):
                    # A batch is pipelined: its reads share a longer deadline than one lookup's.
                    batch = [
                        self._start_read(p, self.read_timeout * 10)
                        for p in paths[start : start + WARM_BATCH]
                    ]
                    await asyncio.gather(*(read.wait() for read in batch))
                if BROKERS_ROOT + CHILDREN in self.warm_paths:
                    await self._fetch_children_data(BROKERS_ROOT)
            except (LookupFailure, TimeoutError) as exc:
                if not self._connected or generation != self._generation:
                    return  # the next CONNECTED starts another warm-up
                log.warning("%s: warm-up attempt %d failed: %s", self.url, attempt, exc)
                await asyncio.sleep(min(0.1 * attempt, 1.0))
                continue
            if generation == self._generation and self._connected:
                self._warm = True
                self._suspended_since = None
                self._warmed.set()
                if BROKERS_ROOT + CHILDREN in self.warm_paths:
                    brokers = len(self._view.broker_registry().brokers)
                    log.info("%s: ready (%d brokers, %d znodes)", self.url, brokers, len(paths))
                else:
                    log.info("%s: ready (%d znodes)", self.url, len(paths))
            return


def _consume_exception(future: asyncio.Future[Any]) -> None:
    # A task nobody awaits must not log "never retrieved".
    if not future.cancelled():
        future.exception()
