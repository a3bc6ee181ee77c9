"""Small pieces the benchmarks share."""

from __future__ import annotations

import asyncio
import gc
import resource
import struct
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Protocol

from pulsar_lookup_gateway.lookup.bundles import NamespaceBundles
from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
from pulsar_lookup_gateway.metadata_store.synthetic import broker_node, ownership_node

# The cluster of the lookup benchmarks: every bundle owned.
NAMESPACES = 10
BUNDLES_PER_NAMESPACE = 64
BROKERS = 20
TOPICS = 2000


def cpu_seconds() -> float:
    """User + system CPU time of this process: a cost per operation that does not depend on how
    fast the other side (or anything else on the machine) is."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def resident_mib() -> tuple[float, float]:
    """(resident MiB now, peak resident MiB) of this process, from /proc (Linux)."""
    fields = {}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            fields[name] = value
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def percentile(values: list[float], fraction: float) -> float:
    """The value at `fraction` (0..1) of the sorted values; NaN when there are none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def cluster_nodes(
    *,
    namespaces: int = NAMESPACES,
    bundles_per_namespace: int = BUNDLES_PER_NAMESPACE,
    brokers: int = BROKERS,
) -> dict[str, Any]:
    """The znodes of a cluster of `brokers` brokers (b1 the leader) and `namespaces`
    namespaces bench/ns<n>, each of `bundles_per_namespace` equal bundles, every bundle owned
    (by `owner_of`)."""
    nodes: dict[str, Any] = {}
    for i in range(1, brokers + 1):
        nodes[f"/loadbalance/brokers/b{i}:8080"] = broker_node(i, usage=i / brokers)
    nodes["/loadbalance/leader"] = {"brokerId": "b1:8080"}
    bundles = NamespaceBundles.equal(bundles_per_namespace)
    boundaries = [f"0x{b:08x}" for b in bundles.boundaries]
    for n in range(namespaces):
        nodes[f"/admin/policies/bench/ns{n}"] = {
            "bundles": {"boundaries": boundaries, "numBundles": bundles_per_namespace}
        }
        for j, name in enumerate(bundles.names()):
            nodes[f"/namespace/bench/ns{n}/{name}"] = ownership_node(owner_of(n, j, brokers))
    return nodes


def owner_of(namespace: int, bundle: int, brokers: int) -> int:
    """The broker (1..brokers) that owns bundle `bundle` of namespace `namespace` at first."""
    return (namespace + bundle) % brokers + 1


def cluster_snapshot(
    path: Path,
    *,
    namespaces: int = NAMESPACES,
    bundles_per_namespace: int = BUNDLES_PER_NAMESPACE,
    brokers: int = BROKERS,
    topics: int = TOPICS,
) -> list[str]:
    """Write a snapshot of `cluster_nodes`; return the topics the load asks for (spread over
    the namespaces in turn)."""
    nodes = cluster_nodes(
        namespaces=namespaces, bundles_per_namespace=bundles_per_namespace, brokers=brokers
    )
    write_snapshot(path, nodes)
    return [f"persistent://bench/ns{t % namespaces}/topic-{t}" for t in range(topics)]


def receive(pipe: Connection, timeout: float) -> Any:
    """The next message from a server child process; TimeoutError when none comes in time."""
    if not pipe.poll(timeout):
        raise TimeoutError("the server process did not answer")
    return pipe.recv()


class Recording(Protocol):
    recording: bool


async def measured_window(
    pipe: Connection, tally: Recording, seconds: float, *, collect_garbage: bool = True
) -> tuple[float, float, float]:
    """Tell the server child to begin, let `tally` record for `seconds`, tell the child to end:
    (elapsed seconds, this process's CPU seconds, the server's CPU seconds) over the window.
    `collect_garbage` False: none of this process's garbage collections in the window (they
    stall every connection of a load generator at once)."""
    if not collect_garbage:
        gc.collect()
        gc.disable()
    try:
        pipe.send("begin")
        tally.recording = True
        started, client_cpu = time.perf_counter(), cpu_seconds()
        await asyncio.sleep(seconds)
        tally.recording = False
        elapsed, client_cpu = time.perf_counter() - started, cpu_seconds() - client_cpu
    finally:
        gc.enable()
    pipe.send("end")
    loop = asyncio.get_running_loop()
    server_cpu = await loop.run_in_executor(None, receive, pipe, 60.0)
    return elapsed, client_cpu, server_cpu


_FRAME_SIZE = struct.Struct(">I")


def take_commands(buf: bytearray) -> list[bytes]:
    """The command bodies of the whole frames at the start of `buf` (a binary client's receive
    buffer), removed from it; a partial frame stays for the next read."""
    pos, end, bodies = 0, len(buf), []
    while end - pos >= 8:
        (size,) = _FRAME_SIZE.unpack_from(buf, pos)
        if end - pos < 4 + size:
            break
        (cmd_size,) = _FRAME_SIZE.unpack_from(buf, pos + 4)
        bodies.append(bytes(buf[pos + 8 : pos + 8 + cmd_size]))
        pos += 4 + size
    del buf[:pos]
    return bodies


def write_section(
    path: Path, heading: str, lines: list[str], *, ends: tuple[str, ...] = ("## ",)
) -> None:
    """Put a benchmark's section in BENCHMARKS.md: replace the one under `heading` (up to the
    next line starting with one of `ends`: pass ``("## ", "### ")`` to keep hand-written
    subsections) if present, else append it; the rest of the file is left alone."""
    existing = path.read_text().splitlines() if path.exists() else ["# Benchmarks"]
    if heading in existing:
        first = existing.index(heading)
        after = next(
            (i for i in range(first + 1, len(existing)) if existing[i].startswith(ends)),
            len(existing),
        )
        existing[first:after] = [*lines, ""] if after < len(existing) else lines
    else:
        while existing and not existing[-1].strip():
            existing.pop()
        existing += ["", *lines]
    path.write_text("\n".join(existing).rstrip("\n") + "\n")
