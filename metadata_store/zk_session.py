"""The ZooKeeper session as the event loop sees it: connected or not, warm or not, suspended
since when, and which session (generation) a read belongs to.

kazoo's states: SUSPENDED keeps the cache and serves it (stale); LOST means the session expired
and its watches are gone, so the cache is dropped and rebuilt on reconnect (zk_rebuild).
Written on the loop only; kazoo's threads read it (a stale value costs at most a read the loop
drops) and hand their news to the loop with `call_on_loop`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from pulsar_lookup_gateway.lookup.source import SourceStatus
from pulsar_lookup_gateway.metadata_store.url import MetadataUrl


class ZkSession:
    def __init__(self, url: MetadataUrl) -> None:
        self.url = url
        self.loop: asyncio.AbstractEventLoop | None = None  # the source's, once it started
        self.generation = 0  # bumped on session loss; results of older reads are dropped
        self.connected = False
        self.warm = False  # the cache was rebuilt since the last (re)connect
        self.ever_connected = False
        self.suspended_since: float | None = None
        self.closing = False

    def call_on_loop(self, func: Callable[..., None], *args: Any) -> None:
        """From kazoo's threads: run `func(*args)` on the loop (nothing once the loop closed)."""
        if self.loop is not None:
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(func, *args)

    def suspended(self) -> None:
        # kazoo drops every watch on a connection loss: the cache may now lag the cluster.
        self.connected = False
        self.warm = False
        self.suspended_since = time.monotonic()

    def lost(self) -> None:
        """The session expired: reads of it are dropped from now on (its cache goes too)."""
        self.connected = False
        self.warm = False
        self.generation += 1
        self.suspended_since = None

    def reconnected(self) -> None:
        self.connected = True
        self.ever_connected = True

    def ready(self) -> None:
        """The cache is warm again (zk_rebuild)."""
        self.warm = True
        self.suspended_since = None

    def status(self) -> SourceStatus:
        if self.connected and self.warm:
            return SourceStatus(True, "")
        if self.suspended_since is not None and self.ever_connected:
            lag = time.monotonic() - self.suspended_since
            reason = f"ZooKeeper connection suspended for {lag:.1f}s; serving cached metadata"
            return SourceStatus(False, reason, stale=True)
        if self.connected:
            return SourceStatus(False, f"reading cluster metadata from {self.url}")
        return SourceStatus(False, f"not connected to ZooKeeper at {self.url}")
