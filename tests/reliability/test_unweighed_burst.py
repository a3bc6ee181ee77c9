"""The first burst of a request never asked before (issue 41, "fair broker links"): strangers
ask at once for a 5 MB schema nobody asked for yet, and never read. Its size is not known, so
the byte budget cannot charge them ahead (brokers.answer_sizes): before, each of them was
asked of the broker, whose megabytes then came down the shared broker connection for clients
that read nothing. Now one of them asks and the others wait for its answer to be weighed, then
are charged (or refused) as for a request asked before; a different request is not held up.

The gateway runs in a child process; the broker is a test peer that holds its answers for the
big schema until the test lets them go, so that the whole burst is in the gateway while the
first answer is outstanding (the set-up is a copy of test_unread_big_answers.py's, with that
one change)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import BaseCommand, FrameDecoder, Schema
from pulsar_lookup_gateway.metadata_store.synthetic import cluster
from pulsar_lookup_gateway.serving.held_bytes import UNREAD_SHARE
from tests.broker_peer import BrokerPeer, RawClient
from tests.reliability.child_gateway import ChildGateway

TOPIC = "persistent://public/default/never-asked"
SCHEMA_PATH = "/admin/v2/schemas/public/default/never-asked/schema"
OTHER = "persistent://public/default/small"
OTHER_PATH = "/admin/v2/schemas/public/default/small/schema"
SCHEMA_BYTES = 5_000_000
STRANGERS = 60
# Once the first answer is weighed, the waiting strangers are charged its size: the broker is
# asked for the first, at most as many as the budget's unread share holds, and the reading client's
# own request at the end; before, for all 60 and the reading client's.
ASKED_BOUND = 1 + UNREAD_SHARE // SCHEMA_BYTES + 1


@dataclass
class LatePeer(BrokerPeer):
    """A test peer playing the broker that answers GET_SCHEMA of `late` only once `answering`
    is set (every other command at once)."""

    late: str = TOPIC
    answering: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _LateConnection(self), self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def asked(self) -> int:
        return self.topics_seen("GET_SCHEMA").count(self.late)


class _LateConnection(asyncio.Protocol):
    def __init__(self, peer: LatePeer) -> None:
        self._peer = peer
        self._decoder = FrameDecoder()
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._peer.connections += 1
        self._peer._transports.add(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None:
            self._peer._transports.discard(self._transport)

    def data_received(self, data: bytes) -> None:
        peer, transport = self._peer, self._transport
        assert transport is not None
        self._decoder.feed(data)
        while (command := self._decoder.next_command()) is not None:
            frames, _ = peer._answer(command)
            late = (
                isinstance(command, BaseCommand)
                and command.type == BaseCommand.GET_SCHEMA
                and command.getSchema.topic == peer.late
                and not peer.answering.is_set()
            )
            if late:
                task = asyncio.ensure_future(_answer_later(peer, transport, frames))
                peer._tasks.add(task)
                task.add_done_callback(peer._tasks.discard)
                continue
            for frame in frames:
                transport.write(frame)


async def _answer_later(peer: LatePeer, transport: asyncio.Transport, frames: list[bytes]) -> None:
    await peer.answering.wait()
    if not transport.is_closing():
        for frame in frames:
            transport.write(frame)


class HttpGateway(ChildGateway):
    """A child gateway with one HTTP socket of the internal listener (the broker link's)."""

    LISTENERS = (
        "advertisedListeners=internal:pulsar://127.0.0.1:6650,internal:http://127.0.0.1:8080\n"
        "bindAddresses=internal:http://127.0.0.1:0\n"
        "internalListenerName=internal\n"
    )
    SOCKET = ("http", "internal")


@asynccontextmanager
async def late_broker() -> AsyncIterator[tuple[LatePeer, dict[str, Any]]]:
    """The late peer serving the 5 MB schema (and a small one), and a cluster naming it."""
    peer = LatePeer(name="broker")
    async with peer:
        peer.schemas[TOPIC] = codec.schema(
            "public/default/never-asked", Schema.STRING, b"x" * SCHEMA_BYTES, {}
        )
        peer.schemas[OTHER] = codec.schema("public/default/small", Schema.STRING, b"y" * 10, {})
        nodes = cluster(brokers=1, owned={})
        nodes["/loadbalance/brokers/b1:8080"]["advertisedListeners"]["internal"][
            "brokerServiceUrl"
        ] = peer.url
        yield peer, nodes


async def non_reader(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection with a small receive buffer, to be read no further than its handshake."""
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.setblocking(False)
    await asyncio.get_running_loop().sock_connect(raw, ("127.0.0.1", port))
    return await asyncio.open_connection(sock=raw)


async def http_burst(port: int) -> list[asyncio.StreamWriter]:
    """`STRANGERS` connections that each ask for the big schema once and never read."""
    request = f"GET {SCHEMA_PATH} HTTP/1.1\r\nHost: gateway\r\n\r\n".encode()
    strangers = []
    for _ in range(STRANGERS):
        _, writer = await non_reader(port)
        writer.write(request)
        strangers.append(writer)
    return strangers


async def binary_burst(port: int) -> list[asyncio.StreamWriter]:
    """`STRANGERS` binary connections, CONNECTED, each asking for the big schema once and
    never reading after the handshake."""
    strangers = []
    for _ in range(STRANGERS):
        client = RawClient(*await non_reader(port))
        await client.handshake()
        client.send(codec.get_schema(TOPIC, 1))
        strangers.append(client.writer)
    return strangers


async def http_schema(port: int, path: str) -> int:
    """The length of a schema's data as a client that reads gets it."""
    async with aiohttp.ClientSession() as session:
        url = f"http://127.0.0.1:{port}{path}"
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=30)) as response:
            assert response.status == 200, await response.text()
            return len((await response.json())["data"])


