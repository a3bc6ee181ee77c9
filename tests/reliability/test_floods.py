"""Connection floods, connection limits, slowloris and half-open clients."""

from __future__ import annotations

import asyncio
import contextlib
import resource
from collections.abc import AsyncIterator

import aiohttp
import pytest

from pulsar_lookup_gateway.http_api.app import build_app
from pulsar_lookup_gateway.http_api.server import HttpServer
from pulsar_lookup_gateway.http_api.settings import HttpSettings
from pulsar_lookup_gateway.listeners.endpoints.addresses import Endpoint, Scheme
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper
from pulsar_lookup_gateway.metadata_store.synthetic import cluster, topic_in_range
from pulsar_lookup_gateway.serving.service import LookupService
from tests.broker_peer import RawClient
from tests.reliability.harness import (
    Tally,
    binary_load,
    binary_port,
    gateway_on,
    http_load,
    lookup_urls,
    scale,
)

pytestmark = pytest.mark.zookeeper

OWNED = {"0x00000000_0x40000000": 1, "0x40000000_0x80000000": 2}
TOPICS = [topic_in_range(0, 0x40000000), topic_in_range(0x40000000, 0x80000000)]
IDLE_BINARY = 5000
IDLE_HTTP = 1000


async def open_idle_binary(port: int, count: int) -> list[RawClient]:
    """`count` connections that complete the handshake and then say nothing."""

    async def one() -> RawClient:
        client = await RawClient.open("127.0.0.1", port, timeout=30)
        client.answer_pings = True
        await client.handshake(timeout=30)
        return client

    clients: list[RawClient] = []
    for start in range(0, count, 250):
        clients += await asyncio.gather(*(one() for _ in range(min(250, count - start))))
    return clients


async def open_idle_http(port: int, count: int) -> list[asyncio.StreamWriter]:
    """`count` keep-alive connections that each made one request and keep the socket open."""

    async def one() -> asyncio.StreamWriter:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /health HTTP/1.1\r\nHost: gw\r\nConnection: keep-alive\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        assert head.startswith(b"HTTP/1.1 200")
        return writer

    writers: list[asyncio.StreamWriter] = []
    for start in range(0, count, 250):
        writers += await asyncio.gather(*(one() for _ in range(min(250, count - start))))
    return writers


