"""ZooKeeper writes reach the binary answers while pipelined binary lookups keep coming: every
connection sees each new owner, in the order written, never an older one after a newer one,
and the answers of the bundles nobody moved never change (bench.freshness measures how soon).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from kazoo.client import KazooClient

from pulsar_lookup_gateway.listeners.binary import BinaryServer, BinarySettings
from pulsar_lookup_gateway.listeners.endpoints.addresses import Endpoint, Scheme
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import CommandLookupTopicResponse
from pulsar_lookup_gateway.metadata_store.admin import encode, seed
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper
from pulsar_lookup_gateway.metadata_store.synthetic import (
    cluster,
    listeners_of,
    ownership_node,
    topic_in_range,
)
from pulsar_lookup_gateway.metadata_store.url import parse_metadata_url
from pulsar_lookup_gateway.metadata_store.zookeeper import ZooKeeperSource
from pulsar_lookup_gateway.serving.service import LookupService
from tests.broker_peer import RawClient
from tests.waiting import eventually

pytestmark = pytest.mark.zookeeper

MOVED, KEPT = "0x00000000_0x40000000", "0xc0000000_0xffffffff"
IN_MOVED = topic_in_range(0, 0x40000000)
IN_KEPT = topic_in_range(0xC0000000, 0xFFFFFFFF)
OWNERSHIP = f"/namespace/public/default/{MOVED}"
OWNERS = [1, 2, 3, 1]  # the moved bundle's owner at start, then after each write
CONNECTIONS = 4
IN_FLIGHT = 16  # lookups each connection keeps pipelined


def url_of(broker: int) -> str:
    return str(listeners_of(broker)["external"]["brokerServiceUrl"])


@dataclass
class Seen:
    """What one load connection was answered, in order."""

    moved: list[str] = field(default_factory=list)  # the moved bundle's owner, each answer
    kept: set[str] = field(default_factory=set)  # the other bundle's owners named
    failed: int = 0


@pytest.fixture
async def gateway_port(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk_admin: KazooClient
) -> AsyncIterator[int]:
    seed(zk_admin, cluster(owned={MOVED: OWNERS[0], KEPT: 2}))
    url = parse_metadata_url(f"zk:{zookeeper.connect_string}{zk_chroot}")
    source = ZooKeeperSource(url, start_timeout=15.0)
    await source.start()
    server = BinaryServer(
        SocketSpec(Endpoint(Scheme.PULSAR, "127.0.0.1", 0), "external", "test"),
        LookupService(source),
        BinarySettings(keep_alive_interval=0),
    )
    await server.start()
    try:
        yield server.port
    finally:
        await server.stop(timeout=5)
        await source.close()


async def load(port: int, stop: asyncio.Event, seen: Seen) -> None:
    """`IN_FLIGHT` lookups at a time, half of each topic, until `stop`. Answers are told
    apart by their request ids (one that waits for a read is answered after later ones) and
    kept in the order they come, which is the order of the views they were read from."""
    async with await RawClient.open("127.0.0.1", port) as client:
        client.send(codec.connect("test-load", 21))
        await client.expect()
        request_id = 0
        while not stop.is_set():
            # (odd request ids ask for the moved bundle's topic)
            client.send(
                b"".join(
                    codec.lookup(IN_MOVED if i % 2 else IN_KEPT, i)
                    for i in range(request_id, request_id + IN_FLIGHT)
                )
            )
            request_id += IN_FLIGHT
            for _ in range(IN_FLIGHT):
                body = (await client.expect()).lookupTopicResponse
                if body.response != CommandLookupTopicResponse.Connect:
                    seen.failed += 1
                elif body.request_id % 2:
                    seen.moved.append(body.brokerServiceUrl)
                else:
                    seen.kept.add(body.brokerServiceUrl)


def runs(answers: list[str]) -> list[str]:
    """The answers with repeats in a row collapsed: the owners in the order they were named."""
    return [a for i, a in enumerate(answers) if i == 0 or answers[i - 1] != a]


async def test_each_write_reaches_every_loaded_connection_in_order(
    gateway_port: int, zk_admin: KazooClient
) -> None:
    stop = asyncio.Event()
    seens = [Seen() for _ in range(CONNECTIONS)]
    loads = [asyncio.create_task(load(gateway_port, stop, seen)) for seen in seens]
    try:

        async def answered_after(counts: list[int], more: int) -> bool:
            return all(len(s.moved) >= c + more for s, c in zip(seens, counts, strict=True))

        await eventually(functools.partial(answered_after, [0] * CONNECTIONS, 200))  # warm
        for owner in OWNERS[1:]:
            await asyncio.to_thread(zk_admin.set, OWNERSHIP, encode(ownership_node(owner)))

            async def everyone_sees(owner: int = owner) -> bool:
                return all(s.moved and s.moved[-1] == url_of(owner) for s in seens)

            await eventually(everyone_sees)
            # The load goes on after the change, and keeps the new answer.
            counts = [len(s.moved) for s in seens]
            await eventually(functools.partial(answered_after, counts, 200))
            assert all(s.moved[-1] == url_of(owner) for s in seens)
    finally:
        stop.set()
        await asyncio.gather(*loads)

    for seen in seens:
        assert seen.failed == 0
        # Each connection went through every owner in the order written, never back.
        assert runs(seen.moved) == [url_of(owner) for owner in OWNERS]
        assert seen.kept == {url_of(2)}
