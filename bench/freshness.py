"""Freshness under load: from a ZooKeeper write of a bundle's owner to the first binary answer
that names the new owner, without and with a saturating binary lookup load, and where the time
goes in between.

    .venv/bin/python -m bench.freshness [--probes 300] [--max-seconds 60] [--gap-ms 20]
        [--namespaces 20] [--bundles 1000] [--brokers 20] [--topics 2000]
        [--connections 64] [--depth 16] [--switch-interval-ms MS] [--raw FILE]

A real ZooKeeper seeded with `namespaces x bundles` owned bundles and `brokers` brokers; the
gateway (BinaryServer + LookupService on a ZooKeeperSource, one event loop, as
bench.binary_lookup builds it) in a child process; the load generator in this process
(bench.binary_lookup's pipelined connections: `connections` x `depth` lookups in flight, over
`topics` warm topics); and the prober in a child process of its own (its blocking kazoo client
and socket must not wait for the load generator's GIL). A probe writes a bundle's ownership
znode to another broker, then asks for a topic of that bundle over its own connection, one
lookup after another, until the answer names the new broker: the latency is from the write's
acknowledgement to that answer. After each change is seen the prober pauses 0 to 2 x
`gap-ms` at random. The same run probes first without load (the baseline), then under load;
the load also runs a window without writes, to show what the writes cost it.

Where the time goes: the gateway child records, for the probed znodes, when kazoo's connection
thread read the watch event and the re-read's reply (bench-only wrappers of kazoo), when the
source's own callbacks ran on kazoo's threads and on the loop (ZooKeeperSource.trace), and
when the view held the new owner; each as milliseconds after the write's acknowledgement. And
the loop's turns of LONG_TURN or more under load, with the loop thread's CPU time in them, and
the garbage collector's passes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import json
import logging
import multiprocessing
import random
import socket
import struct
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from bench.binary_lookup import Tally, _LoadConnection
from bench.common import cluster_nodes, cpu_seconds, owner_of, percentile
from pulsar_lookup_gateway.listeners.binary import BinaryServer, BinarySettings
from pulsar_lookup_gateway.listeners.endpoints.addresses import Endpoint, Scheme
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import BaseCommand
from pulsar_lookup_gateway.lookup.bundles import NamespaceBundles, topic_hash
from pulsar_lookup_gateway.lookup.model import NAMESPACE_ROOT
from pulsar_lookup_gateway.metadata_store.admin import connected, encode, seed
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper
from pulsar_lookup_gateway.metadata_store.synthetic import listeners_of, ownership_node
from pulsar_lookup_gateway.metadata_store.url import parse_metadata_url
from pulsar_lookup_gateway.metadata_store.zookeeper import ZooKeeperSource
from pulsar_lookup_gateway.serving.service import LookupService

HOST = "127.0.0.1"
TENANT = "bench"  # (bench.common.cluster_nodes names its namespaces bench/ns<n>)
PROBED_BUNDLES = 64  # bundles the prober moves in turn (spread over the namespaces)
PROBE_TIMEOUT = 5.0  # seconds a probe waits for the changed answer before it counts as lost
MAX_TRACES = 200_000  # trace records the gateway child keeps (a ring)
LONG_TURN = 0.010  # seconds: a loop turn this long is counted (one such turn delays a change)
_HEADER = struct.Struct(">I")
#: The steps from a write to the changed answer, in order (see the module's docstring).
STAGES = (
    ("watch-conn", "watch event read (kazoo connection thread)"),
    ("watch", "the source's watch callback (a kazoo thread)"),
    ("reply-conn", "re-read's reply read (kazoo connection thread)"),
    ("reply", "the source's reply callback (a kazoo thread)"),
    ("watch-loop", "the watch reaches the loop"),
    ("view", "view holds the new owner (loop)"),
    ("answer", "changed answer received (prober)"),
)


# --- the cluster ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probed:
    """A bundle the prober moves: its ownership znode, a topic in it, its owner at seed time."""

    path: str
    topic: str
    owner: int


def probed_bundles(namespaces: int, bundles: int, brokers: int, count: int) -> list[Probed]:
    equal = NamespaceBundles.equal(bundles)
    ranges = equal.ranges
    chosen: list[Probed] = []
    for k in range(count):
        n, j = k % namespaces, (k * 7919) % bundles  # spread over namespaces and the hash range
        wanted = ranges[j].name
        for t in range(1_000_000):
            topic = f"persistent://{TENANT}/ns{n}/probe-{k}-{t}"
            if equal.find(topic_hash(topic)).name == wanted:
                break
        path = f"{NAMESPACE_ROOT}/{TENANT}/ns{n}/{wanted}"
        chosen.append(Probed(path, topic, owner_of(n, j, brokers)))
    return chosen


def broker_url(i: int) -> str:
    return str(listeners_of(i)["external"]["brokerServiceUrl"])


# --- the gateway (child process) -----------------------------------------------------------------


def _serve(connect_string: str, switch_interval_ms: float | None, pipe: Connection) -> None:
    if switch_interval_ms is not None:
        sys.setswitchinterval(switch_interval_ms / 1000)
    asyncio.run(_serve_async(connect_string, pipe))


def _trace_kazoo(source: ZooKeeperSource, trace: Callable[[str, str], None]) -> None:
    """Bench-only: record when kazoo's connection thread reads a watch event or a read's reply
    (before kazoo hands either to its callback threads)."""
    client = source._client
    handler = client.handler
    dispatch = handler.dispatch_callback
    base: type[Any] = type(handler.async_result())  # (kazoo's, or the source's own)

    def traced_dispatch(callback: Any) -> None:
        path = getattr(callback.args[0], "path", None) if callback.args else None
        if callback.type == "watch" and path:
            trace("watch-conn", path)
        dispatch(callback)

    class TracedResult(base):  # type: ignore[misc]
        path: str | None = None

        def set(self, value: Any = None) -> None:
            if self.path is not None:
                trace("reply-conn", self.path)
            super().set(value)

    get_async = client.get_async

    def traced_get(path: str, watch: Any = None) -> Any:
        result = get_async(path, watch=watch)
        if isinstance(result, TracedResult) and not result.ready():
            result.path = path
        return result

    handler.dispatch_callback = traced_dispatch
    handler.async_result = lambda: TracedResult(handler)
    client.get_async = traced_get


async def _serve_async(connect_string: str, pipe: Connection) -> None:
    logging.basicConfig(level=logging.WARNING)
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    source = ZooKeeperSource(parse_metadata_url(f"zk:{connect_string}"), start_timeout=120)
    traces: deque[tuple[str, str, float]] = deque(maxlen=MAX_TRACES)
    prefix = NAMESPACE_ROOT + "/"

    def trace(stage: str, path: str) -> None:
        if path and path.startswith(prefix):
            traces.append((stage, path, time.perf_counter()))

    source.trace = trace
    _trace_kazoo(source, trace)
    await source.start()
    spec = SocketSpec(Endpoint(Scheme.PULSAR, HOST, 0), "external", "bench")
    server = BinaryServer(
        spec,
        LookupService(source, internal_listener="internal"),
        BinarySettings(keep_alive_interval=0, handshake_timeout=30),
    )
    await server.start()
    cpu_at_begin = 0.0
    turns = LoopTurns(loop)
    pauses = GcPauses()

    def on_message() -> None:
        nonlocal cpu_at_begin
        message = pipe.recv()
        if message == "begin":
            cpu_at_begin = cpu_seconds()
            turns.start()
            pauses.start()
        elif message == "end":
            pipe.send((cpu_seconds() - cpu_at_begin, turns.stop(), pauses.stop()))
        elif message == "traces":
            pipe.send(list(traces))
            traces.clear()
        elif message == "stop" and not stop.done():
            stop.set_result(None)

    loop.add_reader(pipe.fileno(), on_message)
    pipe.send(server.port)
    await stop
    loop.remove_reader(pipe.fileno())
    await server.stop(timeout=5)
    await source.close()


class LoopTurns:
    """The loop's long turns while recording: a callback that comes back every turn notes the
    turn's wall time and the loop thread's CPU time (a long turn with little CPU: the thread
    waited, for a core or for the GIL). It keeps the loop from sleeping: only under load."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._long: list[tuple[float, float]] = []
        self._last = (0.0, 0.0)
        self._on = False

    def start(self) -> None:
        self._long, self._on = [], True
        self._last = (time.perf_counter(), time.thread_time())
        self._loop.call_soon(self._tick)

    def _tick(self) -> None:
        if not self._on:
            return
        now = (time.perf_counter(), time.thread_time())
        wall, cpu = now[0] - self._last[0], now[1] - self._last[1]
        if wall >= LONG_TURN and len(self._long) < MAX_TRACES:
            self._long.append((wall * 1000, cpu * 1000))
        self._last = now
        self._loop.call_soon(self._tick)

    def stop(self) -> tuple[int, float, float, float]:
        """(turns of LONG_TURN or more, their wall ms, their loop-thread CPU ms, longest ms)."""
        self._on = False
        long = self._long
        longest = max((wall for wall, _ in long), default=0.0)
        return len(long), sum(w for w, _ in long), sum(c for _, c in long), longest