async def binary_schema(port: int, topic: str) -> int:
    async with await RawClient.open("127.0.0.1", port) as client:
        await client.handshake()
        client.send(codec.get_schema(topic, 1))
        answer = await client.expect(timeout=30)
        assert answer.type == BaseCommand.GET_SCHEMA_RESPONSE, answer
        return len(answer.getSchemaResponse.schema.schema_data)


async def _attack(
    port: int,
    peer: LatePeer,
    burst: Callable[[int], Awaitable[list[asyncio.StreamWriter]]],
    read_schema: Callable[[int, str], Awaitable[int]],
    other: str,
    mine: str,
) -> tuple[int, int]:
    """The burst while the first answer is outstanding, then with it let go: (the broker's
    GET_SCHEMAs of the big schema while the first was outstanding, then in all)."""
    strangers = await burst(port)
    assert await peer.wait_for(lambda _: peer.asked() >= 1, 30)
    # A different request is not held up by the strangers waiting on theirs.
    assert await read_schema(port, other) == 10
    await asyncio.sleep(2.0)  # every stranger's request read by the gateway meanwhile
    outstanding = peer.asked()
    peer.answering.set()
    await asyncio.sleep(3.0)  # the first answer weighed, the waiters charged or refused
    # A client that reads still gets the big schema whole (stalled strangers make room).
    assert await read_schema(port, mine) == SCHEMA_BYTES
    for writer in strangers:
        writer.close()
    return outstanding, peer.asked()


def failed(gateway: ChildGateway) -> list[str]:
    """The gateway's log lines about a request that failed with an error of its own."""
    return [line for line in gateway.running.lines if "internal error" in line]


@pytest.mark.timeout(180)
async def test_a_first_http_burst_costs_the_broker_one_answer(tmp_path: Path) -> None:
    async with late_broker() as (peer, nodes):
        with HttpGateway(tmp_path, nodes) as gateway:
            outstanding, in_all = await _attack(
                gateway.port, peer, http_burst, http_schema, OTHER_PATH, SCHEMA_PATH
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
