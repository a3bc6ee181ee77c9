"""The ownership watch's lookups: the loop that turns the topics a change concerns (and newly
watched ones) into new topic states, and hands a state to the topic's streams when it is news.

Lookups run in the watch's turns (serving.watch_turns: as many in a row as a turn's time
allows) on one task, more (up to CONCURRENCY) only while those wait for reads of the metadata,
with the lookup service (the same answer, URLs and authorization as `/lookup/v2/topic`).
Lookups after a change (and retries) come first: a push never waits behind a subscribe. The
lookups' turns go ahead of the streams' (a herd's first lookup of each bundle is made before
more subscribes are taken in, and their topics are told that bundle's state without one). First
lookups are taken FIRST_BATCH at a time from each subscribing stream in turn: a stream that
subscribes 10,000 topics delays another's first answers by a batch, not by its 10,000. A
topic is looked up again after a while as long as its state cannot be told
(serving.watch_retries).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections import OrderedDict, deque

from pulsar_lookup_gateway.lookup.errors import LookupFailure, NodeNotLoaded
from pulsar_lookup_gateway.lookup.ownership_changes import (
    TRANSIENT_FAILURES,
    ErrorCode,
    TopicState,
    TopicStateKind,
    answered_state,
    depends_on,
    error_state,
    failed_state,
    supersedes,
)
from pulsar_lookup_gateway.lookup.resolve import ResponseKind
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.serving.collection_hold import CollectionHold
from pulsar_lookup_gateway.serving.service import LookupService
from pulsar_lookup_gateway.serving.watch_bundle_states import BundleState, BundleStates
from pulsar_lookup_gateway.serving.watch_firsts import FirstLookups
from pulsar_lookup_gateway.serving.watch_index import Sink, WatchedTopic, WatchIndex
from pulsar_lookup_gateway.serving.watch_messages import StateMessages
from pulsar_lookup_gateway.serving.watch_retries import Retries
from pulsar_lookup_gateway.serving.watch_told import ToldBatch
from pulsar_lookup_gateway.serving.watch_turns import Turns

log = logging.getLogger(__name__)

PROTOCOL = "watch"  # the protocol label of the lookups the watch makes
CONCURRENCY = 32  # lookups in flight for the watch
#: Lookups of one topic while the metadata keeps changing under them (then: tried again later).
ATTEMPTS = 3
FIRST_BATCH = 16  # first lookups of one stream taken in a row (then the next stream's)
UNAVAILABLE = "the gateway cannot read this topic's metadata now; it keeps trying"


class WatchLookups:
    def __init__(
        self, service: LookupService, index: WatchIndex, hold: CollectionHold, turns: Turns
    ) -> None:
        self.service = service
        self._turns = turns  # each lookup waits for its share of a loop turn
        self._index = index
        self._hold = hold  # ended once every queued lookup was made and told
        # To look up: again after a change (first), and for the first time, per stream
        # (taken FIRST_BATCH at a time from each in turn).
        self._again: OrderedDict[WatchedTopic, None] = OrderedDict()
        self._firsts: OrderedDict[Sink, deque[WatchedTopic]] = OrderedDict()
        self._taken = 0  # first lookups taken in a row from the stream in front
        # Topics being looked up -> the last write asking for them again meanwhile (0: none)
        self._looking: dict[WatchedTopic, int] = {}
        self._workers = 0
        self._reading = 0  # workers in a lookup (those not in one wait for a turn)
        self._retries = Retries(lambda: service.source.status().ready, self.again)
        self._tasks: set[asyncio.Task[None]] = set()
        self.made = 0  # lookups made (tests and the benchmark read it)
        # States read for bundles at this version of the view (a topic of one is told it)
        self._bundles = BundleStates()
        self.shared = 0  # lookups answered from there (tests read it)
        self._messages = StateMessages()

    @property
    def queued_again(self) -> int:
        return len(self._again)

    def first(self, sink: Sink, entry: WatchedTopic, batch: FirstLookups) -> None:
        """Look a newly watched topic up, in `sink`'s turn; counted made in `batch` then."""
        entry.first = batch
        batch.add()
        entry.queued = True
        self._firsts.setdefault(sink, deque()).append(entry)
        self._start_workers()

    def again(self, entry: WatchedTopic, write: int = 0) -> None:
        """Look `entry` up again (ahead of every first lookup) for the index's write number
        `write` (0: whatever it read, say to retry): not if its state was read after it."""
        if entry.queued:
            return  # (its lookup has not started: it reads the view as it is then)
        if write and entry.read_at >= write:
            return  # (what it told was read after that write)
        looking = self._looking
        if entry in looking:  # (decided when that lookup ends: it may read after the write)
            looking[entry] = max(looking[entry], write or sys.maxsize)
            return
        entry.queued = True
        self._again[entry] = None
        self._start_workers()

    def cancel(self, entry: WatchedTopic) -> None:
        """`entry` is watched no more (in a stream's first lookups: skipped when taken)."""
        self._again.pop(entry, None)
        self._retries.discard(entry)
        if entry.first is not None:
            entry.first.made()
            entry.first = None

    async def close(self) -> None:
        self._retries.close()
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- the workers ------------------------------------------------------------------------

    def _start_workers(self) -> None:
        """A worker for the queued lookups: one does them all in its turns; another starts
        only while every worker waits for a read of the metadata (up to CONCURRENCY)."""
        if self._workers == self._reading and self._workers < CONCURRENCY:
            self._workers += 1
            task = asyncio.get_running_loop().create_task(self._work())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _next(self) -> WatchedTopic | None:
        """The next topic to look up: a change's first, then the streams' first lookups in
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
        """Lookups, one after the other in the watch's turns: as many as its time allows in
        one (serving.watch_turns), then the loop polls its sockets. Warm lookups finish
        without waiting; one that reads the metadata waits (another worker goes on)."""
        turns = self._turns
        try:
            while self._again or self._firsts:
                await turns.take(first=True)  # (ahead of subscribes: their misses, changes)
                while (entry := self._next()) is not None:
                    self._reading += 1
                    try:
                        await self._one(entry)
                    finally:
                        self._reading -= 1
                    if not turns.more():
                        break
        finally:
            self._workers -= 1
            if not self._workers and not self._again and not self._firsts:
                self._hold.end()

    async def _one(self, entry: WatchedTopic) -> None:
        self._looking[entry] = 0
        try:
            await self._look_up(entry)
        except Exception:  # a bug of ours must not end the watch of every topic
            log.exception("ownership watch: looking up %s failed", entry.name)
            self._retries.later(entry)
        finally:
            if entry.first is not None:
                entry.first.made()
                entry.first = None
            write = self._looking.pop(entry, 0)
            if write > entry.read_at and not entry.removed:  # (written after its read)
                self.again(entry)

    async def _look_up(self, entry: WatchedTopic) -> None:
        service, index = self.service, self._index
        self.made += 1
        topic = entry.topic  # (parsed for the lookup: the watch holds only the name)
        if await self._authorized_and_told_shared(entry, topic):
            return
        client = entry.watcher()  # (its str() is the client, made only for a log line)
        for _ in range(ATTEMPTS):
            try:
                # (by the watch's own string, and not kept: the memo and the authorizations
                # file it under that string, so the name stays held once)
                answer = await service.lookup(
                    entry.name, entry.choice, PROTOCOL, role=entry.role, client=client,
                    forward=False, keep=False,
                )  # fmt: skip
                read_at = index.writes
                view = service.source.view
                if answer.peer_cluster is None:
                    version = view.version
                    # As /lookup/v2/topic: a persistent topic that neither exists nor may be
                    # created is not found.
                    await service.check_lookup_allowed(topic)
                    if service.source.view is not view or view.version != version:
                        continue  # changed while it was read: the answer may be older
                state = answered_state(answer, view)
                if state is not None:  # (read from the view as it is: its bundle's, shared)
                    connect = answer.response is ResponseKind.CONNECT
                    shared = BundleState(state, connect, answer.peer_cluster is None)
                    self._bundles.remember(view, topic, entry.choice, shared)
            except LookupFailure as failure:
                read_at = index.writes
                if not failure.logged:  # (a refusal after the lookup: logged as one)
                    service.refusals.refuse(PROTOCOL, client, entry.choice, topic, failure)
                state = failed_state(topic, failure, service.source.view)
                if state is None and failure.kind in TRANSIENT_FAILURES:
                    self._retries.later(entry)
                    if entry.state is None:  # nothing told yet: say so, and keep trying
                        state = error_state(ErrorCode.UNAVAILABLE, UNAVAILABLE)
            if entry.removed:
                return
            if state is None:  # half-way: what settles it is watched; tried again anyway
                self._retries.later(entry)
            entry.read_at = read_at
            self._tell(entry, topic, state)
            return
        self._retries.later(entry)

    def told_from_bundle_now(
        self, entry: WatchedTopic, topic: TopicName, told: ToldBatch
    ) -> bool | None:
        """`told_from_bundle` without a wait when there is no role to authorize (a herd's
        topics: no coroutine per topic), its message added to `told` (the subscribing stream,
        its only watcher, is handed it with the batch); None: there is, `told_from_bundle`
        tells."""
        if entry.role is not None and self.service.authorizer is not None:
            return None
        if self._told_shared(entry, topic, time.perf_counter(), told):
            self.made += 1
            return True
        return False

    async def told_from_bundle(self, entry: WatchedTopic, topic: TopicName) -> bool:
        """A newly watched topic told its bundle's state now, as `_told_shared`: its lookup
        is made (True), or it is to be looked up (False, `first`)."""
        if await self._authorized_and_told_shared(entry, topic):
            self.made += 1
            return True
        return False

    async def _authorized_and_told_shared(self, entry: WatchedTopic, topic: TopicName) -> bool:
        """`_told_shared` once its role is authorized for the topic (False: it is not)."""
        service = self.service
        if service.logs_each_answer:  # (a line per lookup: the full path writes it)
            return False
        started = time.perf_counter()
        if entry.role is not None and service.authorizer is not None:
            try:
                await service.authorize(entry.name, entry.role)
            except (LookupFailure, NodeNotLoaded):
                return False
        return self._told_shared(entry, topic, started)

    def _told_shared(
        self, entry: WatchedTopic, topic: TopicName, started: float, told: ToldBatch | None = None
    ) -> bool:
        """Tell `entry` (authorized already) the state another topic's lookup just read for
        its bundle, if there is one at this version of the view and the topic's own checks
        pass (exists or may be created), as its lookup would have
        (serving.watch_bundle_states); False: it takes the full lookup (which tells a refusal
        and logs it); `told`: the batch its message goes to (else to its streams now)."""
        service = self.service
        if service.logs_each_answer:  # (a line per lookup: the full path writes it)
            return False
        try:
            view = service.source.view
            shared = self._bundles.get(view, topic, entry.choice)
            if shared is None:
                return False
            if shared.local and not self._bundles.may_look_up(view, topic, service.auto_creation):
                return False  # (not found: the full lookup tells it)
        except (LookupFailure, NodeNotLoaded):
            return False
        tally = told.tally if told is not None else None
        if tally is None:
            tally = service.tally_for(entry.choice, PROTOCOL)
            if told is not None:  # (the batch's topics share one choice)
                told.tally = tally
        tally.answered(time.perf_counter() - started, shared.connect)
        if not entry.removed:
            entry.read_at = self._index.writes
            self._tell(entry, topic, shared.state, told)
        self.shared += 1
        return True

    def _tell(
        self,
        entry: WatchedTopic,
        topic: TopicName,
        state: TopicState | None,
        told: ToldBatch | None = None,
    ) -> None:
        """Record `state` and hand it to the streams if it is news (`supersedes`); `told`: to
        the batch instead (a newly watched topic's one stream takes it from there)."""
        index = self._index
        last = entry.state
        if state is None:
            # Half-way, or of the moment: the last state holds; whatever settles it is watched.
            index.file(entry, depends_on(topic, last) | depends_on(topic, None))
            return
        index.file(entry, depends_on(topic, state))
        if not supersedes(state, last):
            return
        if state.kind is TopicStateKind.OWNER and state.owner is not None:
            index.told_owner(self.service.source.view, state.owner)
        entry.state = state = index.share(state, topic)
        name = entry.name
        message = self._messages.message(state, name)  # (one string, shared by its streams)
        if told is not None:
            told.add(name, message)
            return
        for sink in entry.watchers():
            sink.deliver(name, message)
