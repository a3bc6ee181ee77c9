"""Snapshot files: one JSON object mapping a znode path to that node's JSON content."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pulsar_lookup_gateway.metadata_store.url import MetadataUrl


class SnapshotError(Exception):
    pass


def parse_snapshot(text: str, origin: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SnapshotError(f"{origin}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise SnapshotError(f"{origin}: expected a JSON object of znode path -> content")
    bad = [key for key in data if not key.startswith("/") or key.endswith("/") or "//" in key]
    if bad:
        raise SnapshotError(f"{origin}: {bad[0]!r} is not an absolute znode path")
    return data


def read_snapshot(path: str | Path) -> dict[str, Any]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SnapshotError(f"cannot read snapshot {path}: {exc}") from None
    return parse_snapshot(text, str(path))


def write_snapshot(path: str | Path, nodes: Mapping[str, Any]) -> None:
    """Write atomically (a reader watching the file never sees half of it), sorted by path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(dict(sorted(nodes.items())), handle, indent=1, sort_keys=False)
            handle.write("\n")
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise


def read_nodes(url: MetadataUrl) -> dict[str, Any]:
    """One consistent snapshot of the metadata: the snapshot file, or a dump of ZooKeeper."""
    if url.kind == "file":
        return read_snapshot(url.path)
    from pulsar_lookup_gateway.metadata_store.admin import dump_url  # kazoo loads for zk: only

    return dump_url(url)  # ZooKeeperUnreachable within a few seconds when it does not answer
