"""`zk:` metadata: znodes read ahead (every namespace's policies and ownership, before the
source says it is ready) or on first use, cached, and kept fresh by ZooKeeper watches.

kazoo runs its callbacks on its own threads; every result is handed to the event loop with
`call_soon_threadsafe`, and the view is only ever touched on the loop. The loop never blocks
on ZooKeeper. The source is the lifecycle and the connection states around four parts:
zk_session (the session as the loop sees it), zk_reader (the read path: one read in flight per
node, into the view), zk_watches (a watched node read again, from kazoo's thread) and zk_rebuild
(the cache read again, and re-watched, after every (re)connect, and the namespaces' policies and
ownership read ahead: zk_preload, in bulk: zk_bulk).

Connection states (kazoo): SUSPENDED keeps the cache and serves it (stale); LOST means the
session expired and its watches are gone, so the cache is dropped and rebuilt on reconnect.
"""

from __future__ import annotations

import asyncio
import logging

from kazoo.client import KazooState
from kazoo.retry import KazooRetry

from pulsar_lookup_gateway.lookup.model import BROKERS_ROOT, LEADER_PATH
from pulsar_lookup_gateway.lookup.source import SourceStatus
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.metadata_store.kazoo_threads import BatchingClient, LoopHandler
from pulsar_lookup_gateway.metadata_store.outage_log import OUTAGE_REMINDER, OutageLog, QuietRetries
from pulsar_lookup_gateway.metadata_store.url import MetadataUrl
from pulsar_lookup_gateway.metadata_store.zk_preload import PRELOAD_LIMIT, Preload
from pulsar_lookup_gateway.metadata_store.zk_reader import CHILDREN, Trace, ZnodeReader
from pulsar_lookup_gateway.metadata_store.zk_rebuild import CacheRebuild
from pulsar_lookup_gateway.metadata_store.zk_session import ZkSession
from pulsar_lookup_gateway.metadata_store.zk_watches import ZnodeWatches

log = logging.getLogger(__name__)

LEADER_PARENT = LEADER_PATH.rpartition("/")[0]
# Read at every (re)connect: the brokers, and /loadbalance's children, which say whether the
# leader node exists.
WARM_PATHS = (BROKERS_ROOT + CHILDREN, LEADER_PARENT + CHILDREN, LEADER_PATH)


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
        preload_limit: int = PRELOAD_LIMIT,
    ) -> None:
        """`warm_paths`: what every (re)connect reads before the source is ready (a separate
        configuration store holds no brokers: it warms nothing but what the cache holds);
        `preload_limit`: how many znodes of the namespaces' policies and ownership are read
        ahead before it is ready (zk_preload; 0: none, all on first use)."""
        self.url = url
        self.start_timeout = start_timeout
        self._client = BatchingClient(
            hosts=url.connect_string,
            timeout=session_timeout,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0),
            logger=KAZOO_LOG,
            handler=LoopHandler(),
        )
        self.outage = OutageLog(url, outage_reminder)
        self._session = ZkSession(url)
        self._reader = ZnodeReader(self._client, self._session, read_timeout)
        self._watches = ZnodeWatches(self._reader, self._session)
        preload = None
        if preload_limit > 0:
            preload = Preload(self._reader, self._session, read_timeout * 10, preload_limit)
        self._rebuild = CacheRebuild(self._reader, self._session, warm_paths, preload)

    @property
    def view(self) -> ClusterView:
        return self._reader.view

    @property
    def reads(self) -> int:
        """ZooKeeper reads issued; concurrent misses for one node share one."""
        return self._reader.reads

    @property
    def trace(self) -> Trace | None:
        """Where the time goes from a watch to the view (bench.freshness): called with
        (stage, path) on kazoo's threads and on the loop; None costs one test per event."""
        return self._reader.trace

    @trace.setter
    def trace(self, trace: Trace | None) -> None:
        self._reader.trace = trace

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Connect in the background; wait (bounded) until the cache is warm."""
        self._session.loop = asyncio.get_running_loop()
        self._client.add_listener(self._on_state)
        self._client.start_async()
        try:
            await asyncio.wait_for(self._rebuild.warmed.wait(), self.start_timeout)
        except TimeoutError:
            if not self._session.connected:
                self._outage_began(f"not connected after {self.start_timeout:.0f}s")
            else:
                log.warning("%s: not ready after %.0fs; lookups fail until it is", self.url,
                            self.start_timeout)  # fmt: skip

    async def close(self) -> None:
        self._session.closing = True
        self.outage.closing = True
        self.outage.cancel()
        self._watches.cancel()
        await self._rebuild.stop()
        self._session.connected = False
        self._reader.fail_all("the metadata source is closing")
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._client.stop)
        await loop.run_in_executor(None, self._client.close)

    def status(self) -> SourceStatus:
        return self._session.status()

    async def fetch(self, path: str) -> None:
        await self._reader.fetch(path)

    # -- connection states ----------------------------------------------------------------

    def _on_state(self, state: str) -> None:  # on kazoo's threads
        self._session.call_on_loop(self._state_changed, state)

    def _state_changed(self, state: str) -> None:
        if state == KazooState.SUSPENDED:
            self._session.suspended()
            self._outage_began("connection lost; serving cached metadata")
        elif state == KazooState.LOST:
            self._session.lost()
            self._reader.session_lost()
            if not self._session.closing:
                log.warning("%s: session lost; the metadata cache is dropped", self.url)
        elif state == KazooState.CONNECTED:
            self._session.reconnected()
            self.outage.ended()
            self._rebuild.begin()

    def _outage_began(self, what: str) -> None:
        if self._session.loop is not None:
            self.outage.began(self._session.loop, what)