class GcPauses:
    """The garbage collector's passes while recording: count and longest (ms) per generation."""

    def __init__(self) -> None:
        self._began = 0.0
        self._passes: list[tuple[int, float]] = []

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        now = time.perf_counter()
        if phase == "start":
            self._began = now
        elif len(self._passes) < MAX_TRACES:
            self._passes.append((info["generation"], now - self._began))

    def start(self) -> None:
        self._passes = []
        gc.callbacks.append(self._callback)

    def stop(self) -> dict[int, tuple[int, float]]:
        gc.callbacks.remove(self._callback)
        summary: dict[int, tuple[int, float]] = {}
        for generation, seconds in self._passes:
            count, longest = summary.get(generation, (0, 0.0))
            summary[generation] = (count + 1, max(longest, seconds * 1000))
        return summary


# --- the prober (child process) ------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    path: str
    sent: float  # perf_counter before the write
    acked: float  # the write acknowledged
    changed: float  # the first answer naming the new owner (inf: none within PROBE_TIMEOUT)
    asks: int  # lookups asked after the write


class _Client:
    """A blocking binary client: one lookup at a time."""

    def __init__(self, port: int) -> None:
        self._sock = socket.create_connection((HOST, port))
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._request_id = 0
        self._sock.sendall(codec.connect("bench-prober", 21))
        command = self._read()
        if command.type != BaseCommand.CONNECTED:
            raise AssertionError(f"expected CONNECTED, got {command.type}")

    def _exactly(self, size: int) -> bytes:
        chunks, missing = [], size
        while missing:
            chunk = self._sock.recv(missing)
            if not chunk:
                raise ConnectionError("the gateway closed the prober's connection")
            chunks.append(chunk)
            missing -= len(chunk)
        return b"".join(chunks)

    def _read(self) -> BaseCommand:
        (total,) = _HEADER.unpack(self._exactly(4))
        frame = self._exactly(total)
        (size,) = _HEADER.unpack_from(frame)
        return BaseCommand.FromString(frame[4 : 4 + size])

    def broker_url(self, topic: str) -> str:
        self._request_id += 1
        self._sock.sendall(codec.lookup(topic, self._request_id))
        command = self._read()
        return str(command.lookupTopicResponse.brokerServiceUrl)

    def close(self) -> None:
        self._sock.close()


