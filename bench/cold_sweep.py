"""A replica that just said it is ready, asked about every bundle of a large cluster: its first
sweep against its warm rate, measured in the same run, on a real ZooKeeper.

    .venv/bin/python -m bench.cold_sweep [--brokers 200] [--namespaces 100] [--bundles 1000]
                                         [--connections 64] [--depth 16] [--rounds 1]
                                         [--before /work/base-42]

A ZooKeeper (embedded, loopback) is seeded once with `--brokers` registrations and
`--namespaces` x `--bundles` owned bundles. Each round starts a gateway (ZooKeeperSource,
LookupService, BinaryServer: the product's parts) in a child process, times its start until the
source says it is ready (what `/ready` reports), then sweeps one fresh topic per bundle three
times over pipelined connections: **cold** (the first sweep after ready), **second** (new topics
in the same bundles), **warm** (new topics again). Every answer is checked against the bundle's
owner. `--before DIR` alternates rounds of the tree at DIR (PYTHONPATH) with this tree's, on the
same ZooKeeper; the figure is cold / warm of each round.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import subprocess
import sys
import time
from typing import Any, cast

from bench.common import percentile, take_commands
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import BaseCommand, LookupType
from pulsar_lookup_gateway.lookup.bundles import NamespaceBundles, topic_hash
from pulsar_lookup_gateway.metadata_store.admin import connected, seed
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper
from pulsar_lookup_gateway.metadata_store.synthetic import broker_node, ownership_node

HOST = "127.0.0.1"

# The gateway child: only parts the commit before this bench had too (it runs under --before).
SERVER = r"""
import asyncio, cProfile, json, logging, resource, sys, time
from pulsar_lookup_gateway.listeners.binary import BinaryServer, BinarySettings
from pulsar_lookup_gateway.listeners.endpoints.addresses import Endpoint, Scheme
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.metadata_store.url import parse_metadata_url
from pulsar_lookup_gateway.metadata_store.zookeeper import ZooKeeperSource
from pulsar_lookup_gateway.serving.service import LookupService

def cpu():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime

def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024

async def main():
    logging.basicConfig(level=logging.WARNING)
    source = ZooKeeperSource(parse_metadata_url("zk:" + sys.argv[1]), start_timeout=600)
    started, cpu0 = time.perf_counter(), cpu()
    await source.start()
    ready_s, ready_cpu = time.perf_counter() - started, cpu() - cpu0
    assert source.status().ready, source.status()
    spec = SocketSpec(Endpoint(Scheme.PULSAR, "127.0.0.1", 0), "external", "bench")
    server = BinaryServer(spec, LookupService(source, internal_listener="internal"),
                          BinarySettings(keep_alive_interval=0, handshake_timeout=60))
    started = time.perf_counter()
    await server.start()  # (this tree's binary socket makes bundle answers ahead first)
    print(json.dumps({"port": server.port, "ready_s": ready_s, "ready_cpu_s": ready_cpu,
                      "listening_s": time.perf_counter() - started, "rss_mib": rss()}),
          flush=True)
    loop = asyncio.get_running_loop()
    profile, asked = (cProfile.Profile() if len(sys.argv) > 2 else None), 0
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line or line.strip() == "stop":
            break
        asked += 1
        if profile is not None and asked == 1:
            profile.enable()  # (the cold sweep)
        elif profile is not None and asked == 2:
            profile.disable()
            profile.dump_stats(sys.argv[2])
        print(json.dumps({"cpu_s": cpu(), "rss_mib": rss()}), flush=True)
    await server.stop(timeout=5)
    await source.close()

