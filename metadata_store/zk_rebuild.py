"""The rebuild of the `zk:` cache after every (re)connect: what every lookup needs (brokers,
leader) is read, everything the cache holds is read again, which sets its watches again
(kazoo drops them all with the connection), and the policies and ownership of every namespace
are read ahead (zk_preload), before the source calls itself ready."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from pulsar_lookup_gateway.lookup.errors import LookupFailure
from pulsar_lookup_gateway.lookup.model import BROKERS_ROOT
from pulsar_lookup_gateway.metadata_store.zk_bulk import BulkRead
from pulsar_lookup_gateway.metadata_store.zk_preload import Preload
from pulsar_lookup_gateway.metadata_store.zk_reader import CHILDREN, ZnodeReader
from pulsar_lookup_gateway.metadata_store.zk_session import ZkSession

# (the source's logger: one name for all its lines)
log = logging.getLogger("pulsar_lookup_gateway.metadata_store.zookeeper")


class CacheRebuild:
    def __init__(
        self,
        reader: ZnodeReader,
        session: ZkSession,
        warm_paths: tuple[str, ...],
        preload: Preload | None = None,
    ) -> None:
        """`preload`: what is read ahead of lookups before the source says it is ready (None:
        nothing; what lookups read is read on first use)."""
        self._reader = reader
        self._session = session
        self.warm_paths = warm_paths
        self.preload = preload
        self.warmed = asyncio.Event()  # set by the first rebuild that completes
        self._task: asyncio.Task[None] | None = None

    def begin(self) -> None:
        """Start a rebuild (on a CONNECTED), in place of one still running."""
        loop = self._session.loop
        if loop is not None:
            if self._task is not None:
                self._task.cancel()
            self._task = loop.create_task(self._rebuild())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _rebuild(self) -> None:
        reader, session = self._reader, self._session
        generation = session.generation
        # A batch is pipelined: its reads share a longer deadline than one lookup's.
        timeout = reader.read_timeout * 10
        for attempt in range(1, 1_000_000):
            paths = list(dict.fromkeys([*self.warm_paths, *reader.view.known_paths()]))
            started = time.perf_counter()
            try:
                await BulkRead(reader, session, paths, watched=True, timeout=timeout).run()
                if BROKERS_ROOT + CHILDREN in self.warm_paths:
                    await reader.fetch_children(BROKERS_ROOT)
                preloaded = 0
                if self.preload is not None:
                    preloaded = await self.preload.run(frozenset(paths))
            except (LookupFailure, TimeoutError) as exc:
                if not session.connected or generation != session.generation:
                    return  # the next CONNECTED starts another rebuild
                log.warning("%s: warm-up attempt %d failed: %s", session.url, attempt, exc)
                await asyncio.sleep(min(0.1 * attempt, 1.0))
                continue
            if generation == session.generation and session.connected:
                session.ready()
                self.warmed.set()
                took = time.perf_counter() - started
                if BROKERS_ROOT + CHILDREN in self.warm_paths:
                    brokers = len(reader.view.broker_registry().brokers)
                    log.info("%s: ready in %.1fs (%d brokers, %d znodes re-read, %d read ahead)",
                             session.url, took, brokers, len(paths), preloaded)  # fmt: skip
                else:
                    log.info("%s: ready in %.1fs (%d znodes re-read, %d read ahead)",
                             session.url, took, len(paths), preloaded)  # fmt: skip
            return
