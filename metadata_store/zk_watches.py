"""The watches of the `zk:` source: a node a watch says changed is read again.

A change reaches the view in as few thread hand-overs as possible, since each one waits for a
thread to be scheduled and to take the GIL from a loop that may be busy with lookups: kazoo's
connection thread itself (kazoo_threads) sends the re-read as soon as the watch fires, and hands
the loop the watch event with the re-read's reply. The cache serves the old value until then.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from kazoo.protocol.states import WatchedEvent

from pulsar_lookup_gateway.lookup.model import BROKERS_ROOT
from pulsar_lookup_gateway.metadata_store.kazoo_threads import HandedResult, inline
from pulsar_lookup_gateway.metadata_store.zk_reader import CHILDREN, ZnodeReader
from pulsar_lookup_gateway.metadata_store.zk_session import ZkSession

RE_READ = ("CHILD", "CREATED", "CHANGED", "DELETED")  # watch events that call for a re-read


class ZnodeWatches:
    def __init__(self, reader: ZnodeReader, session: ZkSession) -> None:
        self._reader = reader
        self._session = session
        self._tasks: set[asyncio.Task[None]] = set()  # children re-reads after a watch
        reader.watch = self.on_watch  # (every read the reader sends sets this watch)

    def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    @inline
    def on_watch(self, event: WatchedEvent) -> None:
        """On kazoo's connection thread."""
        path = event.path
        if path is None:
            return
        trace = self._reader.trace
        if trace is not None:
            trace("watch", path)
        session = self._session
        if session.connected and not session.closing and event.type in RE_READ:
            # The re-read goes out now, and the loop hears of the watch with its reply: one
            # turn of a loop busy with lookups, not two, and one hand-over. (A stale
            # `connected` costs at most a read the loop drops.)
            try:
                sent = self._reader.send(path + CHILDREN if event.type == "CHILD" else path)
            except Exception:  # pragma: no cover - (the loop sends it again, and reports it)
                pass
            else:
                sent.when_done(functools.partial(self._replied, event, session.generation))
                return
        session.call_on_loop(self._fired, event)

    def _replied(self, event: WatchedEvent, generation: int, sent: HandedResult) -> None:
        trace = self._reader.trace
        if trace is not None and event.path is not None:
            trace("reply", event.path)
        self._session.call_on_loop(self._fired, event, sent, generation)

    def _fired(
        self, event: WatchedEvent, sent: HandedResult | None = None, generation: int = -1
    ) -> None:
        """On the loop. `sent`: the re-read on_watch sent, complete, if it did, in session
        `generation`."""
        if not self._session.connected or event.path is None:
            return
        if sent is not None and generation != self._session.generation:
            sent = None  # (read in a lost session: its watch went with it)
        trace = self._reader.trace
        if trace is not None:
            trace("watch-loop", event.path)
        if event.type == "CHILD":
            self.refresh(event.path + CHILDREN, sent)
        elif event.type in RE_READ:
            self.refresh(event.path, sent)
            if event.type != "CHANGED" and self._reader.view.lists_children_of(event.path):
                # A parent whose children decide existence appeared or went: list it again.
                self.refresh(event.path + CHILDREN)

    def refresh(self, path: str, sent: HandedResult | None = None) -> None:
        """Re-read a node a watch said changed; the cache serves the old value until then."""
        self._reader.start(path, sent=sent)
        loop = self._session.loop
        if path == BROKERS_ROOT + CHILDREN and loop is not None:
            task = loop.create_task(self._fetch_children_after(path))
            self._tasks.add(task)  # a reference, or the loop may collect it while it runs
            task.add_done_callback(self._tasks.discard)
            task.add_done_callback(_consume_exception)

    async def _fetch_children_after(self, path: str) -> None:
        read = self._reader.in_flight(path)
        if read is not None:
            await read.wait()
        await self._reader.fetch_children(path[: -len(CHILDREN)])


def _consume_exception(future: asyncio.Future[Any]) -> None:
    # A task nobody awaits must not log "never retrieved".
    if not future.cancelled():
        future.exception()
