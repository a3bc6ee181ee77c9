"""The ownership watch: the topics streams watch, each answered once for everyone who watches
it with the same listener and role, and answered again when the metadata behind it changes.

The watch hears the metadata's writes through the process's answer memo (the service's
serving.memo.AnswerMemo), with the keys its one rule (lookup.write_keys) maps each to: where
the memo forgets the answers filed under a key, the watch looks the topics filed under it up
again. A topic's new state is handed to its streams when it differs from the last one (a newer
generation or another answer). The states topics share are a table of that memo, in its one
byte budget.

In three parts: this module (streams come and go; a write becomes the topics it concerns),
serving.watch_index (what is watched, filed by what may change it), serving.watch_lookups
(the lookups, and telling their states); serving.collection_hold keeps the garbage collector
off while a change is pushed or a subscribe's first answers are made. serving.watch_turns
shares the loop among them. No I/O here: the streams (http_api.watch) send.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Iterable

from pulsar_lookup_gateway.lookup.selection import ListenerChoice
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.lookup.write_keys import ALL, Key
from pulsar_lookup_gateway.serving.collection_hold import CollectionHold
from pulsar_lookup_gateway.serving.service import LookupService
from pulsar_lookup_gateway.serving.watch_firsts import FirstLookups
from pulsar_lookup_gateway.serving.watch_index import Sink, WatchedTopic, WatchIndex
from pulsar_lookup_gateway.serving.watch_lookups import WatchLookups
from pulsar_lookup_gateway.serving.watch_told import ToldBatch
from pulsar_lookup_gateway.serving.watch_turns import Turns

FIRST_ANSWER_WAIT = 5.0  # seconds a subscribe waits for its topics' first lookups


class OwnershipWatch:
    def __init__(self, service: LookupService) -> None:
        self.service = service
        self._memo = service.memo
        self._index = WatchIndex(self._memo)
        self._hold = CollectionHold()
        #: The watch's share of each loop turn: its streams' requests, lookups and messages.
        self.turns = Turns()
        self._lookups = WatchLookups(service, self._index, self._hold, self.turns)
        # Keys and nodes (or parents + "/") written since the flush, with the number of the
        # last write of each (a topic whose state was read after it is not looked up again).
        self._dirty: dict[Key, int] = {}
        self._appeared: dict[str, int] = {}
        self._flush: asyncio.Handle | None = None
        self._hearing = False

    @property
    def topics(self) -> int:
        return self._index.count

    @property
    def lookups(self) -> int:
        """Lookups made for the watch (tests and the benchmark read it)."""
        return self._lookups.made

    # -- streams --------------------------------------------------------------------------

    async def subscribe(
        self, sink: Sink, topics: Collection[TopicName], choice: ListenerChoice, role: str | None
    ) -> list[asyncio.Future[None]]:
        """Watch `topics` for `sink`; the first lookups still to make, for `first_answers`: a
        stream reads its next request only once they were made, so one client has one batch
        of lookups in flight at most."""
        self._observe()
        # The batches of first lookups it waits for: its own, and another stream's that
        # is looking up a topic it names
        waiting: dict[FirstLookups, None] = {}
        batch: FirstLookups | None = None
        index, lookups = self._index, self._lookups
        turns = self.turns
        # Its messages, handed to it together before any wait (and at the end)
        batch_told = ToldBatch()
        for topic in topics:
            if not turns.more():  # (in the stream's turn: the rest in its next turns)
                batch_told.hand_to(sink)
                await turns.take()
            entry, new = index.watch(topic, choice, role)
            sink.watching(entry.name)  # (the stream holds the index's string: one copy)
            entry.add(sink)
            if new:
                # Told now if a lookup just read its bundle's state (a herd's topics), else
                # looked up in the stream's turn
                told = lookups.told_from_bundle_now(entry, topic, batch_told)
                if told is None:
                    batch_told.hand_to(sink)
                    told = await lookups.told_from_bundle(entry, topic)
                if told:
                    continue
                if batch is None:
                    batch = FirstLookups()
                    waiting[batch] = None
                    # (a herd's first answers, as a push: not behind a full collection that
                    # its own allocations made due; held HOLD_LIMIT at most)
                    self._hold.begin()
                lookups.first(sink, entry, batch)
            message = entry.message()
            if message is not None:
                batch_told.add(entry.name, message)
            elif entry.first is not None:
                waiting[entry.first] = None
        batch_told.hand_to(sink)
        if batch is not None:
            batch.made()  # (all of its lookups are queued: done once they are made)
        return [batch.done for batch in waiting if not batch.done.done()]

    @staticmethod
    async def first_answers(waiting: list[asyncio.Future[None]]) -> None:
        """Wait for a subscribe's first lookups (at most FIRST_ANSWER_WAIT)."""
        if waiting:
            await asyncio.wait(waiting, timeout=FIRST_ANSWER_WAIT)

    def unsubscribe(
        self, sink: Sink, topics: Iterable[str], choice: ListenerChoice, role: str | None
    ) -> None:
        route = (choice, role)
        for topic in topics:
            entry = self._index.get(route, topic)
            if entry is not None and entry.discard(sink):
                self._drop(entry)

    def _drop(self, entry: WatchedTopic) -> None:
        entry.removed = True
        self._index.remove(entry)
        self._lookups.cancel(entry)

    async def close(self) -> None:
        self._hold.release()
        if self._hearing:
            self._memo.stop_hearing(self._changed)
            self._hearing = False
        if self._flush is not None:
            self._flush.cancel()
        await self._lookups.close()
        # (after the lookups end: one still running would file its state in a released table)
        self._index.release()

    # -- changes --------------------------------------------------------------------------

    def _observe(self) -> None:
        """Hear the source's writes through the memo, which follows the current view (a
        source hands its observers to a view that replaces this one)."""
        if not self._hearing:
            self._memo.hear_writes(self._changed)
            self._hearing = True
        self._memo.follow(self.service.source.view)

    def _changed(self, path: str, keys: list[Key]) -> None:
        """A write to the view (on the loop) and the keys it may change: look the topics
        filed under them up soon (all the writes of one loop iteration together)."""
        index = self._index
        index.writes += 1
        if index.empty:
            return
        write = index.writes
        dirty = self._dirty
        for key in keys:
            dirty[key] = write
        parent = path[:-1] if path.endswith("/") else path.rpartition("/")[0]
        if index.waits_under(parent):
            self._appeared[path] = write
        if self._flush is None and (self._dirty or self._appeared):
            self._flush = asyncio.get_running_loop().call_soon(self._look_again)

    def _look_again(self) -> None:
        self._flush = None
        keys, self._dirty = self._dirty, {}
        paths, self._appeared = self._appeared, {}
        lookups = self._lookups
        before = lookups.queued_again
        self._queue_again(keys)
        view = self.service.source.view
        for path, write in paths.items():  # (topics not found, found now?)
            for entry in self._index.appeared((path,), view):
                lookups.again(entry, write)
        if lookups.queued_again > before:  # (a load report queues nothing: the collector runs)
            self._hold.begin()

    def _queue_again(self, keys: dict[Key, int]) -> None:
        """Look the topics filed under `keys` up again, but those whose state was read after
        the key's last write (a node's first read is a write of the view too: the topics
        whose lookup read it, a refused one among them, are looked up once, not again)."""
        index, lookups = self._index, self._lookups
        if ALL in keys:
            index.forget_registrations()
            write = keys[ALL]
            for entry in index.every():
                lookups.again(entry, write)
            return
        view = self.service.source.view
        for key, write in keys.items():
            # A registration is rewritten by every load report: only a new one, or other
            # URLs, can change an answer.
            if key[0] == "broker" and not index.registration_changed(view, key[1]):
                continue
            for entry in index.under(key):
                lookups.again(entry, write)