def _probe(
    connect_string: str, port: int, bundles: list[Probed], brokers: int, pipe: Connection
) -> None:
    client = _Client(port)
    owners = {b.path: b.owner for b in bundles}
    rng = random.Random(11)
    with connected(connect_string) as zk:
        for bundle in bundles:  # warm: every probed bundle's answer is cached before any probe
            if client.broker_url(bundle.topic) != broker_url(bundle.owner):
                raise AssertionError(f"{bundle.topic}: not owned by b{bundle.owner} at start")
        pipe.send("ready")
        turn = 0
        while (command := pipe.recv()) != "stop":
            count, max_seconds, gap = command
            probes: list[Probe] = []
            ends = time.perf_counter() + max_seconds
            while len(probes) < count and time.perf_counter() < ends:
                bundle = bundles[turn % len(bundles)]
                turn += 1
                owner = owners[bundle.path] % brokers + 1
                wanted, data = broker_url(owner), encode(ownership_node(owner))
                sent = time.perf_counter()
                zk.set(bundle.path, data)
                acked = time.perf_counter()
                owners[bundle.path] = owner
                asks, changed = 0, float("inf")
                while time.perf_counter() - acked < PROBE_TIMEOUT:
                    asks += 1
                    if client.broker_url(bundle.topic) == wanted:
                        changed = time.perf_counter()
                        break
                probes.append(Probe(bundle.path, sent, acked, changed, asks))
                time.sleep(rng.uniform(0, 2 * gap))  # not in step with the load's rhythm
            pipe.send(probes)
    client.close()


