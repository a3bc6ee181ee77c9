"""Memory amplification through forwarded answers (security): clients pipeline GET_SCHEMA for
a topic whose schema is a megabyte and never read. The gateway runs as a child process (its
memory is its own, whatever else ran in this one); the test peer plays the broker.

Before the fix, every answer was queued for the client: two such clients with 150 requests
each made the gateway hold ~300 MB of unread answers. Now each connection has at most 64
requests waiting on a broker (the rest TooManyRequests), and what it holds is bounded by bytes
in the one byte budget (16 MiB a connection: the broker is asked only for the answers it can
hold, as the last answer weighed, the rest refused at once; then it is closed), and a client
that reads is served all along."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import BaseCommand
from pulsar_lookup_gateway.metadata_store.synthetic import cluster
from tests.broker_peer import RawClient
from tests.reliability.child_gateway import MIB, ChildGateway
from tests.reliability.schema_broker import non_reader, schema_broker

TOPIC = "persistent://public/default/big-schema"
SCHEMA_BYTES = 1024 * 1024
REQUESTS = 150  # per non-reading client
ATTACKERS = 2
# The gateway's peak memory may grow by this much for the whole attack (its bounds: 2 x 16 MiB
# of unread answers, plus the answers in flight; measured ~20 MiB); with the in-flight limit
# alone it grew ~124 MiB, with neither ~300 MiB.
GROWTH_BOUND = 64 * MIB


async def open_non_reader(port: int) -> tuple[socket.socket, RawClient]:
    """A connection whose receive buffer is small, CONNECTED, then never read again."""
    raw = await non_reader(port)
    reader, writer = await asyncio.open_connection(sock=raw)
    client = RawClient(reader, writer)
    await client.handshake()
    return raw, client


@pytest.mark.timeout(120)
async def test_unread_forwarded_answers_are_bounded(tmp_path: Path) -> None:
    async with schema_broker(TOPIC, SCHEMA_BYTES) as (peer, nodes):
        gateway = ChildGateway(tmp_path, nodes)
        port = gateway.port
        try:
            # a reading client first: the schema comes through whole
            async with await RawClient.open("127.0.0.1", port) as reader:
                await reader.handshake()
                reader.send(codec.get_schema(TOPIC, 1))
                first = await reader.expect(timeout=30)
                assert len(first.getSchemaResponse.schema.schema_data) == SCHEMA_BYTES
                before = gateway.resident()
                gateway.reset_peak()
                attackers = [await open_non_reader(port) for _ in range(ATTACKERS)]
                for _, client in attackers:
                    client.send(b"".join(codec.get_schema(TOPIC, n) for n in range(REQUESTS)))
                # the broker is asked at most 64 times per connection (the rest are refused),
                # and only for the answers the connection could hold (16 MiB of 1 MiB ones)
                assert await peer.wait_for(
                    lambda p: p.topics_seen("GET_SCHEMA").count(TOPIC) >= 1 + ATTACKERS, 60
                )
                await asyncio.sleep(2.0)  # let the answers arrive and be weighed
                # meanwhile, the reading client is served
                reader.send(codec.get_schema(TOPIC, 2))
                second = await reader.expect(timeout=30)
                assert second.type == BaseCommand.GET_SCHEMA_RESPONSE
                assert len(second.getSchemaResponse.schema.schema_data) == SCHEMA_BYTES
                grown = gateway.peak() - before
                asked = peer.topics_seen("GET_SCHEMA").count(TOPIC)
                print(f"\nbroker asked {asked} times; gateway peak RSS grew {grown / MIB:.0f} MiB")
                assert asked <= 2 + 16 * ATTACKERS
                assert grown < GROWTH_BOUND
                for raw, client in attackers:
                    raw.close()
                    del client
        finally:
            gateway.stop()


@pytest.mark.timeout(120)
async def test_answers_made_in_one_read_are_weighed_as_they_are_made(tmp_path: Path) -> None:
    """No broker: one write of 3,000 GET_TOPICS_OF_NAMESPACE for a namespace of 1,000 topics
    (each answer ~45 KB, made at once from the cache) from a client that never reads. The
    answers are sent and weighed every 256 KiB, so the connection is closed at its 16 MiB
    bound; before, the whole read's answers (~135 MB, and as much again to join them) were
    made first."""
    nodes = cluster(brokers=1, owned={})
    for n in range(1000):
        nodes[f"/managed-ledgers/public/default/persistent/topic-with-a-longer-name-{n:05d}"] = {}
    gateway = ChildGateway(tmp_path, nodes)
    port = gateway.port
    try:
        async with await RawClient.open("127.0.0.1", port) as reader:
            await reader.handshake()
            reader.send(codec.get_topics_of_namespace("public/default", 1))
            warm = (await reader.expect(timeout=30)).getTopicsOfNamespaceResponse
            assert len(warm.topics) == 1000
            before = gateway.resident()
            gateway.reset_peak()
            raw, attacker = await open_non_reader(port)
            attacker.send(
                b"".join(codec.get_topics_of_namespace("public/default", n) for n in range(3000))
            )
            await asyncio.sleep(2.0)
            reader.send(codec.get_topics_of_namespace("public/default", 2))
            again = (await reader.expect(timeout=30)).getTopicsOfNamespaceResponse
            assert len(again.topics) == 1000  # the reading client is served meanwhile
            grown = gateway.peak() - before
            print(f"\ngateway peak RSS grew {grown / MIB:.0f} MiB")
            assert grown < GROWTH_BOUND
            raw.close()
    finally:
        gateway.stop()
