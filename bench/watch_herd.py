"""A subscribe herd on the ownership watch: N streams, connected first, all send one subscribe
of T new topics at once. Measured: how fast the streams get their first answers, and what the
herd does to a bystander's cached binary lookup on another socket of the same gateway (its
latency before the herd, the baseline, and during it, in the same run), against one stream
subscribing alone (its first answers' wait: the herd's baseline, same run).

    .venv/bin/python -m bench.watch_herd [--streams 1000] [--topics 100] [--rounds 1]

The gateway runs alone in a child process (one event loop, as `run`) on a file snapshot of 20
brokers and one namespace of 64 owned bundles, with an HTTP socket (the watch) and a binary
socket. The bystander is a third process: one binary connection that asks the same topic (a
memo hit) every 5 ms and times each answer. This process opens the streams (100 connecting at
a time, none subscribing), waits a second, then sends every stream's subscribe in one go
(topics of their own: `s<n>-t<t>`, so every topic is a new lookup) and times each topic's first
answer from the moment its stream's subscribe was sent. `--rounds`: herds one after another on
the same gateway (new streams, new topics), each reported.

Baselines, in each round: the bystander's latency for QUIET seconds before the herd; and one
stream subscribing T new topics alone, SOLO times one after the other, before the herd (each
topic's first answer timed as in the herd). The gateway's CPU time during the herd is reported
too (from just before the subscribes are sent to the last first answer; the streams connect
before and close after): per topic, it does not depend on how the machine's CPUs were shared;
and the wall seconds the gateway's garbage collections (any generation) took in that time.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import multiprocessing
import os
import resource
import socket
import struct
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import aiohttp

from bench.common import cluster_nodes, percentile, receive
from bench.watch import _Collections
from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot

BROKERS = 20
BUNDLES = 64
NAMESPACE = "bench/ns0"  # (the one namespace of bench.common.cluster_nodes)
CONNECT_BATCH = 100  # streams connecting at once
BYSTANDER_EVERY = 0.005  # seconds between the bystander's lookups
QUIET = 2.0  # seconds of the bystander's baseline, before the herd
AFTER = 1.0  # seconds the bystander goes on after the herd's last first answer
SOLO = 5  # subscribes of one stream alone (the first answers' baseline)
_HEADER = struct.Struct(">I")
#: The gateway's (watch lookups, CPU seconds, of which the kernel's, full collections, the
#: longest's wall and CPU seconds, seconds in collections of any generation)
Stats = tuple[int, float, float, int, float, float, float]


def cluster() -> dict[str, Any]:
    """One namespace of BUNDLES equal bundles, every bundle owned, over BROKERS brokers."""
    return cluster_nodes(namespaces=1, bundles_per_namespace=BUNDLES, brokers=BROKERS)


# -- the gateway, in a child process ----------------------------------------------------------


def _serve(config_text: str, conn: Connection, profile: str | None) -> None:
    """Child process: a gateway; sends its (HTTP, binary) ports, answers "lookups" with the
    watch's lookups made so far, its CPU seconds, and its full garbage collections since the
    last answer (how many, the longest's wall and CPU seconds), stops at "stop"; `profile`:
    where its cProfile of the herds goes (from each herd's first "lookups" to its second)."""
    from pulsar_lookup_gateway.gateway.process import Gateway, raise_open_files_limit
    from pulsar_lookup_gateway.http_api.watch import watches_for
    from pulsar_lookup_gateway.listeners.config.conf_file import parse_properties
    from pulsar_lookup_gateway.listeners.config.model import validate_raw

    collections = _Collections()
    profiler = cProfile.Profile() if profile is not None else None
    asked = 0

    async def run() -> None:
        nonlocal asked
        raise_open_files_limit()
        gateway = Gateway(validate_raw(parse_properties(config_text, "bench.conf")).config)
        await gateway.start()
        conn.send((gateway.port_of("external", "http"), gateway.port_of("external", "pulsar")))
        loop = asyncio.get_running_loop()
        while (message := await loop.run_in_executor(None, conn.recv)) != "stop":
            assert message == "lookups"
            hub = watches_for(gateway.service).hub
            times = os.times()
            cpu = (times.user + times.system, times.system)
            conn.send((hub.lookups, *cpu, *collections.take(), collections.take_all()))
            asked += 1
            if profiler is not None:  # (a herd starts at an odd one, ends at an even one)
                profiler.enable() if asked % 2 else profiler.disable()
        await gateway.stop()

    asyncio.run(run())
    if profiler is not None and profile is not None:
        profiler.dump_stats(profile)


# -- the bystander, in a process of its own -----------------------------------------------------


def _frame(sock: socket.socket, buffer: bytearray) -> bytes:
    while True:
        if len(buffer) >= 4:
            (size,) = _HEADER.unpack_from(buffer, 0)
            if len(buffer) >= 4 + size:
                frame = bytes(buffer[4 : 4 + size])
                del buffer[: 4 + size]
                return frame
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("the gateway closed the bystander's connection")
        buffer += data


def _bystander(port: int, conn: Connection) -> None:
    """One binary connection asking the same topic every BYSTANDER_EVERY seconds; sends back
    (sent at, took) for every lookup once told "stop"."""
    from pulsar_lookup_gateway.listeners.protocol import codec

    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buffer = bytearray()
    sock.sendall(codec.connect("bench", 21))
    _frame(sock, buffer)  # CONNECTED
    topic = f"persistent://{NAMESPACE}/bystander"
    samples: list[tuple[float, float]] = []
    request = 0
    conn.send("ready")
    while not conn.poll():
        request = request % 1000 + 1
        sent = time.perf_counter()
        sock.sendall(codec.lookup(topic, request))
        _frame(sock, buffer)
        samples.append((sent, time.perf_counter() - sent))
        time.sleep(BYSTANDER_EVERY)
    conn.recv()
    conn.send(samples)
    sock.close()


# -- the herd ---------------------------------------------------------------------------------


async def _stream(
    session: aiohttp.ClientSession, url: str, opened: asyncio.Semaphore
) -> aiohttp.ClientWebSocketResponse:
    async with opened:
        return await session.ws_connect(url, max_msg_size=1 << 20)


async def _first_answers(
    ws: aiohttp.ClientWebSocketResponse, topics: list[str], sent: float, firsts: list[float]
) -> bool:
    """Whether every topic was answered (False: the gateway closed the stream first)."""
    waiting = set(topics)
    async for message in ws:
        body = json.loads(message.data)
        topic = body.get("topic")
        if topic in waiting:
            waiting.discard(topic)
            firsts.append(time.perf_counter() - sent)
            if not waiting:
                return True
    return False


async def solo(
    session: aiohttp.ClientSession, url: str, args: argparse.Namespace, round_: int
) -> list[float]:
    """One stream alone subscribes T new topics, SOLO times: every topic's first answer's wait."""
    firsts: list[float] = []
    async with session.ws_connect(url, max_msg_size=1 << 20) as ws:
        for time_ in range(SOLO):
            topics = [
                f"persistent://{NAMESPACE}/r{round_}-solo{time_}-t{t}" for t in range(args.topics)
            ]
            frame = json.dumps({"type": "subscribe", "topics": topics})
            sent = time.perf_counter()
            await ws.send_str(frame)
            assert await asyncio.wait_for(_first_answers(ws, topics, sent, firsts), 30)
    return firsts


async def herd(
    session: aiohttp.ClientSession,
    url: str,
    args: argparse.Namespace,
    round_: int,
    stats: Callable[[], Awaitable[Stats]],
) -> tuple[float, float, list[float], int, Stats, Stats]:
    """One herd: (when the subscribes were sent, when the last first answer came, every
    topic's first answer's wait, the streams closed before all their answers, the gateway's
    `stats` just before the subscribes and just after the last first answer)."""
    opened = asyncio.Semaphore(CONNECT_BATCH)
    streams = await asyncio.gather(*(_stream(session, url, opened) for _ in range(args.streams)))
    await asyncio.sleep(1.0)
    names = [
        [f"persistent://{NAMESPACE}/r{round_}-s{n}-t{t}" for t in range(args.topics)]
        for n in range(args.streams)
    ]
    frames = [json.dumps({"type": "subscribe", "topics": topics}) for topics in names]
    firsts: list[float] = []
    before = await stats()
    started = time.perf_counter()
    waits = []
    for ws, topics, frame in zip(streams, names, frames, strict=True):
        sent = time.perf_counter()
        await ws.send_str(frame)
        waits.append(asyncio.create_task(_first_answers(ws, topics, sent, firsts)))
    answered = await asyncio.wait_for(asyncio.gather(*waits), 120)
    ended = time.perf_counter()
    after = await stats()
    await asyncio.gather(*(ws.close() for ws in streams))
    return started, ended, firsts, answered.count(False), before, after


async def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    context = multiprocessing.get_context("spawn")
    loop = asyncio.get_running_loop()
    with tempfile.TemporaryDirectory() as tmp:
        snapshot = Path(tmp) / "cluster.json"
        write_snapshot(snapshot, cluster())
        config = (
            f"metadataStoreUrl=file:{snapshot}\n"
            "advertisedListeners=external:pulsar://127.0.0.2:6650,"
            "external:http://127.0.0.2:8080\n"
            "bindAddresses=external:http://127.0.0.1:0,external:pulsar://127.0.0.1:0\n"
            "brokerServicePort=\nwebServicePort=\n"
            "watchMaxStreamsPerAddress=0\nwatchMaxStreamsPerRole=0\nmaxHttpServerConnections=0\n"
        )
        parent, child = context.Pipe()
        gateway = context.Process(target=_serve, args=(config, child, args.profile))
        gateway.start()
        results = []
        try:
            http_port, binary_port = await loop.run_in_executor(None, receive, parent, 60)
            url = f"http://127.0.0.1:{http_port}/lookup/v2/watch"
            connector = aiohttp.TCPConnector(limit=0)
            async with aiohttp.ClientSession(connector=connector) as session:
                for round_ in range(args.rounds):
                    results.append(await _round(session, url, binary_port, parent, args, round_))
        finally:
            parent.send("stop")
            gateway.join(30)
            if gateway.is_alive():
                gateway.kill()
    return results


async def _round(
    session: aiohttp.ClientSession,
    url: str,
    binary_port: int,
    gateway: Connection,
    args: argparse.Namespace,
    round_: int,
) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    context = multiprocessing.get_context("spawn")
    mine, theirs = context.Pipe()
    bystander = context.Process(target=_bystander, args=(binary_port, theirs))
    bystander.start()
    try:
        assert await loop.run_in_executor(None, receive, mine, 30) == "ready"
        quiet_from = time.perf_counter()
        await asyncio.sleep(QUIET)
        quiet_to = time.perf_counter()
        alone = await solo(session, url, args, round_)

        async def stats() -> Stats:
            gateway.send("lookups")
            answer: Stats = await loop.run_in_executor(None, receive, gateway, 10)
            return answer

        started, ended, firsts, closed, (before, cpu_before, system_before, *_), after = await herd(
            session, url, args, round_, stats
        )
        lookups, cpu, system, collected, longest, _cpu, collecting = after
        await asyncio.sleep(AFTER)
        mine.send("stop")
        samples: list[tuple[float, float]] = await loop.run_in_executor(None, receive, mine, 30)
    finally:
        bystander.join(30)
        if bystander.is_alive():
            bystander.kill()
    quiet = [took for at, took in samples if quiet_from <= at < quiet_to]
    during = [took for at, took in samples if started <= at < ended]
    return {
        "round": round_,
        "streams": args.streams,
        "topics": args.topics,
        "lookups": lookups - before,
        "cpu_s": cpu - cpu_before,
        "system_s": system - system_before,
        "full_gcs": collected,
        "longest_gc_ms": longest * 1000,
        "gc_s": collecting,
        "cpu_us_per_topic": (cpu - cpu_before) / (args.streams * args.topics) * 1e6,
        "solo_p50_ms": percentile(alone, 0.5) * 1000,
        "solo_p99_ms": percentile(alone, 0.99) * 1000,
        "quiet_p50_ms": percentile(quiet, 0.5) * 1000,
        "quiet_p99_ms": percentile(quiet, 0.99) * 1000,
        "quiet_max_ms": max(quiet, default=float("nan")) * 1000,
        "herd_p50_ms": percentile(during, 0.5) * 1000,
        "herd_p99_ms": percentile(during, 0.99) * 1000,
        "herd_max_ms": max(during, default=float("nan")) * 1000,
        "herd_samples": len(during),
        "first_p50_ms": percentile(firsts, 0.5) * 1000,
        "first_p99_ms": percentile(firsts, 0.99) * 1000,
        "first_max_ms": max(firsts, default=float("nan")) * 1000,
        "herd_s": ended - started,
        "closed": closed,
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="bench.watch_herd")
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--topics", type=int, default=100, help="per stream")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--profile", metavar="FILE", help="the gateway's cProfile stats")
    args = parser.parse_args(argv)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    print(
        "| streams x topics | watch lookups | bystander p50 / p99 / max: quiet (baseline) | "
        "during the herd (samples) | first answers p50 / p99: one stream alone (baseline) | "
        "herd: p50 / p99 / max | herd served in | gateway CPU in the herd (per topic; kernel) | "
        "full GCs in the herd (longest) | all collections in the herd |\n"
        "|---|---|---|---|---|---|---|---|---|---|"
    )
    for r in asyncio.run(measure(args)):
        print(
            f"| {r['streams']} x {r['topics']} | {r['lookups']} |"
            f" {r['quiet_p50_ms']:.1f} / {r['quiet_p99_ms']:.1f} / {r['quiet_max_ms']:.1f} ms |"
            f" {r['herd_p50_ms']:.1f} / {r['herd_p99_ms']:.1f} / {r['herd_max_ms']:.1f} ms"
            f" ({r['herd_samples']}) |"
            f" {r['solo_p50_ms']:.1f} / {r['solo_p99_ms']:.1f} ms |"
            f" {r['first_p50_ms']:.0f} / {r['first_p99_ms']:.0f} / {r['first_max_ms']:.0f} ms |"
            f" {r['herd_s']:.2f} s | {r['cpu_s']:.2f} s ({r['cpu_us_per_topic']:.0f} us;"
            f" {r['system_s']:.2f} s) |"
            f" {r['full_gcs']} ({r['longest_gc_ms']:.0f} ms) | {r['gc_s']:.3f} s |"
        )
        if r["closed"]:
            print(f"note: {r['closed']} streams were closed before all their first answers")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main(sys.argv[1:])
