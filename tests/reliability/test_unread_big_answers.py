"""Strangers that ask for a 5 MB schema and never read (issue 41, attacks 1 and 2), against a
gateway in a child process (its memory is its own) whose broker is a test peer.

Before the one byte budget, 60 such HTTP connections grew the gateway by ~424 MiB (the
broker's bytes, the JSON text and the encoded body, all held for a client that reads nothing),
binary ones by ~300 MiB (each answer under the 16 MiB per connection, all under 256 MiB); and a
client that reads, beside 100 of them, waited 6-10 s for its schema or got a 503. Now what is
held for them is charged to the budget (16 MiB a client, 64 MiB of unread answers in all), the
ones that do not read are closed to make room for one that does, and the rest are refused."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import aiohttp
import pytest

from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import BaseCommand
from tests.broker_peer import RawClient
from tests.reliability.child_gateway import MIB, ChildGateway, HttpGateway
from tests.reliability.schema_broker import (
    http_schema,
    http_strangers,
    non_reader,
    schema_broker,
    settled,
)

TOPIC = "persistent://public/default/big"
SCHEMA_BYTES = 5_000_000
# The bound for 60 unread 5 MB schemas (the budget's unread share is 64 MiB; the rest is
# what is made and dropped on the way).
GROWTH_BOUND = 128 * MIB
# How long the honest client may wait for its schema (the "within 5 s").
HONEST_DEADLINE = 5.0


async def binary_strangers(port: int, count: int) -> list[tuple[socket.socket, RawClient]]:
    """`count` binary connections, CONNECTED, that each ask for the schema once, never reading."""
    strangers = []
    for _ in range(count):
        raw = await non_reader(port)
        reader, writer = await asyncio.open_connection(sock=raw)
        client = RawClient(reader, writer)
        await client.handshake()
        client.send(codec.get_schema(TOPIC, 1))
        strangers.append((raw, client))
    return strangers


@pytest.mark.timeout(180)
async def test_sixty_unread_http_schemas_cost_less_than_128_mib(tmp_path: Path) -> None:
    async with (
        schema_broker(TOPIC, SCHEMA_BYTES) as (peer, nodes),
        aiohttp.ClientSession() as session,
    ):
        with HttpGateway(tmp_path, nodes) as gateway:
            port = gateway.port
            assert await http_schema(session, port, TOPIC, 30) == SCHEMA_BYTES  # warm, and whole
            before = gateway.resident()
            gateway.reset_peak()
            strangers = await http_strangers(port, TOPIC, 60)
            await settled(peer, TOPIC)
            assert await http_schema(session, port, TOPIC, 30) == SCHEMA_BYTES  # still served
            grown = gateway.peak() - before
            print(f"\n60 unread HTTP schemas: the gateway's peak grew {grown / MIB:.0f} MiB")
            assert grown < GROWTH_BOUND
            for raw in strangers:
                raw.close()


@pytest.mark.timeout(180)
async def test_sixty_unread_binary_schemas_cost_less_than_128_mib(tmp_path: Path) -> None:
    async with schema_broker(TOPIC, SCHEMA_BYTES) as (peer, nodes):
        with ChildGateway(tmp_path, nodes) as gateway:
            port = gateway.port
            async with await RawClient.open("127.0.0.1", port) as reader:
                await reader.handshake()
                reader.send(codec.get_schema(TOPIC, 1))
                first = await reader.expect(timeout=30)
                assert len(first.getSchemaResponse.schema.schema_data) == SCHEMA_BYTES
                before = gateway.resident()
                gateway.reset_peak()
                strangers = await binary_strangers(port, 60)
                await settled(peer, TOPIC)
                reader.send(codec.get_schema(TOPIC, 2))
                second = await reader.expect(timeout=30)
                assert second.type == BaseCommand.GET_SCHEMA_RESPONSE
                assert len(second.getSchemaResponse.schema.schema_data) == SCHEMA_BYTES
                grown = gateway.peak() - before
                print(f"\n60 unread binary schemas: the gateway's peak grew {grown / MIB:.0f} MiB")
                assert grown < GROWTH_BOUND
                for raw, client in strangers:
                    raw.close()
                    del client


@pytest.mark.timeout(180)
async def test_an_honest_client_gets_its_schema_beside_a_hundred_strangers(
    tmp_path: Path,
) -> None:
    """Before, the strangers' 500 MB of answers came off the same broker connection first (at
    the pace the gateway made and wrote bodies for clients that did not read); now the ones the
    budget cannot hold are refused at once, the others' answers read at the broker's pace, and
    the honest client's schema comes through whole within its deadline (stalled strangers
    closed to make room for it)."""
    async with (
        schema_broker(TOPIC, SCHEMA_BYTES) as (peer, nodes),
        aiohttp.ClientSession() as session,
    ):
        with HttpGateway(tmp_path, nodes) as gateway:
            port = gateway.port
            assert await http_schema(session, port, TOPIC, 30) == SCHEMA_BYTES  # warm
            strangers = await http_strangers(port, TOPIC, 100)
            await settled(peer, TOPIC)
            assert await http_schema(session, port, TOPIC, HONEST_DEADLINE) == SCHEMA_BYTES
            for raw in strangers:
                raw.close()