@pytest.mark.slow
async def test_lookups_answer_while_thousands_of_idle_connections_are_held(
    zookeeper: EmbeddedZooKeeper,
) -> None:
    nodes = cluster(owned=OWNED)
    async with gateway_on(zookeeper, nodes) as gateway, aiohttp.ClientSession() as http:
        port = binary_port(gateway)
        http_port = gateway.port_of("internal", "http")
        idle = await open_idle_binary(port, IDLE_BINARY)
        idle_http = await open_idle_http(http_port, IDLE_HTTP)
        try:
            stop = asyncio.Event()
            limit = int(scale(2000, 20000))
            tallies = await asyncio.gather(
                binary_load(port, TOPICS, stop, limit=limit),
                binary_load(port, TOPICS, stop, limit=limit),
                http_load(http, lookup_urls(gateway, TOPICS), stop, limit=limit // 2),
            )
            # The idle connections are still there and still usable.
            probe = idle[len(idle) // 2]
            reply = await probe.lookup(TOPICS[0], request_id=99)
            assert reply.lookupTopicResponse.response != 2  # not Failed
        finally:
            for writer in idle_http:
                writer.close()
            await asyncio.gather(*(c.close() for c in idle))
    tally = Tally()
    for result in tallies:
        tally.merge(result)
    assert tally.answers == limit * 2 + limit // 2
    assert not tally.failures
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(
        f"\nflood: {IDLE_BINARY} idle binary + {IDLE_HTTP} idle HTTP connections held; "
        f"{tally.answers} lookups answered, p99 {tally.p99_ms():.1f} ms; "
        f"peak RSS (gateway + clients) {rss} MiB"
    )


async def test_connections_beyond_the_maximum_are_refused_cleanly(
    zookeeper: EmbeddedZooKeeper,
) -> None:
    async with gateway_on(zookeeper, cluster(owned=OWNED), "brokerMaxConnections=50\n") as gw:
        port = binary_port(gw)
        accepted = await open_idle_binary(port, 50)
        try:
            refused = [await RawClient.open("127.0.0.1", port) for _ in range(10)]
            for client in refused:
                assert await client.closed(timeout=10)  # closed at once, nothing sent
                await client.close()
            reply = await accepted[0].lookup(TOPICS[0], request_id=7)  # the others still work
            assert reply.lookupTopicResponse.response != 2
        finally:
            await asyncio.gather(*(c.close() for c in accepted))


async def test_half_open_binary_clients_are_timed_out(zookeeper: EmbeddedZooKeeper) -> None:
    extra = "connectionHandshakeTimeoutSeconds=1\nkeepAliveIntervalSeconds=1\n"
    async with gateway_on(zookeeper, cluster(owned=OWNED), extra) as gateway:
        port = binary_port(gateway)
        silent = await RawClient.open("127.0.0.1", port)  # never sends CONNECT
        deaf = await RawClient.open("127.0.0.1", port)
        await deaf.handshake()  # then never answers the server's PING
        try:
            assert await silent.closed(timeout=10)
            assert await deaf.closed(timeout=10)
        finally:
            await silent.close()
            await deaf.close()


@contextlib.asynccontextmanager
async def http_server(service: LookupService, head_timeout: float) -> AsyncIterator[int]:
    spec = SocketSpec(Endpoint(Scheme.HTTP, "127.0.0.1", 0), "internal", "test")
    server = HttpServer(
        spec,
        build_app(service, HttpSettings("internal")),
        head_timeout=head_timeout,
    )
    await server.start()
    try:
        yield server.port
    finally:
        await server.stop(5)


async def test_slowloris_http_clients_are_timed_out(zookeeper: EmbeddedZooKeeper) -> None:
    async with (
        gateway_on(zookeeper, cluster(owned=OWNED)) as gateway,
        http_server(gateway.service, head_timeout=1.0) as port,
    ):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /health HTTP/1.1\r\n")
        closed = False
        for n in range(40):  # one header line every 0.25 s: never a complete head
            await asyncio.sleep(0.25)
            try:
                writer.write(f"X-Slow-{n}: y\r\n".encode())
                await writer.drain()
            except ConnectionError:
                closed = True
                break
            if reader.at_eof() or writer.is_closing():
                closed = True
                break
            with contextlib.suppress(TimeoutError):
                if await asyncio.wait_for(reader.read(1024), 0.01) == b"":
                    closed = True
                    break
        writer.close()
        assert closed, "a client dribbling headers for 10 s was not disconnected"
        # A well-behaved client on the same server is unaffected.
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{port}/health") as response,
        ):
            assert response.status == 200


async def test_a_client_that_stops_reading_its_answers_is_dropped(
    zookeeper: EmbeddedZooKeeper,
) -> None:
    extra = "keepAliveIntervalSeconds=1\n"
    async with gateway_on(zookeeper, cluster(owned=OWNED), extra) as gateway:
        reader, writer = await asyncio.open_connection("127.0.0.1", binary_port(gateway))
        writer.write(codec.connect("deaf", 21))
        frame = codec.lookup(TOPICS[0], 1)
        dropped = False
        for _ in range(80):  # at most ~20 s; never reading a single answer
            try:
                writer.write(frame * 4000)
                await asyncio.wait_for(writer.drain(), 0.2)
            except (ConnectionError, TimeoutError):
                pass
            if writer.transport.is_closing() or reader.at_eof():
                dropped = True
                break
            await asyncio.sleep(0.05)
            with contextlib.suppress(ConnectionError, TimeoutError):
                await asyncio.wait_for(writer.drain(), 0.01)
            if reader.exception() is not None:
                dropped = True
                break
        writer.close()
        assert dropped, "a client that never reads kept its connection"
