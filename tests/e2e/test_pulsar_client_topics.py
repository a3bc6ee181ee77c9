"""The real `pulsar-client` wheel using the gateway as its service URL for what clients send
besides lookups: regex subscriptions (topic lists), schemas, partitioned metadata with topic
auto-creation. Over `pulsar://` and over `http://`.

One broker test peer (tests/broker_peer.py) plays the cluster's only broker: every bundle is
its, its internal listener is where the gateway's broker link goes, and it answers SUBSCRIBE,
PRODUCER, GET_SCHEMA and PARTITIONED_METADATA (creating a partitioned topic when asked with
auto-creation) and records everything. The persistent topics of `public/default` are the
managed-ledger nodes of the snapshot.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _pulsar
import pulsar
import pytest

from pulsar_lookup_gateway.brokers.binary_forwarder import BinaryForwarder
from pulsar_lookup_gateway.brokers.link import BrokerLink, LinkSettings
from pulsar_lookup_gateway.http_api.app import build_app
from pulsar_lookup_gateway.http_api.server import HttpServer
from pulsar_lookup_gateway.http_api.settings import HttpSettings
from pulsar_lookup_gateway.listeners.binary import BinaryServer, BinarySettings
from pulsar_lookup_gateway.listeners.endpoints.addresses import Endpoint, Scheme
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import Schema
from pulsar_lookup_gateway.lookup.auto_creation import AutoCreationSettings, TopicType
from pulsar_lookup_gateway.lookup.topic_list import TopicLister
from pulsar_lookup_gateway.metadata_store.file import FileSource
from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
from pulsar_lookup_gateway.metadata_store.synthetic import FOUR_BUNDLES, cluster
from pulsar_lookup_gateway.serving.service import LookupService
from tests.broker_peer import BrokerPeer
from tests.e2e.clients import OPERATION_TIMEOUT, in_thread, new_client

pytestmark = pytest.mark.e2e

NS = "public/default"
LEDGERS = f"/managed-ledgers/{NS}/persistent"
EXISTING = ["orders-1", "orders-2", "payments", "__change_events"]
ORDERS = [f"persistent://{NS}/orders-1", f"persistent://{NS}/orders-2"]
BUNDLES = [f"{lo}_{hi}" for lo, hi in itertools.pairwise(FOUR_BUNDLES)]
SCHEMA_TOPIC = f"persistent://{NS}/payments"
AVRO = '{"type":"record","name":"Payment","fields":[{"name":"id","type":"long"}]}'


def snapshot(peer: BrokerPeer) -> dict[str, Any]:
    nodes = cluster(brokers=1, owned=dict.fromkeys(BUNDLES, 1))
    urls = {"internal": {"brokerServiceUrl": peer.url}}
    broker = nodes["/loadbalance/brokers/b1:8080"]
    broker.update(pulsarServiceUrl=peer.url, advertisedListeners=urls)
    for bundle in BUNDLES:
        nodes[f"/namespace/{NS}/{bundle}"].update(nativeUrl=peer.url, advertisedListeners=urls)
    for name in EXISTING:
        nodes[f"{LEDGERS}/{name}"] = {}
    return nodes


@dataclass
class World:
    peer: BrokerPeer
    binary: BinaryServer
    http: HttpServer

    def url(self, kind: str) -> str:
        return self.binary.url if kind == "binary" else self.http.url


@contextlib.asynccontextmanager
async def world_of(tmp_path: Path, creation: AutoCreationSettings) -> AsyncIterator[World]:
    async with contextlib.AsyncExitStack() as stack:
        peer = await stack.enter_async_context(BrokerPeer(name="broker"))
        peer.create_partitions = creation.default_partitions
        peer.schemas[SCHEMA_TOPIC] = codec.schema(
            f"{NS}/payments", Schema.AVRO, AVRO.encode(), {"team": "billing"}
        )
        peer.schema_version = 4
        path = tmp_path / "cluster.json"
        write_snapshot(path, snapshot(peer))
        source = FileSource(path, poll_interval=60)
        await source.start()
        stack.push_async_callback(source.close)
        service = LookupService(source, internal_listener="internal")
        service.configure_topics(creation, TopicLister())
        link = BrokerLink(service, LinkSettings(internal_listener="internal"))
        stack.push_async_callback(link.close)
        binary = BinaryServer(
            SocketSpec(Endpoint(Scheme.PULSAR, "127.0.0.1", 0), None, "e2e binary"),
            service,
            BinarySettings(keep_alive_interval=0, handshake_timeout=10),
            forwarding=BinaryForwarder(link),
        )
        app = build_app(service, HttpSettings(None), broker_link=link)
        http = HttpServer(SocketSpec(Endpoint(Scheme.HTTP, "127.0.0.1", 0), None, "e2e http"), app)
        for server in (binary, http):
            await server.start()
            stack.push_async_callback(server.stop, 5)
        yield World(peer, binary, http)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with world_of(tmp_path, AutoCreationSettings()) as w:
        yield w


def with_client(url: str, work: Callable[[pulsar.Client], Any]) -> Any:
    client = new_client(url)
    try:
        return work(client)
    finally:
        client.close()


def subscribe_pattern(client: pulsar.Client) -> str:
    consumer = client.subscribe(re.compile(f"persistent://{NS}/orders-.*"), "regex-sub")
    try:
        return str(consumer.topic())
    finally:
        consumer.close()


@pytest.mark.parametrize("kind", ["binary", "http"])
async def test_a_regex_subscription_subscribes_exactly_the_matching_topics(
    world: World, kind: str
) -> None:
    await in_thread(with_client, world.url(kind), subscribe_pattern)
    assert sorted(world.peer.topics_seen("SUBSCRIBE")) == ORDERS
    if kind == "binary":  # the list came from the metadata store, not from the broker
        assert "GET_TOPICS_OF_NAMESPACE" not in world.peer.types_seen()


def latest_schema(client: pulsar.Client) -> tuple[Any, str]:
    info = client._client.get_schema_info(SCHEMA_TOPIC, -1)
    return info.schema_type(), info.schema()


def schema_version_4(client: pulsar.Client) -> Any:
    return client._client.get_schema_info(SCHEMA_TOPIC, 4).schema_type()


@pytest.mark.parametrize("kind", ["binary", "http"])
async def test_a_schema_is_fetched_from_a_broker(world: World, kind: str) -> None:
    schema_type, definition = await in_thread(with_client, world.url(kind), latest_schema)
    assert schema_type == _pulsar.SchemaType.AVRO
    assert definition == AVRO
    assert await in_thread(with_client, world.url(kind), schema_version_4) == (
        _pulsar.SchemaType.AVRO
    )
    assert world.peer.topics_seen("GET_SCHEMA") == [SCHEMA_TOPIC, SCHEMA_TOPIC]


def produce_to(topic: str) -> Callable[[pulsar.Client], list[str]]:
    def work(client: pulsar.Client) -> list[str]:
        producer = client.create_producer(topic)
        producer.close()
        return list(client.get_topic_partitions(topic))

    return work


@pytest.mark.parametrize("kind", ["binary", "http"])
async def test_a_missing_topic_is_created_partitioned_by_a_broker(
    tmp_path: Path, kind: str
) -> None:
    creation = AutoCreationSettings(topic_type=TopicType.PARTITIONED, default_partitions=3)
    topic = f"persistent://{NS}/fresh-{kind}"
    async with world_of(tmp_path, creation) as w:
        partitions = await in_thread(with_client, w.url(kind), produce_to(topic))
        assert partitions == [f"{topic}-partition-{i}" for i in range(3)]
        assert sorted(w.peer.producer_topics()) == partitions
        asked = [c for c in w.peer.seen if c.type_name == "PARTITIONED_METADATA"]
        assert asked and all(c.topic == topic and c.creation for c in asked)
        assert w.peer.partitions == {topic: 3}


def refused(topic: str) -> Callable[[pulsar.Client], str]:
    def work(client: pulsar.Client) -> str:
        try:
            client.create_producer(topic)
        except pulsar.PulsarException as exc:
            return type(exc).__name__
        return "created"

    return work


@pytest.mark.parametrize(("kind", "error"), [("binary", "TopicNotFound"), ("http", "ConnectError")])
async def test_with_creation_off_a_missing_topic_fails(
    tmp_path: Path, kind: str, error: str
) -> None:
    """Binary: PARTITIONED_METADATA answers TopicNotFound. HTTP: /partitions answers 404, which
    the C++ client reports as a connect error. Either way no broker hears of the topic."""
    missing = f"persistent://{NS}/missing-{kind}"
    async with world_of(tmp_path, AutoCreationSettings(allow=False)) as w:
        assert await in_thread(with_client, w.url(kind), refused(missing)) == error
        assert missing not in w.peer.topics_seen("PARTITIONED_METADATA")
        assert missing not in w.peer.producer_topics()
        # A topic that exists (its managed ledger is there) is still served.
        existing = f"persistent://{NS}/payments"
        assert await in_thread(with_client, w.url(kind), produce_to(existing)) == [existing]


def test_operation_timeout_is_short() -> None:
    assert OPERATION_TIMEOUT <= 10  # the failing cases above end within the client's own bound
