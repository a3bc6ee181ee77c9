"""The ownership watch under load: ZooKeeper write -> message at the client, with 1,000 streams
x 10 topics on one gateway process, against the baseline of a plain ZooKeeper data watch on the
same node, measured in the same run.

    .venv/bin/python -m bench.watch [--streams 1000] [--topics 10] [--moves 50]

A real ZooKeeper (embedded) holds a cluster of 20 brokers and one namespace of 64 owned
bundles; the gateway runs alone in a child process (one event loop, as `run`) and serves
`/lookup/v2/watch`; this process opens the streams (each subscribes 10 topics of its own:
10,000 topics, about 156 per bundle) and, once every stream has its first answers, moves one
bundle at a time to another broker (`set` on its ownership node, as a broker that takes over
rewrites it), 50 times, 0.25 s apart. Latency is from just before the write is sent to the
message naming the new owner arriving at each stream watching a topic of that bundle. The
baseline is a kazoo data watch on the same ownership node in this process: from the same
instant to its notification. The gateway's CPU is its user+system time over the moves and over
the whole run; RSS is its resident set after the subscribes and its peak.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing
import os
import random
import resource
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import aiohttp
from kazoo.client import KazooClient

from bench.common import cluster_nodes, percentile
from pulsar_lookup_gateway.lookup.bundles import NamespaceBundles, topic_hash
from pulsar_lookup_gateway.metadata_store.admin import connected, encode, seed
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper
from pulsar_lookup_gateway.metadata_store.synthetic import ownership_node

BROKERS = 20
BUNDLES = 64
NAMESPACE = "bench/ns0"  # (the one namespace of bench.common.cluster_nodes)
PAUSE = 0.25  # seconds between moves
SETTLE = 2.0  # seconds between the last first answer and the first move
SLOW = 0.1  # seconds: a baseline watch this late is ZooKeeper's (or the machine's) delay
STRAGGLERS = 1.0  # seconds after the last move before messages are counted
CONNECT_BATCH = 100  # streams opened at once


def cluster() -> tuple[dict[str, Any], NamespaceBundles]:
    """One namespace of BUNDLES equal bundles, every bundle owned, over BROKERS brokers."""
    nodes = cluster_nodes(namespaces=1, bundles_per_namespace=BUNDLES, brokers=BROKERS)
    return nodes, NamespaceBundles.equal(BUNDLES)


# -- the gateway, in a child process --------------------------------------------------------------


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class _Collections:
    """The gateway's full garbage collections: how many, and the longest (a pause of its
    event loop, which every stream's next message waits out)."""

    def __init__(self) -> None:
        self.started = (0.0, 0.0)
        self.count = 0
        self.longest = (0.0, 0.0)  # (wall, CPU) seconds of the longest
        self.young_started = 0.0
        self.all_seconds = 0.0  # wall seconds in collections of any generation
        gc.callbacks.append(self.callback)

    def callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self.young_started = time.perf_counter()
        else:
            self.all_seconds += time.perf_counter() - self.young_started
        if info["generation"] != 2:
            return
        if phase == "start":
            self.started = (time.perf_counter(), time.thread_time())
        else:
            self.count += 1
            took = (time.perf_counter() - self.started[0], time.thread_time() - self.started[1])
            self.longest = max(self.longest, took)

    def take(self) -> tuple[int, float, float]:
        taken = (self.count, *self.longest)
        self.count, self.longest = 0, (0.0, 0.0)
        return taken

    def take_all(self) -> float:
        """Seconds in collections of any generation since the last call."""
        taken, self.all_seconds = self.all_seconds, 0.0
        return taken


def _serve(config_text: str, conn: Connection) -> None:
    """Child process: a gateway; answers "usage" with (CPU seconds, RSS MiB, peak RSS MiB,
    full collections and the longest since the last usage)."""
    from pulsar_lookup_gateway.gateway.process import Gateway, raise_open_files_limit
    from pulsar_lookup_gateway.listeners.config.conf_file import parse_properties
    from pulsar_lookup_gateway.listeners.config.model import validate_raw

    collections = _Collections()

    async def run() -> None:
        raise_open_files_limit()
        gateway = Gateway(validate_raw(parse_properties(config_text, "bench.conf")).config)
        await gateway.start()
        conn.send(gateway.port_of("external", "http"))
        loop = asyncio.get_running_loop()
        while (message := await loop.run_in_executor(None, conn.recv)) != "stop":
            assert message == "usage"
            times = os.times()
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            conn.send((times.user + times.system, _rss_mib(), peak, *collections.take()))
        await gateway.stop()

    asyncio.run(run())


# -- the clients -----------------------------------------------------------------------------------


