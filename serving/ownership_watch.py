"""The ownership watch: the topics streams watch, each answered once for everyone who watches
it with the same listener and role, and answered again when the metadata behind it changes.

The metadata source writes every change into its ClusterView, which tells its observers the
path (ClusterView.observe); `ownership_changes.keys_of_path` maps the path to the keys answers
are indexed by, and only the topics under those keys are looked up again, with the lookup
service (the same answer, URLs and authorization as `/lookup/v2/topic`). A topic's new state is
handed to its streams when it differs from the last one (a newer generation or another answer).

No I/O here: the streams (http_api.watch) send. Lookups run on up to CONCURRENCY tasks; a
topic is looked up again after RETRY_INTERVAL while its state cannot be told. Lookups after a
change (and retries) come first: a push never waits behind a subscribe. First lookups are taken
FIRST_BATCH at a time from each subscribing stream in turn: a stream that subscribes 10,000
topics delays another's first answers by a batch, not by its 10,000.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections import OrderedDict, deque
from collections.abc import Iterable
from typing import Protocol

from pulsar_lookup_gateway.lookup.errors import LookupFailure, NodeNotLoaded
from pulsar_lookup_gateway.lookup.ownership_changes import (
    ABSENT,
    ALL,
    TRANSIENT_FAILURES,
    ErrorCode,
    Key,
    TopicState,
    TopicStateKind,
    absence_paths,
    answered_state,
    depends_on,
    error_state,
    failed_state,
    keys_of_path,
    registration_print,
    supersedes,
)
from pulsar_lookup_gateway.lookup.selection import ListenerChoice
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.serving.service import LookupService

log = logging.getLogger(__name__)

#: Topics not found under one list beyond which a write of the list walks the list, not them
#: (640,000 made-up names checked one by one: ~0.2 s of the loop per ledger created).
SCAN_LIST_ABOVE = 4096

PROTOCOL = "watch"  # the protocol label of the lookups the watch makes
CONCURRENCY = 32  # lookups in flight for the watch
RETRY_INTERVAL = 1.0  # seconds before a topic whose state cannot be told is tried again
FIRST_ANSWER_WAIT = 5.0  # seconds a subscribe waits for its topics' first lookups
#: Lookups of one topic while the metadata keeps changing under them (then: tried again later).
ATTEMPTS = 3
HOLD_LIMIT = 0.25  # seconds the garbage collector may be held off at most (CollectionHold)
STATES_KEPT = 10_000  # distinct states shared between topics
YIELD_EVERY = 64  # lookups the workers make in one loop iteration, all together
SUBSCRIBE_YIELD_EVERY = 256  # topics a subscribe takes in before it lets other tasks run
FIRST_BATCH = 16  # first lookups of one stream taken in a row (then the next stream's)
UNAVAILABLE = "the gateway cannot read this topic's metadata now; it keeps trying"


class Sink(Protocol):
    """A stream: takes the messages about the topics it watches."""

    def deliver(self, topic: str, message: str) -> None: ...


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


class _Entry:
    """One topic watched with one listener choice and role, by one or more streams."""

    __slots__ = (
        "absent", "choice", "first", "keys", "message", "queued", "removed", "role", "sinks",
        "state", "topic",
    )  # fmt: skip

    def __init__(self, topic: TopicName, choice: ListenerChoice, role: str | None) -> None:
        self.topic = topic
        self.choice = choice
        self.role = role
        # The streams that watch it: one (the common case, no set), or a set of them.
        self.sinks: Sink | set[Sink] | None = None
        self.state: TopicState | None = None  # last told
        self.message: str | None = None  # its JSON
        self.keys: frozenset[Key] = frozenset()
        self.absent: tuple[str, ...] = ()  # its nodes it waits for (not found)
        self.removed = False
        self.queued = False  # waiting in a queue for its lookup
        self.first: asyncio.Future[None] | None = None  # done once first looked up

    def add(self, sink: Sink) -> None:
        sinks = self.sinks
        if sinks is None or sinks is sink:
            self.sinks = sink
        elif isinstance(sinks, set):
            sinks.add(sink)
        else:
            self.sinks = {sinks, sink}

    def discard(self, sink: Sink) -> bool:
        """Remove `sink`; True when no stream watches the topic any more."""
        sinks = self.sinks
        if sinks is sink:
            self.sinks = None
        elif isinstance(sinks, set):
            sinks.discard(sink)
            if len(sinks) == 1:
                self.sinks = next(iter(sinks))
        return self.sinks is None

    def watchers(self) -> list[Sink]:
        sinks = self.sinks
        if sinks is None:
            return []
        return list(sinks) if isinstance(sinks, set) else [sinks]


class OwnershipWatch:
    def __init__(self, service: LookupService) -> None:
        self.service = service
        # (listener choice, role) -> topic -> entry (a dict per route, not a key per topic)
        self._entries: dict[tuple[ListenerChoice, str | None], dict[str, _Entry]] = {}
        self._count = 0
        self._index: dict[Key, set[_Entry]] = {}
        # Topics not found, by the nodes whose appearance may change that: parent -> name ->
        # entries (a list written tells its parent: its watched names are checked in it).
        self._absent: dict[str, dict[str, set[_Entry]]] = {}
        self._appeared: set[str] = set()  # nodes (or parents + "/") written since the flush
        # To look up: again after a change (first), and for the first time, per stream
        # (taken FIRST_BATCH at a time from each in turn).
        self._again: OrderedDict[_Entry, None] = OrderedDict()
        self._firsts: OrderedDict[Sink, deque[_Entry]] = OrderedDict()
        self._taken = 0  # first lookups taken in a row from the stream in front
        self._burst = 0  # lookups started in this loop iteration
        self._workers = 0
        self._dirty: set[Key] = set()
        self._flush: asyncio.Handle | None = None
        self._retry: set[_Entry] = set()
        self._retry_timer: asyncio.TimerHandle | None = None
        self._prints: dict[str, object] = {}  # broker id -> registration_print
        self._states: dict[tuple[object, ...], TopicState] = {}
        self._hold = CollectionHold()
        self._tasks: set[asyncio.Task[None]] = set()
        self._observed: ClusterView | None = None
        self.lookups = 0  # made for the watch (tests and the benchmark read it)

    @property
    def topics(self) -> int:
        return self._count

    # -- streams --------------------------------------------------------------------------

    async def subscribe(
        self, sink: Sink, topics: Iterable[TopicName], choice: ListenerChoice, role: str | None
    ) -> None:
        """Watch `topics` for `sink`; returns once each was looked up (or FIRST_ANSWER_WAIT
        passed): a stream reads its next request only then, so one client has one batch of
        lookups in flight at most."""
        self._observe()
        waiting: list[asyncio.Future[None]] = []
        route = (choice, role)
        loop = asyncio.get_running_loop()
        for count, topic in enumerate(topics, 1):
            if count % SUBSCRIBE_YIELD_EVERY == 0:
                await asyncio.sleep(0)  # (other streams' messages and requests meanwhile)
            entries = self._entries.setdefault(route, {})  # (a drop may have removed it)
            entry = entries.get(topic.full)
            if entry is None:
                entry = entries[topic.full] = _Entry(topic, choice, role)
                self._count += 1
                entry.first = loop.create_future()
                entry.queued = True
                self._firsts.setdefault(sink, deque()).append(entry)
                self._start_workers()
            entry.add(sink)
            if entry.message is not None:
                sink.deliver(topic.full, entry.message)
            elif entry.first is not None and not entry.first.done():
                waiting.append(entry.first)
        if waiting:
            await asyncio.wait(waiting, timeout=FIRST_ANSWER_WAIT)

    def unsubscribe(
        self, sink: Sink, topics: Iterable[str], choice: ListenerChoice, role: str | None
    ) -> None:
        entries = self._entries.get((choice, role), {})
        for topic in topics:
            entry = entries.get(topic)
            if entry is not None and entry.discard(sink):
                self._drop(entry)

    def _drop(self, entry: _Entry) -> None:
        entry.removed = True
        route = (entry.choice, entry.role)
        entries = self._entries[route]
        del entries[entry.topic.full]
        if not entries:
            del self._entries[route]
        self._count -= 1
        self._index_keys(entry, frozenset())
        self._again.pop(entry, None)  # (in a stream's first lookups: skipped when taken)
        self._retry.discard(entry)
        if entry.first is not None and not entry.first.done():
            entry.first.set_result(None)

    async def close(self) -> None:
        self._hold.release()
        if self._observed is not None:
            self.service.source.view.unobserve(self._changed)  # (the view it was handed to)
            self._observed = None
        for handle in (self._flush, self._retry_timer):
            if handle is not None:
                handle.cancel()
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- changes --------------------------------------------------------------------------

    def _observe(self) -> None:
        """Hear the source's writes (once; a source hands its observers to a view that
        replaces this one)."""
        if self._observed is None:
            self._observed = self.service.source.view
            self._observed.observe(self._changed)

    def _changed(self, path: str) -> None:
        """A write to the view (on the loop): note its keys, look them up soon (all the
        writes of one loop iteration together)."""
        if not self._entries:
            return
        self._dirty.update(keys_of_path(path))
        parent = path[:-1] if path.endswith("/") else path.rpartition("/")[0]
        if parent in self._absent:
            self._appeared.add(path)
        if self._flush is None and (self._dirty or self._appeared):
            self._flush = asyncio.get_running_loop().call_soon(self._look_again)

    def _look_again(self) -> None:
        self._flush = None
        keys, self._dirty = self._dirty, set()
        before = len(self._again)
        self._queue_again(keys)
        self._queue_appeared()
        if len(self._again) > before:  # (a load report queues nothing: the collector runs)
            self._hold.begin()

    def _queue_again(self, keys: set[Key]) -> None:
        if ALL in keys:
            self._prints.clear()
            for entries in self._entries.values():
                for entry in entries.values():
                    self._enqueue(entry)
            return
        view = self.service.source.view
        for key in keys:
            if key[0] == "broker":
                # A registration is rewritten by every load report: only a new one, or other
                # URLs, can change an answer.
                now = registration_print(view, key[1])
                if self._prints.get(key[1], ()) == now:
                    continue
                self._prints[key[1]] = now
            for entry in self._index.get(key, ()):
                self._enqueue(entry)

    def _queue_appeared(self) -> None:
        """Look up again the topics not found whose node was written, or whose node's parent
        lists it now."""
        paths, self._appeared = self._appeared, set()
        view = self.service.source.view
        for path in paths:
            if not path.endswith("/"):
                parent, _, name = path.rpartition("/")
                for entry in self._absent.get(parent, {}).get(name, ()):
                    self._enqueue(entry)
                continue
            parent = path[:-1]
            names = self._absent.get(parent, {})
            try:
                if len(names) > SCAN_LIST_ABOVE:  # (made-up names outnumber the real ones)
                    appeared = [name for name in view.children(parent) if name in names]
                else:
                    appeared = [name for name in names if view.has_child(parent, name)]
            except NodeNotLoaded:
                appeared = list(names)  # (whatever it is now, the lookup reads it)
            for name in appeared:
                for entry in names[name]:
                    self._enqueue(entry)

    def _enqueue(self, entry: _Entry) -> None:
        """Look `entry` up again (ahead of every first lookup)."""
        if entry.queued:
            return  # (its lookup has not started: it reads the view as it is then)
        entry.queued = True
        self._again[entry] = None
        self._start_workers()

    def _start_workers(self) -> None:
        if self._workers < CONCURRENCY:
            self._workers += 1
            task = asyncio.get_running_loop().create_task(self._work())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _next(self) -> _Entry | None:
        """The next entry to look up: a change's first, then the streams' first lookups in
        turn; None when there is none."""
        while self._again or self._firsts:
            if self._again:
                entry, _ = self._again.popitem(last=False)
            else:
                sink, firsts = next(iter(self._firsts.items()))
                entry = firsts.popleft()
                self._taken += 1
                if not firsts:
                    del self._firsts[sink]
                    self._taken = 0
                elif self._taken >= FIRST_BATCH:
                    self._firsts.move_to_end(sink)
                    self._taken = 0
            entry.queued = False
            if not entry.removed:
                return entry
        return None

    async def _work(self) -> None:
        try:
            while True:
                if self._burst >= YIELD_EVERY:
                    # Warm lookups finish without waiting: the loop polls its sockets (the
                    # streams send, requests are read) before the workers go on.
                    await asyncio.sleep(0)
                entry = self._next()
                if entry is None:
                    break
                self._burst += 1
                if self._burst == 1:  # (runs after the loop's next poll)
                    asyncio.get_running_loop().call_soon(self._new_burst)
                try:
                    await self._look_up(entry)
                except Exception:  # a bug of ours must not end the watch of every topic
                    log.exception("ownership watch: looking up %s failed", entry.topic.full)
                    self._retry_later(entry)
                finally:
                    if entry.first is not None:
                        if not entry.first.done():
                            entry.first.set_result(None)
                        entry.first = None
        finally:
            self._workers -= 1
            if not self._workers and not self._again and not self._firsts:
                self._hold.end()

    def _new_burst(self) -> None:
        self._burst = 0

    async def _look_up(self, entry: _Entry) -> None:
        service = self.service
        self.lookups += 1
        for _ in range(ATTEMPTS):
            try:
                answer = await service.lookup(entry.topic, entry.choice, PROTOCOL, role=entry.role)
                view = service.source.view
                if answer.peer_cluster is None:
                    version = view.version
                    # As /lookup/v2/topic: a persistent topic that neither exists nor may be
                    # created is not found.
                    await service.check_lookup_allowed(entry.topic)
                    if service.source.view is not view or view.version != version:
                        continue  # changed while it was read: the answer may be older
                state = answered_state(answer, view)
            except LookupFailure as failure:
                state = failed_state(entry.topic, failure, service.source.view)
                if state is None and failure.kind in TRANSIENT_FAILURES:
                    self._retry_later(entry)
                    if entry.message is None:  # nothing told yet: say so, and keep trying
                        state = error_state(ErrorCode.UNAVAILABLE, UNAVAILABLE)
            if entry.removed:
                return
            if state is None:  # half-way: what settles it is watched; tried again anyway
                self._retry_later(entry)
            self._tell(entry, state)
            return
        self._retry_later(entry)

    def _tell(self, entry: _Entry, state: TopicState | None) -> None:
        """Record `state` and hand it to the streams if it is news (`supersedes`)."""
        last = entry.state
        if state is None:
            # Half-way, or of the moment: the last state holds; whatever settles it is watched.
            self._index_keys(entry, depends_on(entry.topic, last) | depends_on(entry.topic, None))
            return
        self._index_keys(entry, depends_on(entry.topic, state))
        if not supersedes(state, last):
            return
        if state.kind is TopicStateKind.OWNER and state.owner is not None:
            self._prints.setdefault(
                state.owner, registration_print(self.service.source.view, state.owner)
            )
        # Topics of one bundle share one state object (a full collection walks each one).
        key = (state, state.owner, state.bundle, state.message)
        shared = self._states.get(key)
        if shared is None:
            if len(self._states) >= STATES_KEPT:
                self._states.clear()
            shared = self._states[key] = state
        entry.state = state = shared
        topic = entry.topic.full
        message = entry.message = state.message_json(topic)
        for sink in entry.watchers():
            sink.deliver(topic, message)

    def _index_keys(self, entry: _Entry, keys: frozenset[Key]) -> None:
        if keys is entry.keys:
            return
        index = self._index
        for key in entry.keys - keys:
            entries = index.get(key)
            if entries is not None:
                entries.discard(entry)
                if not entries:
                    del index[key]
        for key in keys - entry.keys:
            index.setdefault(key, set()).add(entry)
        entry.keys = keys
        absent = any(key[0] == ABSENT for key in keys)
        if absent != bool(entry.absent):
            self._index_absent(entry, absence_paths(entry.topic) if absent else ())

    def _index_absent(self, entry: _Entry, paths: tuple[str, ...]) -> None:
        for path in entry.absent:
            parent, _, name = path.rpartition("/")
            names = self._absent.get(parent)
            entries = names.get(name) if names is not None else None
            if names is None or entries is None:
                continue
            entries.discard(entry)
            if not entries:
                del names[name]
                if not names:
                    del self._absent[parent]
        for path in paths:
            parent, _, name = path.rpartition("/")
            self._absent.setdefault(parent, {}).setdefault(name, set()).add(entry)
        entry.absent = paths

    # -- retries ----------------------------------------------------------------------------

    def _retry_later(self, entry: _Entry) -> None:
        self._retry.add(entry)
        if self._retry_timer is None:
            loop = asyncio.get_running_loop()
            self._retry_timer = loop.call_later(RETRY_INTERVAL, self._retry_now)

    def _retry_now(self) -> None:
        self._retry_timer = None
        if not self._retry:
            return
        if not self.service.source.status().ready:  # (a lost session: wait for the cache)
            self._retry_timer = asyncio.get_running_loop().call_later(
                RETRY_INTERVAL, self._retry_now
            )
            return
        retry, self._retry = self._retry, set()
        for entry in retry:
            if not entry.removed:
                self._enqueue(entry)