asyncio.run(main())
"""


def cluster(brokers: int, namespaces: int, bundles: int) -> tuple[dict[str, Any], list[list[int]]]:
    """The znodes, and per namespace the owner (broker number) of each bundle."""
    nodes: dict[str, Any] = {}
    for i in range(1, brokers + 1):
        nodes[f"/loadbalance/brokers/b{i}:8080"] = broker_node(i, usage=i / brokers)
    nodes["/loadbalance/leader"] = {"brokerId": "b1:8080"}
    equal = NamespaceBundles.equal(bundles)
    boundaries = [f"0x{b:08x}" for b in equal.boundaries]
    owners = []
    for n in range(namespaces):
        nodes[f"/admin/policies/bench/ns{n}"] = {
            "bundles": {"boundaries": boundaries, "numBundles": bundles}
        }
        owned = [(n * 7 + j) % brokers + 1 for j in range(bundles)]
        for j, name in enumerate(equal.names()):
            nodes[f"/namespace/bench/ns{n}/{name}"] = ownership_node(owned[j])
        owners.append(owned)
    return nodes, owners


def sweep_topics(
    namespaces: int, bundles: int, owners: list[list[int]], sweep: int
) -> tuple[list[str], list[str]]:
    """One fresh topic per bundle (`sweep` makes the names differ from other sweeps'), and the
    broker URL each must be answered with; namespaces interleaved."""
    equal = NamespaceBundles.equal(bundles)
    lowers = [r.lower for r in equal.ranges]
    from bisect import bisect_right

    per_ns: list[list[tuple[str, str]]] = []
    for n in range(namespaces):
        found: dict[int, str] = {}
        t = 0
        while len(found) < bundles:
            name = f"persistent://bench/ns{n}/s{sweep}-t{t}"
            t += 1
            j = bisect_right(lowers, topic_hash(name)) - 1
            if j not in found:
                found[j] = name
        per_ns.append(
            [(found[j], f"pulsar://b{owners[n][j]}.example.com:6650") for j in range(bundles)]
        )
    topics, urls = [], []
    for j in range(bundles):
        for n in range(namespaces):
            topics.append(per_ns[n][j][0])
            urls.append(per_ns[n][j][1])
    return topics, urls


class _Sweep(asyncio.Protocol):
    """Sends its share of the requests, `depth` in flight; answers come back in order."""

    def __init__(self, requests: list[bytes], expected: list[str], depth: int) -> None:
        self.requests, self.expected, self.depth = requests, expected, depth
        self.sent = 0
        self.answered = 0
        self.wrong = 0
        self.latencies: list[float] = []
        self._times: list[float] = []
        self._buf = bytearray()
        self._handshaken = False
        self._transport: asyncio.Transport | None = None
        loop = asyncio.get_running_loop()
        self.connected: asyncio.Future[None] = loop.create_future()
        self.done: asyncio.Future[None] = loop.create_future()
        self.go = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._transport.write(codec.connect("bench", 21))

    def connection_lost(self, exc: Exception | None) -> None:
        for future in (self.connected, self.done):
            if not future.done():
                future.set_exception(ConnectionError("connection lost"))

    def start(self) -> None:
        if not self.requests:
            if not self.done.done():
                self.done.set_result(None)
            return
        self._send(self.depth)

    def _send(self, count: int) -> None:
        assert self._transport is not None
        end = min(self.sent + count, len(self.requests))
        now = time.perf_counter()
        self._times.extend([now] * (end - self.sent))
        self._transport.write(b"".join(self.requests[self.sent : end]))
        self.sent = end

    def data_received(self, data: bytes) -> None:
        self._buf += data
        bodies = take_commands(self._buf)
        if bodies and not self._handshaken:
            self._handshaken = True
            bodies.pop(0)
            self.connected.set_result(None)
        now = time.perf_counter()
        for body in bodies:
            # (answers may come out of order: a cold lookup waits on its read, later ones not)
            command = BaseCommand.FromString(body)
            answer = command.lookupTopicResponse
            index = answer.request_id - 1
            ok = (
                command.type == BaseCommand.LOOKUP_RESPONSE
                and answer.response == LookupType.Connect
                and answer.brokerServiceUrl == self.expected[index]
            )
            if not ok:
                self.wrong += 1
                if os.environ.get("COLD_SWEEP_DEBUG"):
                    print(command, self.expected[index], file=sys.stderr)
            self.answered += 1
            self.latencies.append(now - self._times[index])
        if bodies and self.sent < len(self.requests):
            self._send(len(bodies))
        if self.sent and self.answered == len(self.requests) and not self.done.done():
            self.done.set_result(None)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


async def sweep(
    port: int, topics: list[str], urls: list[str], args: argparse.Namespace
) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    share = -(-len(topics) // args.connections)
    # request ids: the place in the connection's share (answers may come out of order)
    requests = [codec.lookup(t, i % share + 1) for i, t in enumerate(topics)]
    conns: list[_Sweep] = []
    for c in range(args.connections):
        part = slice(c * share, (c + 1) * share)
        _, conn = await loop.create_connection(
            functools.partial(_Sweep, requests[part], urls[part], args.depth), HOST, port
        )
        conns.append(conn)
    await asyncio.wait_for(asyncio.gather(*(c.connected for c in conns)), 60)
    started = time.perf_counter()
    for conn in conns:
        conn.start()
    await asyncio.wait_for(asyncio.gather(*(c.done for c in conns)), 1800)
    elapsed = time.perf_counter() - started
    for conn in conns:
        conn.close()
    latencies = [x for c in conns for x in c.latencies]
    return {
        "rate": len(requests) / elapsed,
        "seconds": elapsed,
        "p50_ms": percentile(latencies, 0.5) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "wrong": float(sum(c.wrong for c in conns)),
    }


class _Child:
    def __init__(self, connect: str, pythonpath: str, profile: str | None) -> None:
        env = dict(os.environ, PYTHONPATH=pythonpath)
        self.process = subprocess.Popen(
            [sys.executable, "-c", SERVER, connect, *([profile] if profile else [])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
            cwd=pythonpath,
        )

    def read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the gateway child exited")
        return cast(dict[str, Any], json.loads(line))

    def ask(self) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write("cpu\n")
        self.process.stdin.flush()
        return self.read()

    def stop(self) -> None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write("stop\n")
            self.process.stdin.flush()
            self.process.wait(60)
        except Exception:
            self.process.kill()


async def one_round(
    connect: str,
    tree: str,
    label: str,
    sweeps: list[tuple[list[str], list[str]]],
    args: argparse.Namespace,
) -> list[str]:
    loop = asyncio.get_running_loop()
    child = _Child(connect, tree, args.profile)
    try:
        hello = await loop.run_in_executor(None, child.read)
        rows, rates, results = [], [], []
        for name, (topics, urls) in zip(("cold", "second", "warm"), sweeps, strict=True):
            before = await loop.run_in_executor(None, child.ask)
            result = await sweep(hello["port"], topics, urls, args)
            after = await loop.run_in_executor(None, child.ask)
            cpu_us = (after["cpu_s"] - before["cpu_s"]) / len(topics) * 1e6
            rates.append(result["rate"])
            results.append((name, result, cpu_us, after["rss_mib"]))
        for name, result, cpu_us, rss in results:
            rows.append(
                f"| {label} | {name} | {result['rate']:,.0f} | {result['rate'] / rates[2]:.2f}"
                f" | {result['p50_ms']:.1f} | {result['p99_ms']:.1f} | {cpu_us:.1f}"
                f" | {rss:.0f} | {int(result['wrong'])} |"
            )
        ready = (
            f"{hello['ready_s']:.1f} s ({hello['ready_cpu_s']:.1f} s CPU), socket listening "
            f"{hello['listening_s']:.1f} s later"
        )
        rows.append(
            f"| {label} | **cold / warm** | **{rates[0] / rates[2]:.2f}** | ready after {ready}"
            f" | | | | {hello['rss_mib']:.0f} at ready | |"
        )
        return rows
    finally:
        await loop.run_in_executor(None, child.stop)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cold_sweep", description=__doc__)
    parser.add_argument("--brokers", type=int, default=200)
    parser.add_argument("--namespaces", type=int, default=100)
    parser.add_argument("--bundles", type=int, default=1000, help="bundles per namespace")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--depth", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--before", metavar="DIR", help="alternate with the tree at DIR")
    parser.add_argument("--profile", metavar="FILE", help="cProfile the cold sweep's gateway")
    args = parser.parse_args(argv)
    nodes, owners = cluster(args.brokers, args.namespaces, args.bundles)
    sweeps = [sweep_topics(args.namespaces, args.bundles, owners, s) for s in range(3)]
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = [("after", here)]
    if args.before:
        trees.insert(0, ("before", os.path.abspath(args.before)))
    with EmbeddedZooKeeper() as zk:
        started = time.perf_counter()
        with connected(zk.connect_string) as client:
            seed(client, nodes)
        print(f"seeded {len(nodes):,} znodes in {time.perf_counter() - started:.1f} s\n")
        print(
            "| tree | sweep | lookups/s | / warm | p50 ms | p99 ms | gateway CPU us/lookup "
            "| RSS MiB | wrong |\n|---|---|---|---|---|---|---|---|---|",
            flush=True,
        )
        wrong = 0
        for _ in range(args.rounds):
            for label, tree in trees:
                rows = asyncio.run(one_round(zk.connect_string, tree, label, sweeps, args))
                for row in rows:
                    print(row, flush=True)
                    wrong += int(row.split("|")[9].strip() or 0) if row.count("|") > 9 else 0
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
