"""A test peer playing the broker that serves one big schema, the cluster naming it, and a
client connection that never reads: the set-up of the tests where strangers ask for big
forwarded answers and leave them unread (test_unread_answers, test_unread_big_answers,
test_held_bytes_pools)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp

from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import Schema
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.metadata_store.synthetic import cluster
from tests.broker_peer import BrokerPeer


@asynccontextmanager
async def schema_broker(topic: str, size: int) -> AsyncIterator[tuple[BrokerPeer, dict[str, Any]]]:
    """A broker (test peer) whose schema for `topic` is `size` bytes of STRING data, and the
    nodes of a one-broker cluster whose internal listener is that peer."""
    name = TopicName.parse(topic)
    async with BrokerPeer(name="broker") as peer:
        peer.schemas[topic] = codec.schema(
            f"{name.tenant}/{name.namespace}/{name.local_name}", Schema.STRING, b"x" * size, {}
        )
        nodes = cluster(brokers=1, owned={})
        nodes["/loadbalance/brokers/b1:8080"]["advertisedListeners"]["internal"][
            "brokerServiceUrl"
        ] = peer.url
        yield peer, nodes


async def non_reader(port: int) -> socket.socket:
    """A connection to 127.0.0.1:`port` with a small receive buffer, never to be read."""
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.setblocking(False)
    await asyncio.get_running_loop().sock_connect(raw, ("127.0.0.1", port))
    return raw


def schema_path(topic: str) -> str:
    """The admin path of `topic`'s schema (forwarded to its broker)."""
    name = TopicName.parse(topic)
    return f"/admin/v2/schemas/{name.tenant}/{name.namespace}/{name.local_name}/schema"


async def http_strangers(port: int, topic: str, count: int) -> list[socket.socket]:
    """`count` connections that each ask for `topic`'s schema once (~70 bytes) and never read."""
    request = f"GET {schema_path(topic)} HTTP/1.1\r\nHost: gateway\r\n\r\n".encode()
    loop = asyncio.get_running_loop()
    strangers = []
    for _ in range(count):
        raw = await non_reader(port)
        await loop.sock_sendall(raw, request)
        strangers.append(raw)
    return strangers


async def http_schema(session: aiohttp.ClientSession, port: int, topic: str, timeout: float) -> int:
    """The length of `topic`'s schema data as an honest client reads it."""
    url = f"http://127.0.0.1:{port}{schema_path(topic)}"
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout)) as response:
        assert response.status == 200, await response.text()
        answer = await response.json()
    assert answer["type"] == "STRING"
    return len(answer["data"])


async def settled(peer: BrokerPeer, topic: str) -> None:
    """Wait until the strangers were heard: a first one asked of the broker, then two seconds
    for the rest to be refused or forwarded and the answers held or dropped. (Before the
    budget, every stranger was asked of the broker; now most are refused at once.)"""
    assert await peer.wait_for(lambda p: p.topics_seen("GET_SCHEMA").count(topic) >= 2, 60)
    await asyncio.sleep(2.0)
