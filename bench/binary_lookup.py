"""Binary lookups per second and latency with many concurrent pipelined connections, against
(a) the gateway's BinaryServer on a FileSource snapshot and (b) a baseline asyncio server that
answers every LOOKUP frame with one pre-encoded response, measured in the same run.

    .venv/bin/python -m bench.binary_lookup [--connections 64] [--depth 16] [--duration 5]
                                            [--profile gateway.pstats]

Each server runs alone in a child process (one event loop, like the gateway); the load generator
runs in this process. Both servers get the same load: every connection keeps ``depth`` lookups in
flight and sends a new one for every answer. Figures cover ``--duration`` seconds after a
warm-up. "server CPU" is the child's user+system CPU time per lookup over the same window, which
does not depend on how fast the load generator is.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import io
import logging
import multiprocessing
import pstats
import struct
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import cast

from bench.common import (
    cluster_snapshot,
    cpu_seconds,
    measured_window,
    percentile,
    receive,
    resident_mib,
    take_commands,
)
from pulsar_lookup_gateway.listeners.binary import BinaryServer, BinarySettings
from pulsar_lookup_gateway.listeners.endpoints.addresses import Endpoint, Scheme
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import BaseCommand, LookupType
from pulsar_lookup_gateway.lookup.networks import NetworkTable, parse_cidr
from pulsar_lookup_gateway.lookup.selection import ClientRoutes
from pulsar_lookup_gateway.metadata_store.file import FileSource
from pulsar_lookup_gateway.serving.service import LookupService

HOST = "127.0.0.1"
_HEADER = struct.Struct(">I")
#: The servers a run can measure: the gateway, the gateway that locates its clients (PROXY v2
#: header from a trusted balancer, 64 client networks to match), and the pre-encoded baseline.
KINDS = ("gateway", "located", "baseline")


def located_routes(networks: int = 64) -> ClientRoutes:
    """`networks` /24s of 10.x, each choosing the external listener (the last one holds the
    address the load generator's PROXY headers give, so matching walks the whole table)."""
    cidrs = [f"10.{i // 256}.{i % 256}.0/24" for i in range(networks)]
    return ClientRoutes.build({}, {"external": cidrs})


def proxy_v2_header(client: str, port: int) -> bytes:
    """The PROXY v2 header a balancer writes for a TCP4 client (to 127.0.0.1:6650)."""
    from ipaddress import IPv4Address

    body = IPv4Address(client).packed + IPv4Address(HOST).packed + struct.pack(">HH", port, 6650)
    signature = b"\r\n\r\n\x00\r\nQUIT\n"
    return signature + struct.pack(">BBH", 0x21, 0x11, len(body)) + body


# --- the cluster and the servers (child processes) ---------------------------------------------


class _Baseline(asyncio.Protocol):
    """Splits frames and answers each with the same pre-encoded bytes: the cost of asyncio,
    the socket and framing, with no decoding and no lookup."""

    def __init__(self, connected: bytes, answer: bytes) -> None:
        self._connected = connected
        self._answer = answer
        self._buf = bytearray()
        self._handshaken = False
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's do not subclass it

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        pos, frames = 0, 0
        while len(buf) - pos >= 4:
            (size,) = _HEADER.unpack_from(buf, pos)
            if len(buf) - pos < 4 + size:
                break
            pos += 4 + size
            frames += 1
        del buf[:pos]
        if not frames:
            return
        assert self._transport is not None
        if not self._handshaken:  # the first frame is CONNECT
            self._handshaken = True
            self._transport.write(self._connected + self._answer * (frames - 1))
        else:
            self._transport.write(self._answer * frames)


def _serve(kind: str, snapshot: str, pipe: Connection, profile: str | None, loop: str) -> None:
    factory = None
    if loop == "uvloop":  # not a dependency: `pip install uvloop` to compare
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(_serve_async(kind, snapshot, pipe, profile))


async def _serve_async(kind: str, snapshot: str, pipe: Connection, profile: str | None) -> None:
    logging.basicConfig(level=logging.WARNING)
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    source: FileSource | None = None
    if kind in ("gateway", "located"):
        source = FileSource(snapshot, poll_interval=3600)
        await source.start()
        located = kind == "located"
        # Both answer for the external listener: the plain gateway by its socket's tag, the
        # located one by the client network its PROXY headers give.
        listener = "internal" if located else "external"
        spec = SocketSpec(Endpoint(Scheme.PULSAR, HOST, 0), listener, "bench")
        server = BinaryServer(
            spec,
            LookupService(
                source,
                internal_listener="internal",
                routes=located_routes() if located else ClientRoutes(),
            ),
            BinarySettings(
                keep_alive_interval=0,
                handshake_timeout=30,
                proxy_protocol=located,
                trusted_proxies=NetworkTable.build([(parse_cidr("127.0.0.0/8"), True)]),
            ),
        )
        await server.start()
        port = server.port
    else:
        connected = codec.connected("baseline", 21, 5 * 1024 * 1024)
        answer = codec.lookup_response(
            1,
            response=LookupType.Connect,
            broker_url="pulsar://b1.example.com:6650",
            broker_url_tls="pulsar+ssl://b1.example.com:6651",
            authoritative=True,
        )
        baseline = await loop.create_server(lambda: _Baseline(connected, answer), HOST, 0)
        port = baseline.sockets[0].getsockname()[1]
    profiler = cProfile.Profile() if profile else None
    cpu_at_begin = 0.0

    def on_message() -> None:
        nonlocal cpu_at_begin
        message = pipe.recv()
        if message == "begin":
            cpu_at_begin = cpu_seconds()
            if profiler is not None:
                profiler.enable()
        elif message == "end":
            if profiler is not None and profile is not None:
                profiler.disable()
                profiler.dump_stats(profile)
            pipe.send(cpu_seconds() - cpu_at_begin)
        elif message == "rss":  # (resident MiB now, peak MiB)
            pipe.send(resident_mib())
        elif message == "stop" and not stop.done():
            stop.set_result(None)

    loop.add_reader(pipe.fileno(), on_message)
    pipe.send(port)
    await stop
    loop.remove_reader(pipe.fileno())
    if kind != "baseline":
        await server.stop(timeout=5)
        assert source is not None
        await source.close()
    else:
        baseline.close()


# --- the load generator (this process) --------------------------------------------------------


@dataclass
class Tally:
    """What the connections of one run saw. Latencies are kept as (seconds, count) pairs: the
    lookups of one write that are answered by one read share both times."""

    recording: bool = False
    answered: int = 0
    failed: int = 0

    def __post_init__(self) -> None:
        self.latencies: list[tuple[float, int]] = []
        # Answer frame bytes -> "was it a Connect answer": every connection reuses the same
        # requests (same request ids), so the answers repeat byte for byte, and a known frame
        # costs a dict read instead of a protobuf decode (which made the load generator, not
        # the server, the bound of a run). Bounded: past the cap, frames are decoded each time.
        self._connect_answers: dict[bytes, bool] = {}

    def is_connect(self, body: bytes) -> bool:
        known = self._connect_answers.get(body)
        if known is None:
            command = BaseCommand.FromString(body)
            known = (
                command.type == BaseCommand.LOOKUP_RESPONSE
                and command.lookupTopicResponse.response == LookupType.Connect
            )
            if len(self._connect_answers) < _MAX_KNOWN_ANSWERS:
                self._connect_answers[body] = known
        return known

    def latency_values(self) -> list[float]:
        values: list[float] = []
        for seconds, count in self.latencies:
            values.extend([seconds] * count)
        return values


_MAX_KNOWN_ANSWERS = 1 << 16


@dataclass(slots=True)
class _Write:
    """Lookups written together, and how many of them are not answered yet."""

    at: float
    unanswered: int


class _LoadConnection(asyncio.Protocol):
    """Keeps ``depth`` lookups in flight; answers come back in order on one connection."""

    def __init__(
        self, requests: list[bytes], offset: int, depth: int, tally: Tally, preamble: bytes = b""
    ) -> None:
        """`preamble`: bytes sent before CONNECT (a PROXY header)."""
        self._preamble = preamble
        self._requests = requests
        self._next = offset
        self._depth = depth
        self._tally = tally
        self._sent: deque[_Write] = deque()
        self._buf = bytearray()
        self._transport: asyncio.Transport | None = None
        self._handshaken = False
        self.sending = True
        self.connected: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's do not subclass it
        self._transport.write(self._preamble + codec.connect("bench", 21))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.connected.done():
            self.connected.set_exception(ConnectionError("connection lost before CONNECTED"))

    def _send(self, count: int) -> None:
        assert self._transport is not None
        requests, n, start = self._requests, len(self._requests), self._next % len(self._requests)
        self._next += count
        if start + count <= n:
            chunk = b"".join(requests[start : start + count])
        else:  # (past the end of the list: round again, as many times as it takes)
            chunk = b"".join(requests[(start + i) % n] for i in range(count))
        self._sent.append(_Write(time.perf_counter(), count))
        self._transport.write(chunk)

    def data_received(self, data: bytes) -> None:
        self._buf += data
        bodies = take_commands(self._buf)
        if not bodies:
            return
        if not self._handshaken:  # the first answer is CONNECTED
            self._handshaken = True
            command = BaseCommand.FromString(bodies.pop(0))
            if command.type != BaseCommand.CONNECTED:
                raise AssertionError(f"expected CONNECTED, got {command.type}")
            if not self.connected.done():
                self.connected.set_result(None)
            self._send(self._depth)
        answered = len(bodies)
        now, tally = time.perf_counter(), self._tally
        writes = self._settle(answered)
        if tally.recording and answered:
            tally.latencies.extend((now - at, count) for at, count in writes)
            is_connect = tally.is_connect
            connects = sum(1 for body in bodies if is_connect(body))
            tally.answered += connects
            tally.failed += answered - connects
        if answered and self.sending:
            self._send(answered)

    def _settle(self, answered: int) -> list[tuple[float, int]]:
        """The writes the next `answered` answers belong to, oldest first: (when written, how
        many of the answers), forgotten once all their answers are in."""
        sent, writes = self._sent, []
        while answered:
            head = sent[0]
            taken = min(answered, head.unanswered)
            writes.append((head.at, taken))
            answered -= taken
            head.unanswered -= taken
            if not head.unanswered:
                sent.popleft()
        return writes

    def close(self) -> None:
        self.sending = False
        if self._transport is not None:
            self._transport.close()


@dataclass(frozen=True)
class Result:
    server: str
    lookups_per_second: float
    p50_ms: float
    p99_ms: float
    cpu_us_per_lookup: float
    client_cpu_us_per_lookup: float
    failed: int
    server_rss_mib: tuple[float, float] = (0.0, 0.0)  # (resident after the run, peak)


async def _measure(
    kind: str,
    snapshot: Path,
    requests: list[bytes],
    args: argparse.Namespace,
    profile: str | None,
) -> Result:
    preamble = proxy_v2_header("10.0.63.9", 40000) if kind == "located" else b""
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(
        target=_serve,
        args=(kind, str(snapshot), child, profile, args.loop),
        name=f"bench-{kind}",
    )
    process.start()
    loop = asyncio.get_running_loop()
    try:
        port = await loop.run_in_executor(None, receive, parent, 60.0)
        tally = Tally()
        connections: list[_LoadConnection] = []
        for c in range(args.connections):
            offset = c * len(requests) // args.connections
            _, conn = await loop.create_connection(
                functools.partial(_LoadConnection, requests, offset, args.depth, tally, preamble),
                HOST,
                port,
            )
            connections.append(conn)
        await asyncio.wait_for(asyncio.gather(*(c.connected for c in connections)), 30)
        await asyncio.sleep(args.warmup)
        # The load generator's own garbage collections (its per-read lists) stalled every
        # connection at once and were most of both servers' p99: none while measuring.
        elapsed, client_cpu, cpu = await measured_window(
            parent, tally, args.duration, collect_garbage=False
        )
        for conn in connections:
            conn.close()
        parent.send("rss")
        rss = await loop.run_in_executor(None, receive, parent, 60.0)
        latencies = tally.latency_values()
        count = max(tally.answered + tally.failed, 1)
        return Result(
            kind,
            tally.answered / elapsed,
            percentile(latencies, 0.50) * 1000,
            percentile(latencies, 0.99) * 1000,
            cpu / count * 1e6,
            client_cpu / count * 1e6,
            tally.failed,
            rss,
        )
    finally:
        parent.send("stop")
        await loop.run_in_executor(None, process.join, 30)
        if process.is_alive():
            process.terminate()


async def run(args: argparse.Namespace) -> list[Result]:
    with tempfile.TemporaryDirectory() as tmp:
        snapshot = Path(tmp) / "cluster.json"
        topics = cluster_snapshot(snapshot)
        requests = [codec.lookup(topic, i + 1) for i, topic in enumerate(topics)]
        results = []
        for kind in args.kinds:
            profile = args.profile if kind == "gateway" else None
            results.append(await _measure(kind, snapshot, requests, args, profile))
        return results


def table(results: list[Result], args: argparse.Namespace) -> str:
    load = f"{args.connections} x {args.depth}"
    rows = [
        "| server | connections x in flight | lookups/s | p50 ms | p99 ms | server CPU us/lookup "
        "| load generator CPU us/lookup |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        rows.append(
            f"| {r.server} | {load} | {r.lookups_per_second:,.0f} | {r.p50_ms:.2f} | "
            f"{r.p99_ms:.2f} | {r.cpu_us_per_lookup:.2f} | {r.client_cpu_us_per_lookup:.1f} |"
        )
    by_name = {r.server: r for r in results}
    pairs = [("gateway", "baseline"), ("located", "baseline"), ("located", "gateway")]
    for name, base in pairs:
        if name in by_name and base in by_name:
            rows.append(_ratio_row(by_name[name], by_name[base]))
    return "\n".join(rows)


def _ratio_row(server: Result, base: Result) -> str:
    throughput = server.lookups_per_second / base.lookups_per_second
    return (
        f"| **{server.server} / {base.server}** | | **{throughput:.2f}** | "
        f"{server.p50_ms / base.p50_ms:.2f} | {server.p99_ms / base.p99_ms:.2f} | "
        f"{server.cpu_us_per_lookup / base.cpu_us_per_lookup:.2f} | |"
    )


def _profile_summary(path: str, lines: int = 25) -> str:
    out = io.StringIO()
    stats = pstats.Stats(path, stream=out)
    stats.strip_dirs().sort_stats("tottime").print_stats(lines)
    return out.getvalue()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.binary_lookup", description=__doc__)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--depth", type=int, default=16, help="lookups in flight per connection")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds measured per server")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--profile", metavar="FILE", help="cProfile the gateway into FILE")
    parser.add_argument(
        "--kinds", nargs="+", choices=KINDS, default=["gateway", "baseline"], help="servers to run"
    )
    parser.add_argument(
        "--loop", choices=("asyncio", "uvloop"), default="asyncio", help="the servers' event loop"
    )
    args = parser.parse_args(argv)
    results = asyncio.run(run(args))
    print(table(results, args))
    failed = sum(r.failed for r in results)
    if failed:
        print(f"\n{failed} lookups failed")
    if args.profile:
        print(f"\ngateway profile ({args.profile}), by own time:\n")
        print(_profile_summary(args.profile))
    return 1 if failed else 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
