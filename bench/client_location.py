"""What locating clients costs the server: a PROXY v2 header and a client-network match per
connection, against the same gateway without them, in the same run.

    .venv/bin/python -m bench.client_location [--duration 5] [--rounds 2]

Two figures, each for the plain gateway ("gateway": socket tagged external) and the locating one
("located": socket tagged internal, `proxyProtocol=true`, 64 client networks, the PROXY header
names a client in the last of them, so the answer is the external listener's as well):
- warm lookups: `bench.binary_lookup`'s pipelined load (64 connections x 16 in flight); the
  header and the match happen once per connection, so this shows what they add per lookup;
- connection churn: each connection sends [PROXY header] CONNECT and one LOOKUP, reads the
  answer and closes; server CPU per connection shows the per-connection price.
Rounds alternate the two servers so that drift on a shared machine hits both alike.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import struct
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench import binary_lookup
from bench.common import cluster_snapshot, receive
from pulsar_lookup_gateway.listeners.protocol import codec

HOST = binary_lookup.HOST
_SIZE = struct.Struct(">I")
CLIENT = ("10.0.63.9", 40000)  # in located_routes()'s last network


@dataclass(frozen=True)
class Churn:
    server: str
    connections_per_second: float
    cpu_us_per_connection: float
    failed: int


async def _one_connection(port: int, preamble: bytes, request: bytes) -> bool:
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        writer.write(preamble + codec.connect("bench", 21) + request)
        answers = 0
        while answers < 2:  # CONNECTED, then the lookup's answer
            size = _SIZE.unpack(await reader.readexactly(4))[0]
            await reader.readexactly(size)
            answers += 1
        return True
    except (OSError, asyncio.IncompleteReadError):
        return False
    finally:
        writer.close()


async def churn(kind: str, snapshot: Path, request: bytes, args: argparse.Namespace) -> Churn:
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(
        target=binary_lookup._serve, args=(kind, str(snapshot), child, None, "asyncio")
    )
    process.start()
    loop = asyncio.get_running_loop()
    preamble = binary_lookup.proxy_v2_header(*CLIENT) if kind == "located" else b""
    done = failed = 0
    try:
        port = await loop.run_in_executor(None, receive, parent, 60.0)
        await _one_connection(port, preamble, request)  # warm the answer cache
        parent.send("begin")
        started = time.perf_counter()
        deadline = started + args.duration

        async def worker() -> None:
            nonlocal done, failed
            while time.perf_counter() < deadline:
                ok = await asyncio.wait_for(_one_connection(port, preamble, request), 10)
                done, failed = done + ok, failed + (not ok)

        await asyncio.gather(*(worker() for _ in range(args.concurrency)))
        elapsed = time.perf_counter() - started
        parent.send("end")
        cpu = await loop.run_in_executor(None, receive, parent, 60.0)
    finally:
        parent.send("stop")
        await loop.run_in_executor(None, process.join, 30)
        if process.is_alive():
            process.terminate()
    return Churn(kind, done / elapsed, cpu / max(done, 1) * 1e6, failed)


async def run(args: argparse.Namespace) -> tuple[list[binary_lookup.Result], list[Churn]]:
    warm: list[binary_lookup.Result] = []
    churned: list[Churn] = []
    with tempfile.TemporaryDirectory() as tmp:
        snapshot = Path(tmp) / "cluster.json"
        topics = cluster_snapshot(snapshot)
        requests = [codec.lookup(topic, i + 1) for i, topic in enumerate(topics)]
        for _ in range(args.rounds):
            for kind in ("gateway", "located"):
                warm.append(await binary_lookup._measure(kind, snapshot, requests, args, None))
                churned.append(await churn(kind, snapshot, requests[0], args))
    return warm, churned


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(warm: list[binary_lookup.Result], churned: list[Churn]) -> str:
    def of(kind: str) -> tuple[float, float, float, float]:
        w = [r for r in warm if r.server == kind]
        c = [r for r in churned if r.server == kind]
        return (
            _median([r.lookups_per_second for r in w]),
            _median([r.cpu_us_per_lookup for r in w]),
            _median([r.connections_per_second for r in c]),
            _median([r.cpu_us_per_connection for r in c]),
        )

    rows = [
        "| server | warm lookups/s | server CPU us/lookup | connections/s (churn) "
        "| server CPU us/connection |",
        "|---|---|---|---|---|",
    ]
    plain, located = of("gateway"), of("located")
    for name, figures in (("gateway", plain), ("located", located)):
        rows.append(
            f"| {name} | {figures[0]:,.0f} | {figures[1]:.1f} | {figures[2]:,.0f} "
            f"| {figures[3]:.1f} |"
        )
    ratios = [located[i] / plain[i] for i in range(4)]
    rows.append(
        f"| **located / gateway** | **{ratios[0]:.2f}** | **{ratios[1]:.2f}** "
        f"| **{ratios[2]:.2f}** | **{ratios[3]:.2f}** |"
    )
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.client_location", description=__doc__)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per measurement")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per server")
    parser.add_argument("--connections", type=int, default=64, help="warm load: connections")
    parser.add_argument("--depth", type=int, default=16, help="warm load: lookups in flight")
    parser.add_argument("--concurrency", type=int, default=16, help="churn: parallel clients")
    parser.add_argument("--warmup", type=float, default=1.0)
    args = parser.parse_args(argv)
    args.loop = "asyncio"
    warm, churned = asyncio.run(run(args))
    print(table(warm, churned))
    failed = sum(r.failed for r in warm) + sum(r.failed for r in churned)
    if failed:
        print(f"\n{failed} lookups or connections failed")
    return 1 if failed else 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
