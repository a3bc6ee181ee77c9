"""A gateway serving topic listings from a real ZooKeeper tree, and plain HTTP/binary clients for
it (shared by the listing, fan-out and broker fidelity tests)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from pulsar_lookup_gateway.brokers.binary_forwarder import BinaryForwarder
from pulsar_lookup_gateway.brokers.link import BrokerLink, LinkSettings
from pulsar_lookup_gateway.http_api.app import build_app
from pulsar_lookup_gateway.http_api.server import HttpServer
from pulsar_lookup_gateway.http_api.settings import HttpSettings
from pulsar_lookup_gateway.listeners.binary import BinaryServer, BinarySettings
from pulsar_lookup_gateway.listeners.endpoints.addresses import Endpoint, Scheme
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.listeners.protocol.codec import BaseCommand
from pulsar_lookup_gateway.lookup.auto_creation import AutoCreationSettings
from pulsar_lookup_gateway.lookup.topic_list import TopicLister
from pulsar_lookup_gateway.metadata_store.file import FileSource
from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
from pulsar_lookup_gateway.metadata_store.synthetic import cluster
from pulsar_lookup_gateway.serving.service import LookupService
from tests.broker_peer import BrokerPeer, RawClient

HOST = "127.0.0.1"


LEDGERS = "/managed-ledgers/public/default/persistent"


TOPICS = [
    "persistent://public/default/orders-1",
    "persistent://public/default/orders-2",
    "persistent://public/default/payments",
]


SETTINGS = BinarySettings(keep_alive_interval=0, handshake_timeout=10)


CREATION_ON = AutoCreationSettings()


def nodes_with(peer: BrokerPeer | None = None) -> dict[str, Any]:
    nodes = cluster(brokers=1, owned={})
    for topic in TOPICS:
        nodes[f"{LEDGERS}/{topic.rsplit('/', 1)[1]}"] = {}
    nodes[f"{LEDGERS}/__change_events"] = {}  # a system topic: never listed
    nodes["/admin/partitioned-topics/public/default/persistent/orders"] = {"partitions": 2}
    if peer is not None:
        broker = nodes["/loadbalance/brokers/b1:8080"]
        broker["advertisedListeners"]["internal"]["brokerServiceUrl"] = peer.url
    return nodes


@contextlib.asynccontextmanager
async def gateway(
    tmp_path: Path,
    nodes: dict[str, Any],
    creation: AutoCreationSettings = CREATION_ON,
) -> AsyncIterator[tuple[BinaryServer, HttpServer]]:
    path = tmp_path / "cluster.json"
    write_snapshot(path, nodes)
    source = FileSource(path, poll_interval=60)
    await source.start()
    service = LookupService(source, internal_listener="internal")
    service.configure_topics(creation, TopicLister())
    link = BrokerLink(service, LinkSettings(internal_listener="internal", request_timeout=5))
    binary = BinaryServer(
        SocketSpec(Endpoint(Scheme.PULSAR, HOST, 0), None, "binary"),
        service,
        SETTINGS,
        forwarding=BinaryForwarder(link),
    )
    app = build_app(service, HttpSettings(None), broker_link=link)
    http = HttpServer(SocketSpec(Endpoint(Scheme.HTTP, HOST, 0), None, "http"), app)
    await binary.start()
    await http.start()
    try:
        yield binary, http
    finally:
        await http.stop(5)
        await binary.stop(5)
        await link.close()
        await source.close()


async def connected(server: BinaryServer) -> tuple[RawClient, BaseCommand]:
    raw = await RawClient.open(HOST, server.port)
    return raw, await raw.handshake()


async def http_get(server: HttpServer, path: str) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(server.url + path, allow_redirects=False) as reply,
    ):
        body = await reply.json() if reply.content_type == "application/json" else None
        return reply.status, body