# --- this process: the load and the report -------------------------------------------------------


@dataclass
class Phase:
    name: str
    probes: list[Probe]
    stages: dict[str, list[float]]  # stage -> ms after the ack, one per probe that saw it
    lookups_per_second: float = 0.0
    server_cpu_us: float = 0.0  # the gateway's CPU per load lookup over the phase
    turns: tuple[float, ...] = ()  # the gateway loop's long turns (LoopTurns.stop)
    gc_passes: dict[int, tuple[int, float]] = field(default_factory=dict)  # gen: count, max ms

    def latencies_ms(self) -> list[float]:
        return [(p.changed - p.acked) * 1000 for p in self.probes]

    def lost(self) -> int:
        return sum(1 for p in self.probes if p.changed == float("inf"))


def stage_times(
    probes: list[Probe], traces: list[tuple[str, str, float]]
) -> dict[str, list[float]]:
    """For each probe, the first record of each stage for its znode between its write and its
    changed answer, as ms after the write's acknowledgement (a watch may be read before the
    writer hears its ack: negative)."""
    by_path: dict[str, list[tuple[float, str]]] = {}
    for stage, path, at in traces:
        by_path.setdefault(path, []).append((at, stage))
    stages: dict[str, list[float]] = {name: [] for name, _ in STAGES}
    for probe in probes:
        if probe.changed == float("inf"):
            continue
        seen: dict[str, float] = {}
        for at, stage in by_path.get(probe.path, ()):
            if probe.sent <= at <= probe.changed and stage not in seen:
                seen[stage] = at
        seen["answer"] = probe.changed
        for stage, at in seen.items():
            stages[stage].append((at - probe.acked) * 1000)
    return stages


async def run(args: argparse.Namespace) -> list[Phase]:
    nodes = cluster_nodes(
        namespaces=args.namespaces, bundles_per_namespace=args.bundles, brokers=args.brokers
    )
    bundles = probed_bundles(args.namespaces, args.bundles, args.brokers, PROBED_BUNDLES)
    topics = [
        f"persistent://{TENANT}/ns{t % args.namespaces}/topic-{t}" for t in range(args.topics)
    ]
    requests = [codec.lookup(topic, i + 1) for i, topic in enumerate(topics)]
    loop = asyncio.get_running_loop()
    context = multiprocessing.get_context("spawn")
    with EmbeddedZooKeeper() as zk:
        with connected(zk.connect_string) as client:
            started = time.perf_counter()
            await loop.run_in_executor(None, seed, client, nodes)
        print(f"seeded {len(nodes):,} znodes in {time.perf_counter() - started:.1f} s")
        gateway = Child(
            context, "bench-gateway", _serve, zk.connect_string, args.switch_interval_ms
        )
        prober: Child | None = None
        try:
            port = await gateway.reply(180.0)
            prober = Child(
                context, "bench-prober", _probe, zk.connect_string, port, bundles, args.brokers
            )
            await prober.reply(120.0)
            return await _phases(args, gateway, prober, port, requests)
        finally:
            for child in (prober, gateway):
                if child is not None:
                    await child.stop()