class Streams:
    """The streams, and when each message naming an owner arrived."""

    def __init__(self) -> None:
        self.first: dict[tuple[int, str], float] = {}  # (stream, topic) -> first answer
        self.arrivals: dict[tuple[str, str], list[float]] = {}  # (topic, brokerUrl) -> times
        self.errors = 0

    async def run(self, session: aiohttp.ClientSession, url: str, n: int, topics: list[str],
                  opened: asyncio.Semaphore, ready: list[float]) -> None:  # fmt: skip
        async with opened:
            ws = await session.ws_connect(url, max_msg_size=1 << 20)
        started = time.perf_counter()
        await ws.send_str(json.dumps({"type": "subscribe", "topics": topics}))
        async for message in ws:
            now = time.perf_counter()
            body = json.loads(message.data)
            if body.get("type") != "owner":
                self.errors += 1
                continue
            key = (n, body["topic"])
            if key not in self.first:
                self.first[key] = now - started
                if len(self.first) == len(ready):
                    ready[0] = now
            self.arrivals.setdefault((body["topic"], body["brokerUrl"]), []).append(now)


async def lone_subscribe(session: aiohttp.ClientSession, url: str, topics: int) -> float:
    """Seconds from one more stream's subscribe (of new topics) to its last first answer,
    while the others are watching."""
    names = [f"persistent://{NAMESPACE}/lone-t{t}" for t in range(topics)]
    async with session.ws_connect(url) as ws:
        started = time.perf_counter()
        await ws.send_str(json.dumps({"type": "subscribe", "topics": names}))
        for _ in names:
            await asyncio.wait_for(ws.receive(), 10)
        return time.perf_counter() - started


