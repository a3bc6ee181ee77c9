"""A redirect storm: clients asking for topics of many distinct bundles nobody owns (every bundle
for a moment after a broker restart), which the gateway asks the brokers about (issue 40),
and, as the A/B baseline, lookups of owned bundles (answered from the metadata).

    .venv/bin/python -m bench.forwarded_storm [--mode storm|owned|both] [--bundles 2000]
        [--topics-per-bundle 8] [--connections 32] [--depth 16] [--brokers 4]
        [--broker-delay-ms 2] [--owned-lookups 200000]

Three processes: **brokers** (a child: `--brokers` asyncio servers with one bind address each,
playing the modular load manager: the leader redirects a non-authoritative LOOKUP to the broker
the bundle hashes to, authoritatively; that broker answers Connect with its URL for the named
listener after `--broker-delay-ms`, the time a broker takes to assign a bundle), the **gateway**
(a child: the real `Gateway` from a config, a `file:` snapshot of the brokers and one
namespace of `--bundles` bundles, none owned in `storm`, all owned in `owned`), and the
**load** (this process): `--connections` connections x `--depth` LOOKUPs in flight, each for a
distinct topic, `--topics-per-bundle` topics of every bundle, shuffled.

Each run reports the gateway child's own CPU per lookup (`time.process_time`, read over the pipe
before and after), which other work on a shared machine disturbs far less than the lookups a
second. `storm` reports the lookups answered a second, their latency, what they were answered
with (Connect, Redirect, failed) and how many LOOKUPs reached the brokers (one per bundle with
the coalescing: two hops each, leader and owner). `owned` reports lookups a second of a cold
sweep then warm repeats: the A/B ratio (same module, run from a worktree of the code before with
PYTHONPATH) shows whether owned-bundle lookups kept their speed.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import multiprocessing
import random
import tempfile
import time
import zlib
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import BaseCommand, FrameDecoder
from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import CommandLookupTopicResponse
from pulsar_lookup_gateway.lookup.bundles import topic_hash

NAMESPACE = "public/default"
WAIT = 30.0


# -- the brokers (a child process) -------------------------------------------------------------


class _Broker(asyncio.Protocol):
    def __init__(self, number: int, urls: list[str], delay: float, seen: list[int]) -> None:
        self.number, self.urls, self.delay, self.seen = number, urls, delay, seen
        self.decoder = FrameDecoder()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.decoder.feed(data)
        while (command := self.decoder.next_command()) is not None:
            if not isinstance(command, BaseCommand):
                continue
            if command.type == BaseCommand.CONNECT:
                self.transport.write(codec.connected("bench-broker", 21, 5 * 1024 * 1024))
            elif command.type == BaseCommand.PING:
                self.transport.write(codec.pong())
            elif command.type == BaseCommand.LOOKUP:
                self.seen[0] += 1
                self._lookup(command.lookupTopic)

    def _lookup(self, lookup: Any) -> None:
        assert self.transport is not None
        owner = zlib.crc32(lookup.topic.encode()) % len(self.urls)
        # (the same URL whatever the listener: the load generator never dials it)
        url = self.urls[owner]
        if owner != self.number and not lookup.authoritative:
            reply = codec.lookup_response(
                lookup.request_id,
                response=CommandLookupTopicResponse.Redirect,
                broker_url=url,
                authoritative=True,
            )
            self.transport.write(reply)
            return
        reply = codec.lookup_response(
            lookup.request_id,
            response=CommandLookupTopicResponse.Connect,
            broker_url=self.urls[self.number],
            authoritative=True,
        )
        transport = self.transport
        asyncio.get_running_loop().call_later(self.delay, transport.write, reply)


def _brokers(count: int, delay: float, pipe: Connection) -> None:
    async def serve() -> None:
        loop = asyncio.get_running_loop()
        seen = [0]
        urls: list[str] = []
        servers = []
        for number in range(count):
            server = await loop.create_server(
                functools.partial(_Broker, number, urls, delay, seen), "127.0.0.1", 0
            )
            servers.append(server)
            urls.append(f"pulsar://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        pipe.send(urls)
        while not pipe.poll():
            await asyncio.sleep(0.05)
        pipe.recv()
        pipe.send(seen[0])

    asyncio.run(serve())


# -- the gateway (a child process) ------------------------------------------------------------


def _gateway(snapshot: str, pipe: Connection, profile: str | None = None) -> None:
    from pulsar_lookup_gateway.gateway.process import Gateway
    from pulsar_lookup_gateway.listeners.config.conf_file import parse_properties
    from pulsar_lookup_gateway.listeners.config.model import validate_raw

    text = (
        f"metadataStoreUrl=file:{snapshot}\n"
        "advertisedListeners=internal:pulsar://127.0.0.1:16650,external:pulsar://127.0.0.2:16650\n"
        "internalListenerName=internal\n"
        "bindAddresses=external:pulsar://127.0.0.1:0\nbrokerServicePort=\nwebServicePort=\n"
    )

    async def serve() -> None:
        gateway = Gateway(validate_raw(parse_properties(text, "bench.conf")).config)
        await gateway.start()
        pipe.send(gateway.port_of("external", "pulsar"))
        while True:  # "cpu": the CPU seconds this process used so far; "stop"
            while not pipe.poll():
                await asyncio.sleep(0.05)
            if pipe.recv() != "cpu":
                break
            pipe.send(time.process_time())
        await gateway.stop()

    if profile is None:
        asyncio.run(serve())
        return
    import cProfile

    profiler = cProfile.Profile()
    profiler.runcall(asyncio.run, serve())
    profiler.dump_stats(profile)


def snapshot_nodes(urls: list[str], bundles: int, owned: bool) -> dict[str, Any]:
    nodes: dict[str, Any] = {}
    for number, url in enumerate(urls):
        nodes[f"/loadbalance/brokers/b{number}:8080"] = {
            "webServiceUrl": f"http://127.0.0.1:{8080 + number}",
            "pulsarServiceUrl": url,
            "advertisedListeners": {
                "internal": {"brokerServiceUrl": url},
                "external": {"brokerServiceUrl": url.replace("127.0.0.1", "127.0.0.2")},
            },
            "loadManagerClassName": "org.apache.pulsar.broker.loadbalance.impl."
            "ModularLoadManagerImpl",
        }
    nodes["/loadbalance/leader"] = {"brokerId": "b0:8080", "serviceUrl": "http://127.0.0.1:8080"}
    step = 2**32 // bundles
    bounds = [f"0x{i * step:08x}" for i in range(bundles)] + ["0xffffffff"]
    nodes[f"/admin/policies/{NAMESPACE}"] = {
        "bundles": {"boundaries": bounds, "numBundles": bundles}
    }
    if owned:
        for i in range(bundles):
            url = urls[i % len(urls)]
            nodes[f"/namespace/{NAMESPACE}/{bounds[i]}_{bounds[i + 1]}"] = {
                "nativeUrl": url,
                "advertisedListeners": {
                    "internal": {"brokerServiceUrl": url},
                    "external": {"brokerServiceUrl": url.replace("127.0.0.1", "127.0.0.2")},
                },
            }
    return nodes


def topics_of(bundles: int, per_bundle: int, seed: int = 40) -> list[str]:
    """`per_bundle` distinct topics in every bundle, shuffled."""
    step = 2**32 // bundles
    found: dict[int, list[str]] = {}
    n = 0
    while len(found) < bundles or min(len(v) for v in found.values()) < per_bundle:
        topic = f"persistent://{NAMESPACE}/t{n}"
        n += 1
        index = min(topic_hash(topic) // step, bundles - 1)
        kept = found.setdefault(index, [])
        if len(kept) < per_bundle:
            kept.append(topic)
    topics = [t for kept in found.values() for t in kept]
    random.Random(seed).shuffle(topics)
    return topics


# -- the load (this process) ------------------------------------------------------------------


async def _load(
    port: int, topics: list[str], connections: int, depth: int
) -> tuple[float, list[float], dict[str, int]]:
    """Every topic asked once; (seconds, latencies in ms, answers by kind)."""
    queue = list(reversed(topics))
    latencies: list[float] = []
    kinds = {"connect": 0, "redirect": 0, "failed": 0}

    async def one() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(codec.connect("bench-load", 21))
        decoder = FrameDecoder()
        sent: dict[int, float] = {}
        next_id = 1

        def send() -> None:
            nonlocal next_id
            while queue and len(sent) < depth:
                sent[next_id] = time.perf_counter()
                writer.write(codec.lookup(queue.pop(), next_id))
                next_id += 1

        connected = False
        while True:
            data = await asyncio.wait_for(reader.read(65536), WAIT)
            if not data:
                raise ConnectionError("the gateway closed the connection")
            decoder.feed(data)
            while (command := decoder.next_command()) is not None:
                if not isinstance(command, BaseCommand):
                    continue
                if command.type == BaseCommand.CONNECTED:
                    connected = True
                elif command.type == BaseCommand.LOOKUP_RESPONSE:
                    body = command.lookupTopicResponse
                    latencies.append((time.perf_counter() - sent.pop(body.request_id)) * 1000)
                    if body.response == body.Connect:
                        kinds["connect"] += 1
                    elif body.response == body.Redirect:
                        kinds["redirect"] += 1
                    else:
                        kinds["failed"] += 1
            if connected:
                send()
            if connected and not sent and not queue:
                writer.close()
                return

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(connections)))
    return time.perf_counter() - started, latencies, kinds


def _pct(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


def run(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    brokers_end, brokers_child = context.Pipe()
    brokers = context.Process(
        target=_brokers, args=(args.brokers, args.broker_delay_ms / 1000, brokers_child)
    )
    brokers.start()
    try:
        urls = brokers_end.recv()
        owned = mode == "owned"
        with tempfile.TemporaryDirectory() as tmp:
            snapshot = Path(tmp) / "cluster.json"
            snapshot.write_text(json.dumps(snapshot_nodes(urls, args.bundles, owned)))
            gateway_end, gateway_child = context.Pipe()
            gateway = context.Process(
                target=_gateway, args=(str(snapshot), gateway_child, args.profile)
            )
            gateway.start()
            try:
                port = gateway_end.recv()
                topics = topics_of(args.bundles, args.topics_per_bundle)
                if owned:
                    result = _owned(port, topics, args, gateway_end)
                else:
                    cpu = _cpu(gateway_end)
                    seconds, latencies, kinds = asyncio.run(
                        _load(port, topics, args.connections, args.depth)
                    )
                    result = {
                        "gateway_cpu_us_per_lookup": (_cpu(gateway_end) - cpu) / len(topics) * 1e6,
                        "lookups": len(topics),
                        "lookups_per_s": len(topics) / seconds,
                        "p50_ms": _pct(latencies, 0.5),
                        "p99_ms": _pct(latencies, 0.99),
                        **kinds,
                    }
            finally:
                gateway_end.send("stop")
                gateway.join(WAIT)
        brokers_end.send("stop")
        result["broker_lookups"] = brokers_end.recv()
    finally:
        brokers.join(WAIT)
    result.update(mode=mode, bundles=args.bundles)
    return result


def _cpu(pipe: Connection) -> float:
    pipe.send("cpu")
    return float(pipe.recv())


def _owned(
    port: int, topics: list[str], args: argparse.Namespace, gateway: Connection
) -> dict[str, Any]:
    cpu = _cpu(gateway)
    cold_s, _, kinds = asyncio.run(_load(port, topics, args.connections, args.depth))
    cold_cpu = _cpu(gateway)
    asked = (topics * (args.owned_lookups // len(topics) + 1))[: args.owned_lookups]
    warm_s, latencies, warm = asyncio.run(_load(port, asked, args.connections, args.depth))
    warm_cpu = _cpu(gateway)
    return {
        "cold_cpu_us_per_lookup": (cold_cpu - cpu) / len(topics) * 1e6,
        "gateway_cpu_us_per_lookup": (warm_cpu - cold_cpu) / len(asked) * 1e6,
        "lookups": len(asked),
        "cold_per_s": len(topics) / cold_s,
        "lookups_per_s": len(asked) / warm_s,
        "p50_ms": _pct(latencies, 0.5),
        "p99_ms": _pct(latencies, 0.99),
        **{k: kinds[k] + warm[k] for k in kinds},
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.forwarded_storm", description=__doc__)
    parser.add_argument("--mode", choices=("storm", "owned", "both"), default="both")
    parser.add_argument("--bundles", type=int, default=2000)
    parser.add_argument("--topics-per-bundle", type=int, default=8)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--depth", type=int, default=16)
    parser.add_argument("--brokers", type=int, default=4)
    parser.add_argument("--broker-delay-ms", type=float, default=2.0)
    parser.add_argument("--owned-lookups", type=int, default=200_000)
    parser.add_argument("--profile", help="cProfile the gateway child into this file")
    args = parser.parse_args(argv)
    modes = ("storm", "owned") if args.mode == "both" else (args.mode,)
    for mode in modes:
        print(json.dumps(run(mode, args)), flush=True)
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