class Child:
    """A child process (`target(*args, pipe)`) and this end of its pipe."""

    def __init__(self, context: Any, name: str, target: Callable[..., None], *args: Any) -> None:
        self._pipe, child_end = context.Pipe()
        self._process = context.Process(target=target, args=(*args, child_end), name=name)
        self._process.start()

    def send(self, message: Any) -> None:
        self._pipe.send(message)

    async def reply(self, timeout: float) -> Any:
        """The child's next message; an error as soon as the child is gone (its traceback is
        on stderr), TimeoutError after `timeout`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not await loop.run_in_executor(None, self._pipe.poll, 0.5):
            if not self._process.is_alive():
                raise RuntimeError(f"{self._process.name} exited ({self._process.exitcode})")
            if loop.time() > deadline:
                raise TimeoutError(f"{self._process.name} did not answer in {timeout:.0f} s")
        return self._pipe.recv()

    async def stop(self) -> None:
        if self._process.is_alive():
            with contextlib.suppress(OSError):
                self._pipe.send("stop")
            await asyncio.get_running_loop().run_in_executor(None, self._process.join, 30)
        if self._process.is_alive():
            self._process.terminate()


async def _probe_phase(name: str, args: argparse.Namespace, gateway: Child, prober: Child) -> Phase:
    prober.send((args.probes, args.max_seconds, args.gap_ms / 1000))
    probes = await prober.reply(args.max_seconds + 60)
    gateway.send("traces")
    traces = await gateway.reply(60.0)
    return Phase(name, probes, stage_times(probes, traces))


async def _phases(
    args: argparse.Namespace,
    gateway: Child,
    prober: Child,
    port: int,
    requests: list[bytes],
) -> list[Phase]:
    loop = asyncio.get_running_loop()
    gateway.send("traces")  # (drop the warm-up's)
    await gateway.reply(60.0)
    unloaded = await _probe_phase("none", args, gateway, prober)

    tally = Tally()
    connections: list[_LoadConnection] = []
    for c in range(args.connections):
        offset = c * len(requests) // args.connections
        _, conn = await loop.create_connection(
            functools.partial(_LoadConnection, requests, offset, args.depth, tally), HOST, port
        )
        connections.append(conn)
    await asyncio.wait_for(asyncio.gather(*(c.connected for c in connections)), 60)
    await asyncio.sleep(args.warmup)  # every load topic read and memoised
    gc.collect()
    gc.disable()  # (this process's collections stall every load connection at once)
    try:
        alone = await _load_window(gateway, tally, lambda: asyncio.sleep(args.load_seconds))
        alone.name = f"{args.connections} x {args.depth}, no writes"
        loaded = await _load_window(gateway, tally, lambda: _probe_phase("", args, gateway, prober))
        loaded.name = f"{args.connections} x {args.depth}"
    finally:
        gc.enable()
        for conn in connections:
            conn.close()
    if tally.failed:
        print(f"{tally.failed} load lookups failed")
    return [unloaded, alone, loaded]


async def _load_window(gateway: Child, tally: Tally, during: Callable[[], Any]) -> Phase:
    answered = tally.answered + tally.failed
    gateway.send("begin")
    started = time.perf_counter()
    tally.recording = True
    outcome = await during()
    tally.recording = False
    elapsed = time.perf_counter() - started
    gateway.send("end")
    cpu, turns, pauses = await gateway.reply(60.0)
    count = max(tally.answered + tally.failed - answered, 1)
    phase = outcome if isinstance(outcome, Phase) else Phase("", [], {})
    phase.lookups_per_second = count / elapsed
    phase.server_cpu_us = cpu / count * 1e6
    phase.turns = tuple(turns)
    phase.gc_passes = pauses
    return phase


def report(phases: list[Phase]) -> str:
    rows = [
        "| load | writes | changed answer p50 ms | p99 ms | max ms | lost | load lookups/s "
        "| gateway CPU us/lookup |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for phase in phases:
        latencies = phase.latencies_ms()
        load = (
            f"{phase.lookups_per_second:,.0f} | {phase.server_cpu_us:.2f}"
            if phase.lookups_per_second
            else "- | -"
        )
        if latencies:
            rows.append(
                f"| {phase.name} | {len(latencies)} | {percentile(latencies, 0.5):.1f} "
                f"| {percentile(latencies, 0.99):.1f} | {max(latencies):.1f} | {phase.lost()} "
                f"| {load} |"
            )
        else:
            rows.append(f"| {phase.name} | 0 | - | - | - | - | {load} |")
    probed = [p for p in phases if p.probes]
    rows += ["", "Where the time goes (ms after the write's acknowledgement, p50 / p99):", ""]
    rows.append("| step | " + " | ".join(f"load: {p.name}" for p in probed) + " |")
    rows.append("|---|" + "---|" * len(probed))
    for stage, label in STAGES:
        cells = []
        for phase in probed:
            values = phase.stages.get(stage, [])
            cells.append(
                f"{percentile(values, 0.5):.1f} / {percentile(values, 0.99):.1f}" if values else "-"
            )
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    loaded = [p for p in phases if p.turns]
    rows += [
        "",
        f"The gateway's loop turns of {LONG_TURN * 1000:.0f} ms or more under load, with the "
        "loop thread's CPU time in them, and the garbage collector's passes:",
        "",
        "| load | long turns | their wall ms | their CPU ms | longest ms "
        "| gc passes (generation: count, longest ms) |",
        "|---|---|---|---|---|---|",
    ]
    for phase in loaded:
        count, wall, cpu, longest = phase.turns
        passes = ", ".join(
            f"{gen}: {n}, {ms:.1f}" for gen, (n, ms) in sorted(phase.gc_passes.items())
        )
        rows.append(
            f"| {phase.name} | {count:.0f} | {wall:.0f} | {cpu:.0f} | {longest:.1f} "
            f"| {passes or '-'} |"
        )
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.freshness", description=__doc__)
    parser.add_argument("--probes", type=int, default=300, help="writes per phase")
    parser.add_argument("--max-seconds", type=float, default=60.0, help="bound of each phase")
    parser.add_argument("--gap-ms", type=float, default=20.0, help="mean pause between writes")
    parser.add_argument("--namespaces", type=int, default=20)
    parser.add_argument("--bundles", type=int, default=1000, help="bundles per namespace")
    parser.add_argument("--brokers", type=int, default=20)
    parser.add_argument("--topics", type=int, default=2000, help="topics the load asks for")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--depth", type=int, default=16, help="lookups in flight per connection")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds of load before")
    parser.add_argument("--load-seconds", type=float, default=3.0, help="load with no writes")
    parser.add_argument(
        "--switch-interval-ms",
        type=float,
        help="sys.setswitchinterval of the gateway child (default: what the gateway sets)",
    )
    parser.add_argument("--raw", metavar="FILE", help="append every phase's figures (JSON)")
    args = parser.parse_args(argv)
    phases = asyncio.run(run(args))
    print(report(phases))
    if args.raw:
        with open(args.raw, "a", encoding="utf-8") as raw:
            for phase in phases:
                figures = {
                    "phase": phase.name,
                    "latencies_ms": phase.latencies_ms(),
                    "stages": phase.stages,
                    "lookups_per_second": phase.lookups_per_second,
                    "server_cpu_us": phase.server_cpu_us,
                    "turns": phase.turns,
                    "gc_passes": phase.gc_passes,
                }
                raw.write(json.dumps(figures) + "\n")
    return 1 if any(p.lost() for p in phases) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
