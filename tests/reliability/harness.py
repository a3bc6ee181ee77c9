"""Load and fault harness for the reliability tests: a gateway on a private ZooKeeper, and
bounded binary and HTTP load loops that count what they get back.

`make test` runs the short version; `make soak` sets PULSAR_GATEWAY_SOAK=1 for longer runs
and larger counts. Every loop stops on an event and on a count, whichever comes first.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from pulsar_lookup_gateway.gateway.process import Gateway
from pulsar_lookup_gateway.listeners.config.conf_file import parse_properties
from pulsar_lookup_gateway.listeners.config.model import validate_raw
from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import (
    CommandLookupTopicResponse,
    ServerError,
)
from pulsar_lookup_gateway.metadata_store.admin import connected, seed
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper
from tests.broker_peer import RawClient

SOAK = os.environ.get("PULSAR_GATEWAY_SOAK") == "1"


def scale(short: float, soak: float) -> float:
    return soak if SOAK else short


@dataclass
class Tally:
    """What a load loop got back: answers, failures by error name, latencies in seconds."""

    answers: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)

    def p99_ms(self) -> float:
        if not self.latencies:
            return 0.0
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000

    def merge(self, other: Tally) -> None:
        self.answers += other.answers
        self.failures.update(other.failures)
        self.latencies.extend(other.latencies)


def gateway_config(metadata: str, extra: str = "") -> Any:
    text = (
        f"metadataStoreUrl={metadata}\n"
        "advertisedListeners=internal:pulsar://127.0.0.1:6650,internal:http://127.0.0.1:8080\n"
        "bindAddresses=internal:pulsar://127.0.0.1:0,internal:http://127.0.0.1:0\n"
        "brokerServicePort=\nwebServicePort=\n" + extra
    )
    return validate_raw(parse_properties(text, "reliability.conf")).config


@contextlib.asynccontextmanager
async def gateway_on(
    zookeeper: EmbeddedZooKeeper, nodes: dict[str, Any], extra: str = ""
) -> AsyncIterator[Gateway]:
    with connected(zookeeper.connect_string) as admin:
        seed(admin, nodes)
    gateway = Gateway(gateway_config(f"zk:{zookeeper.connect_string}", extra))
    await gateway.start()
    try:
        yield gateway
    finally:
        await gateway.stop()


def binary_port(gateway: Gateway) -> int:
    return gateway.port_of("internal", "pulsar")


def http_url(gateway: Gateway, path: str) -> str:
    return f"http://127.0.0.1:{gateway.port_of('internal', 'http')}{path}"


async def binary_load(
    port: int, topics: list[str], stop: asyncio.Event, *, limit: int = 1_000_000
) -> Tally:
    """One connection looking topics up one after another until `stop` or `limit`."""
    tally = Tally()
    async with await RawClient.open("127.0.0.1", port) as client:
        await client.handshake()
        for request_id in range(1, limit + 1):
            if stop.is_set():
                break
            started = time.perf_counter()
            reply = await client.lookup(topics[request_id % len(topics)], request_id)
            tally.latencies.append(time.perf_counter() - started)
            record_lookup(tally, reply.lookupTopicResponse)
    return tally


def record_lookup(tally: Tally, body: Any) -> None:
    if body.response == CommandLookupTopicResponse.Failed:
        tally.failures[ServerError.Name(body.error)] += 1
    else:
        tally.answers += 1


async def http_load(
    session: aiohttp.ClientSession,
    urls: list[str],
    stop: asyncio.Event,
    *,
    limit: int = 1_000_000,
) -> Tally:
    tally = Tally()
    for n in range(limit):
        if stop.is_set():
            break
        started = time.perf_counter()
        async with session.get(urls[n % len(urls)], allow_redirects=False) as response:
            await response.read()
            tally.latencies.append(time.perf_counter() - started)
            if response.status in (200, 307):
                tally.answers += 1
            else:
                tally.failures[f"HTTP {response.status}"] += 1
    return tally


async def run_for(seconds: float, stop: asyncio.Event) -> None:
    await asyncio.sleep(seconds)
    stop.set()


def lookup_urls(gateway: Gateway, topics: Iterable[str]) -> list[str]:
    return [http_url(gateway, "/lookup/v2/topic/" + t.replace("://", "/", 1)) for t in topics]
