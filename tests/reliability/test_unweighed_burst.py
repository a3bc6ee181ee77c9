"""The first burst of a request never asked before (issue 41, "fair broker links"): strangers
ask at once for a 5 MB schema nobody asked for yet, and never read. Its size is not known, so
the byte budget cannot charge them ahead (brokers.answer_sizes): before, each of them was
asked of the broker, whose megabytes then came down the shared broker connection for clients
that read nothing. Now one of them asks and the others wait for its answer to be weighed, then
are charged (or refused) as for a request asked before; a different request is not held up.

The gateway runs in a child process; the broker is a test peer that holds its answers for the
big schema until the test lets them go, so that the whole burst is in the gateway while the
first answer is outstanding (tests.reliability.schema_broker's set-up, with that one change)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import BaseCommand, Schema
from pulsar_lookup_gateway.serving.held_bytes import UNREAD_SHARE
from tests.broker_peer import BrokerPeer, RawClient
from tests.reliability.child_gateway import ChildGateway, HttpGateway
from tests.reliability.schema_broker import http_schema, non_reader, schema_broker, schema_path

TOPIC = "persistent://public/default/never-asked"
OTHER = "persistent://public/default/small"
SCHEMA_BYTES = 5_000_000
STRANGERS = 60
# Once the first answer is weighed, the waiting strangers are charged its size: the broker is
# asked for the first, at most as many as the budget's unread share holds, and the reading client's
# own request at the end; before, for all 60 and the reading client's.
ASKED_BOUND = 1 + UNREAD_SHARE // SCHEMA_BYTES + 1


@asynccontextmanager
async def late_broker() -> AsyncIterator[tuple[BrokerPeer, dict[str, Any]]]:
    """The 5 MB schema's broker (a test peer) answering it only once the test lets it go, a
    small schema answered at once, and the cluster naming that broker."""
    async with schema_broker(TOPIC, SCHEMA_BYTES) as (peer, nodes):
        peer.held_schemas[TOPIC] = asyncio.Event()
        peer.schemas[OTHER] = codec.schema("public/default/small", Schema.STRING, b"y" * 10, {})
        yield peer, nodes


def asked(peer: BrokerPeer) -> int:
    """The broker's GET_SCHEMAs of the big schema so far."""
    return peer.topics_seen("GET_SCHEMA").count(TOPIC)


async def stranger(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection with a small receive buffer, to be read no further than its handshake."""
    return await asyncio.open_connection(sock=await non_reader(port))


async def http_burst(port: int) -> list[asyncio.StreamWriter]:
    """`STRANGERS` connections that each ask for the big schema once and never read."""
    request = f"GET {schema_path(TOPIC)} HTTP/1.1\r\nHost: gateway\r\n\r\n".encode()
    strangers = []
    for _ in range(STRANGERS):
        _, writer = await stranger(port)
        writer.write(request)
        strangers.append(writer)
    return strangers


async def binary_burst(port: int) -> list[asyncio.StreamWriter]:
    """`STRANGERS` binary connections, CONNECTED, each asking for the big schema once and
    never reading after the handshake."""
    strangers = []
    for _ in range(STRANGERS):
        client = RawClient(*await stranger(port))
        await client.handshake()
        client.send(codec.get_schema(TOPIC, 1))
        strangers.append(client.writer)
    return strangers


async def http_schema_of(port: int, topic: str) -> int:
    """The length of `topic`'s schema data as a client that reads gets it over HTTP."""
    async with aiohttp.ClientSession() as session:
        return await http_schema(session, port, topic, 30)


async def binary_schema(port: int, topic: str) -> int:
    async with await RawClient.open("127.0.0.1", port) as client:
        await client.handshake()
        client.send(codec.get_schema(topic, 1))
        answer = await client.expect(timeout=30)
        assert answer.type == BaseCommand.GET_SCHEMA_RESPONSE, answer
        return len(answer.getSchemaResponse.schema.schema_data)


async def _attack(
    port: int,
    peer: BrokerPeer,
    burst: Callable[[int], Awaitable[list[asyncio.StreamWriter]]],
    read_schema: Callable[[int, str], Awaitable[int]],
    other: str,
    mine: str,
) -> tuple[int, int]:
    """The burst while the first answer is outstanding, then with it let go: (the broker's
    GET_SCHEMAs of the big schema while the first was outstanding, then in all)."""
    strangers = await burst(port)
    assert await peer.wait_for(lambda _: asked(peer) >= 1, 30)
    # A different request is not held up by the strangers waiting on theirs.
    assert await read_schema(port, other) == 10
    await asyncio.sleep(2.0)  # every stranger's request read by the gateway meanwhile
    outstanding = asked(peer)
    peer.held_schemas[TOPIC].set()
    await asyncio.sleep(3.0)  # the first answer weighed, the waiters charged or refused
    # A client that reads still gets the big schema whole (stalled strangers make room).
    assert await read_schema(port, mine) == SCHEMA_BYTES
    for writer in strangers:
        writer.close()
    return outstanding, asked(peer)


def failed(gateway: ChildGateway) -> list[str]:
    """The gateway's log lines about a request that failed with an error of its own."""
    return [line for line in gateway.running.lines if "internal error" in line]


@pytest.mark.timeout(180)
async def test_a_first_http_burst_costs_the_broker_one_answer(tmp_path: Path) -> None:
    async with late_broker() as (peer, nodes):
        with HttpGateway(tmp_path, nodes) as gateway:
            outstanding, in_all = await _attack(
                gateway.port, peer, http_burst, http_schema_of, OTHER, TOPIC
            )
    print(f"\nHTTP: broker asked {outstanding} times before the first answer, {in_all} in all")
    assert outstanding == 1  # was 60: every stranger asked the broker
    assert in_all <= ASKED_BOUND
    assert not failed(gateway)


@pytest.mark.timeout(180)
async def test_a_first_binary_burst_costs_the_broker_one_answer(tmp_path: Path) -> None:
    async with late_broker() as (peer, nodes):
        with ChildGateway(tmp_path, nodes) as gateway:
            outstanding, in_all = await _attack(
                gateway.port, peer, binary_burst, binary_schema, OTHER, TOPIC
            )
    print(f"\nbinary: broker asked {outstanding} times before the first answer, {in_all} in all")
    assert outstanding == 1
    assert in_all <= ASKED_BOUND
    assert not failed(gateway)