async def baseline_watch(zk: KazooClient, path: str) -> asyncio.Future[float]:
    """The time this process hears ZooKeeper's own notification of the next change of `path`."""
    loop = asyncio.get_running_loop()
    heard: asyncio.Future[float] = loop.create_future()

    def fired(_event: Any) -> None:  # (on a kazoo thread)
        loop.call_soon_threadsafe(hear, time.perf_counter())

    def hear(now: float) -> None:
        if not heard.done():
            heard.set_result(now)

    await asyncio.to_thread(zk.get, path, fired)
    return heard


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    nodes, bundles = cluster()
    rng = random.Random(29)
    with EmbeddedZooKeeper() as zookeeper, tempfile.TemporaryDirectory():
        with connected(zookeeper.connect_string) as root:
            root.ensure_path("/bench")
        with connected(zookeeper.connect_string + "/bench") as admin:
            seed(admin, nodes)
        config = (
            f"metadataStoreUrl=zk:{zookeeper.connect_string}/bench\n"
            "advertisedListeners=external:pulsar://127.0.0.2:6650,external:http://127.0.0.2:8080\n"
            "bindAddresses=external:http://127.0.0.1:0\nbrokerServicePort=\nwebServicePort=\n"
            "watchMaxStreamsPerAddress=0\nmaxHttpServerConnections=0\n"
        )
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        process = context.Process(target=_serve, args=(config, child))
        process.start()
        loop = asyncio.get_running_loop()

        async def usage() -> tuple[float, float, float, int, float, float]:
            parent.send("usage")
            result: tuple[float, float, float, int, float, float]
            result = await loop.run_in_executor(None, parent.recv)
            return result

        try:
            if not await loop.run_in_executor(None, parent.poll, 60):
                raise RuntimeError("the gateway did not start")
            port = parent.recv()
            _cpu_start, rss_start, *_ = await usage()
            streams = Streams()
            all_topics = [
                [f"persistent://{NAMESPACE}/s{n}-t{t}" for t in range(args.topics)]
                for n in range(args.streams)
            ]
            ready = [0.0] * (args.streams * args.topics)
            opened = asyncio.Semaphore(CONNECT_BATCH)
            connector = aiohttp.TCPConnector(limit=0)
            async with aiohttp.ClientSession(connector=connector) as session:
                url = f"http://127.0.0.1:{port}/lookup/v2/watch"
                subscribed = time.perf_counter()
                tasks = [
                    asyncio.create_task(streams.run(session, url, n, topics, opened, ready))
                    for n, topics in enumerate(all_topics)
                ]
                deadline = time.monotonic() + 60
                while len(streams.first) < len(ready):
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"only {len(streams.first)} first answers")
                    await asyncio.sleep(0.05)
                subscribe_seconds = time.perf_counter() - subscribed
                await asyncio.sleep(SETTLE)  # (steady state: the subscribes' garbage collected)
                lone = await lone_subscribe(session, url, args.topics)
                cpu_before, rss_subscribed, *_ = await usage()
                # This process's own collections would delay every stream's next message at
                # once: none in the measured window (as bench.common.measured_window).
                gc.collect()
                gc.disable()
                by_bundle: dict[str, list[str]] = {}
                for topics in all_topics:
                    for topic in topics:
                        by_bundle.setdefault(bundles.find(topic_hash(topic)).name, []).append(topic)
                moves: list[tuple[str, str, float]] = []  # bundle, new owner's URL, written
                baseline: list[float] = []
                with connected(zookeeper.connect_string + "/bench") as zk:
                    for _move in range(args.moves):
                        bundle = rng.choice(sorted(by_bundle))
                        path = f"/namespace/{NAMESPACE}/{bundle}"
                        current = json.loads(zk.get(path)[0])["nativeUrl"]
                        owner = rng.choice(
                            [i for i in range(1, BROKERS + 1) if f"10.0.0.{i}:" not in current]
                        )
                        heard = await baseline_watch(zk, path)
                        written = time.perf_counter()
                        zk.set_async(path, encode(ownership_node(owner)))
                        baseline.append(await asyncio.wait_for(heard, 10) - written)
                        moves.append((bundle, f"pulsar://b{owner}.example.com:6650", written))
                        await asyncio.sleep(PAUSE)
                await asyncio.sleep(STRAGGLERS)
                latencies: list[float] = []
                beyond: list[float] = []  # each message's latency beyond its move's baseline
                missing = 0
                for (bundle, expected, written), zk_took in zip(moves, baseline, strict=True):
                    for topic in by_bundle[bundle]:
                        times = streams.arrivals.get((topic, expected), [])
                        after = [t for t in times if t >= written]
                        if after:
                            latencies.append(after[0] - written)
                            beyond.append(after[0] - written - zk_took)
                        else:
                            missing += 1
                gc.enable()
                cpu_after, rss_after, rss_peak, collected, longest, longest_cpu = await usage()
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            parent.send("stop")
            process.join(30)
            if process.is_alive():
                process.kill()
    firsts = list(streams.first.values())
    moves_window = args.moves * PAUSE + STRAGGLERS
    return {
        "streams": args.streams,
        "topics": args.streams * args.topics,
        "moves": args.moves,
        "messages": len(latencies),
        "missing": missing,
        "errors": streams.errors,
        "p50_ms": percentile(latencies, 0.50) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "max_ms": max(latencies, default=float("nan")) * 1000,
        "zk_p50_ms": percentile(baseline, 0.50) * 1000,
        "zk_p99_ms": percentile(baseline, 0.99) * 1000,
        "zk_slow": sum(took > SLOW for took in baseline),
        "beyond_p99_ms": percentile(beyond, 0.99) * 1000,
        "first_p99_ms": percentile(firsts, 0.99) * 1000,
        "lone_ms": lone * 1000,
        "subscribe_s": subscribe_seconds,
        "cpu_moves_s": cpu_after - cpu_before,
        "cpu_moves_pct": (cpu_after - cpu_before) / moves_window * 100,
        "cpu_total_s": cpu_after,
        "rss_start_mib": rss_start,
        "rss_subscribed_mib": rss_subscribed,
        "rss_after_mib": rss_after,
        "rss_peak_mib": rss_peak,
        "gateway_gc": collected,
        "gateway_gc_ms": longest * 1000,
        "gateway_gc_cpu_ms": longest_cpu * 1000,
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="bench.watch")
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--topics", type=int, default=10, help="per stream")
    parser.add_argument("--moves", type=int, default=50)
    args = parser.parse_args(argv)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    r = asyncio.run(measure(args))
    print(
        f"| streams x topics | moves | messages | write -> message p50 / p99 / max | "
        f"ZooKeeper watch p50 / p99 (baseline) | first answers p99 | gateway CPU (moves) | "
        f"gateway RSS (start / subscribed / peak) |\n|---|---|---|---|---|---|---|---|\n"
        f"| {r['streams']} x {r['topics'] // r['streams']} | {r['moves']} | {r['messages']}"
        f" (missing {r['missing']}) | {r['p50_ms']:.1f} / {r['p99_ms']:.1f} / {r['max_ms']:.1f}"
        f" ms | {r['zk_p50_ms']:.1f} / {r['zk_p99_ms']:.1f} ms | {r['first_p99_ms']:.0f} ms"
        f" (all in {r['subscribe_s']:.1f} s) | {r['cpu_moves_s']:.2f} s"
        f" ({r['cpu_moves_pct']:.0f}% of a core), {r['cpu_total_s']:.1f} s in all |"
        f" {r['rss_start_mib']:.0f} / {r['rss_subscribed_mib']:.0f} /"
        f" {r['rss_peak_mib']:.0f} MiB |"
    )
    print(
        f"subscribe -> answers: one more stream's {args.topics} topics in {r['lone_ms']:.1f} ms "
        f"while the others watch; all {r['streams']} streams subscribing at once: p99 "
        f"{r['first_p99_ms']:.0f} ms"
    )
    print(
        f"beyond the baseline (each message less its move's ZooKeeper watch time): p99 "
        f"{r['beyond_p99_ms']:.1f} ms; moves whose ZooKeeper watch itself took over "
        f"{SLOW * 1000:.0f} ms: {r['zk_slow']}"
    )
    print(
        f"gateway: {r['gateway_gc']} full garbage collections during the moves, the longest "
        f"{r['gateway_gc_ms']:.0f} ms ({r['gateway_gc_cpu_ms']:.0f} ms of CPU); load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    if r["missing"] or r["errors"]:
        print(f"note: {r['missing']} expected messages missing, {r['errors']} other messages")


if __name__ == "__main__":
    main(sys.argv[1:])
