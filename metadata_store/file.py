"""`file:PATH` metadata: a snapshot, reloaded when the file changes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path

from pulsar_lookup_gateway.lookup.source import SourceStatus
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.metadata_store.snapshot import SnapshotError, read_snapshot

log = logging.getLogger(__name__)


class FileSource:
    """A complete view of a snapshot file. The file is checked every `poll_interval` seconds
    (mtime, size, inode); a file that no longer parses keeps the last good view."""

    def __init__(self, path: str | Path, *, poll_interval: float = 1.0) -> None:
        self.path = Path(path)
        self.poll_interval = poll_interval
        self._view = ClusterView(complete=True)
        self._signature: tuple[int, int, int] | None = None
        self._error = "not loaded yet"
        self._task: asyncio.Task[None] | None = None

    @property
    def view(self) -> ClusterView:
        return self._view

    async def start(self) -> None:
        self.reload()
        if self._signature is None:
            raise SnapshotError(self._error)
        self._task = asyncio.get_running_loop().create_task(self._watch())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def fetch(self, path: str) -> None:  # pragma: no cover - a complete view never asks
        raise AssertionError(f"a snapshot view is complete; nothing to fetch for {path}")

    def status(self) -> SourceStatus:
        if self._signature is None:
            return SourceStatus(False, self._error)
        return SourceStatus(True, self._error)

    def reload(self) -> bool:
        """Load the file if it changed; True if the view was replaced."""
        try:
            stat = os.stat(self.path)
        except OSError as exc:
            self._error = f"cannot read snapshot {self.path}: {exc}"
            return False
        signature = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        if signature == self._signature:
            return False
        try:
            nodes = read_snapshot(self.path)
        except SnapshotError as exc:
            self._error = f"{exc}; serving the previous snapshot"
            log.error("snapshot reload failed: %s", exc)
            return False
        view = ClusterView.from_snapshot(nodes)
        # A snapshot holds no zxids: every answer read from it is dated by the file's
        # modification time in milliseconds (the ownership watch's generation).
        view.snapshot_zxid = stat.st_mtime_ns // 1_000_000
        self._view, previous = view, self._view
        previous.hand_over(view)
        self._signature = signature
        self._error = ""
        log.info("loaded snapshot %s (%d znodes)", self.path, len(nodes))
        return True

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval)
            self.reload()
