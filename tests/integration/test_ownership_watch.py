"""The ownership watch (`GET /lookup/v2/watch`) against a real ZooKeeper and gateway on
127.0.0.1: moves, deletes, registrations, generations (ZooKeeper's zxids, equal on two
gateways), listener choice, tokens, per-topic errors, limits, slow and hostile clients."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import pytest
from kazoo.client import KazooClient

from pulsar_lookup_gateway.gateway.process import Gateway
from pulsar_lookup_gateway.metadata_store.admin import encode, seed
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper
from pulsar_lookup_gateway.metadata_store.synthetic import (
    broker_id,
    broker_node,
    cluster,
    ownership_node,
    topic_in_range,
)
from tests.gateways import config_from, running

pytestmark = pytest.mark.zookeeper

WAIT = 10.0
FIRST, SECOND = "0x00000000_0x40000000", "0x40000000_0x80000000"
IN_FIRST = topic_in_range(0, 0x40000000)
IN_SECOND = topic_in_range(0x40000000, 0x80000000)
OWNERSHIP = f"/namespace/public/default/{FIRST}"
SECRET = bytes(range(32))


def config_text(connect: str, chroot: str, extra: str = "") -> str:
    return (
        f"metadataStoreUrl=zk:{connect}{chroot}\n"
        "advertisedListeners=internal:pulsar://127.0.0.1:6650,internal:http://127.0.0.1:8080,"
        "external:pulsar://127.0.0.2:6650,external:http://127.0.0.2:8080\n"
        "bindAddresses=internal:http://127.0.0.1:0,external:http://127.0.0.1:0\n"
        "brokerServicePort=\nwebServicePort=\n" + extra
    )


class Watcher:
    """One stream: JSON messages in, requests out."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws

    async def send(self, body: dict[str, Any]) -> None:
        await self.ws.send_str(json.dumps(body))

    async def subscribe(self, *topics: str) -> None:
        await self.send({"type": "subscribe", "topics": list(topics)})

    async def next(self) -> dict[str, Any]:
        message = await asyncio.wait_for(self.ws.receive(), WAIT)
        assert message.type is aiohttp.WSMsgType.TEXT, (message.type, message.data)
        body: dict[str, Any] = json.loads(message.data)
        return body

    async def about(self, topic: str) -> dict[str, Any]:
        """The next message about `topic` (others are skipped)."""
        while True:
            body = await self.next()
            if body.get("topic") == topic:
                return body

    async def closed(self) -> tuple[int | None, list[dict[str, Any]]]:
        """The messages until the gateway closes the stream, and its close code."""
        seen = []
        while True:
            message = await asyncio.wait_for(self.ws.receive(), WAIT)
            if message.type is aiohttp.WSMsgType.TEXT:
                seen.append(json.loads(message.data))
            elif message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                return self.ws.close_code, seen


@contextlib.asynccontextmanager
async def watching(
    port: int, *, headers: dict[str, str] | None = None, query: str = ""
) -> AsyncIterator[Watcher]:
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(
            f"http://127.0.0.1:{port}/lookup/v2/watch{query}", headers=headers or {}
        ) as ws,
    ):
        yield Watcher(ws)


@pytest.fixture
def zk(zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk_admin: KazooClient) -> KazooClient:
    seed(zk_admin, cluster(brokers=2, owned={FIRST: 1, SECOND: 2}))
    return zk_admin


@pytest.fixture
async def gateway(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk: KazooClient
) -> AsyncIterator[Gateway]:
    async with running(config_from(config_text(zookeeper.connect_string, zk_chroot))) as gw:
        yield gw


def zxid(client: KazooClient, path: str, which: str = "mzxid") -> int:
    stat = client.exists(path)
    assert stat is not None
    return int(getattr(stat, which))


async def test_moves_and_deletes_are_pushed_with_zookeeper_generations(
    gateway: Gateway, zk: KazooClient
) -> None:
    port = gateway.port_of("external", "http")
    async with watching(port) as watcher:
        await watcher.subscribe(IN_FIRST, IN_SECOND)
        first = {(m := await watcher.next())["topic"]: m for _ in range(2)}
        assert first[IN_FIRST] == {
            "type": "owner",
            "topic": IN_FIRST,
            "generation": max(
                zxid(zk, OWNERSHIP), zxid(zk, f"/loadbalance/brokers/{broker_id(1)}", "czxid")
            ),
            "brokerUrl": "pulsar://b1.example.com:6650",
            "brokerUrlTls": "pulsar+ssl://b1.example.com:6651",
            "httpUrlTls": "https://b1.example.com:8443",  # (no httpUrl: the listener has none)
        }
        assert first[IN_SECOND]["brokerUrl"] == "pulsar://b2.example.com:6650"

        # The owner moves (its node rewritten): the new owner, dated by the write.
        zk.set(OWNERSHIP, encode(ownership_node(2)))
        moved = await watcher.about(IN_FIRST)
        assert moved["brokerUrl"] == "pulsar://b2.example.com:6650"
        assert moved["generation"] == zxid(zk, OWNERSHIP) > first[IN_FIRST]["generation"]

        # Unloaded (deleted): unowned, dated by the deletion (the parent's pzxid).
        zk.delete(OWNERSHIP)
        gone = await watcher.about(IN_FIRST)
        parent = zxid(zk, "/namespace/public/default", "pzxid")
        assert gone == {"type": "unowned", "topic": IN_FIRST, "generation": parent}
        assert parent > moved["generation"]

        # Owned again by broker 1.
        zk.create(OWNERSHIP, encode(ownership_node(1)), ephemeral=False)
        back = await watcher.about(IN_FIRST)
        assert back["brokerUrl"] == "pulsar://b1.example.com:6650"
        assert back["generation"] == zxid(zk, OWNERSHIP) > parent
