"""Topic lists, partitioned metadata and schemas through the gateway's binary and HTTP sockets
(real sockets on 127.0.0.1), answered from a snapshot, from ZooKeeper, or by a broker test peer
over the broker link."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import BaseCommand, Schema, ServerError
from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import CommandGetTopicsOfNamespace
from pulsar_lookup_gateway.lookup.auto_creation import AutoCreationSettings, TopicType
from pulsar_lookup_gateway.lookup.topic_list import topics_hash
from pulsar_lookup_gateway.metadata_store.admin import seed
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper
from pulsar_lookup_gateway.metadata_store.synthetic import ownership_node
from pulsar_lookup_gateway.metadata_store.url import parse_metadata_url
from pulsar_lookup_gateway.metadata_store.zookeeper import ZooKeeperSource
from pulsar_lookup_gateway.serving.service import LookupService
from tests.broker_peer import BrokerPeer, RawClient
from tests.integration.http_api.listing_gateway import (
    LEDGERS,
    SETTINGS,
    TOPICS,
    connected,
    gateway,
    http_get,
    nodes_with,
)
from tests.waiting import eventually


async def test_connected_announces_what_a_broker_announces(tmp_path: Path) -> None:
    async with gateway(tmp_path, nodes_with()) as (binary, _):
        raw, answer = await connected(binary)
        await raw.close()
    flags = answer.connected.feature_flags
    assert flags.supports_get_partitioned_metadata_without_auto_creation
    assert not flags.supports_topic_watchers
    assert answer.connected.max_message_size == SETTINGS.announced_message_size


async def test_persistent_topics_with_pattern_and_hash(tmp_path: Path) -> None:
    async with gateway(tmp_path, nodes_with()) as (binary, http):
        raw, _ = await connected(binary)
        async with raw:
            raw.send(codec.get_topics_of_namespace("public/default", 5))
            whole = (await raw.expect()).getTopicsOfNamespaceResponse
            raw.send(
                codec.get_topics_of_namespace(
                    "public/default", 6, topics_pattern="persistent://public/default/orders-.*"
                )
            )
            matching = (await raw.expect()).getTopicsOfNamespaceResponse
            raw.send(
                codec.get_topics_of_namespace(
                    "public/default",
                    7,
                    topics_pattern="public/default/orders-.*",
                    topics_hash=matching.topics_hash,
                )
            )
            unchanged = (await raw.expect()).getTopicsOfNamespaceResponse
            raw.send(codec.get_topics_of_namespace("nope", 8))
            invalid = await raw.expect()
        status, listed = await http_get(http, "/admin/v2/namespaces/public/default/topics")
        missing, _ = await http_get(http, "/admin/v2/namespaces/public/ghost/topics")
    assert (whole.request_id, list(whole.topics), whole.filtered) == (5, TOPICS, False)
    assert whole.topics_hash == topics_hash(TOPICS) and whole.changed
    assert list(matching.topics) == TOPICS[:2] and matching.filtered
    assert (list(unchanged.topics), unchanged.changed) == ([], False)
    assert invalid.type == BaseCommand.ERROR and invalid.error.request_id == 8
    assert invalid.error.error == ServerError.InvalidTopicName
    assert (status, listed) == (200, TOPICS)
    assert missing == 404


async def test_a_backtracking_bomb_is_filtered_while_the_gateway_stays_live(
    tmp_path: Path,
) -> None:
    """`(.|.){40}x` would take a backtracking engine hours on a 55-character name (and the
    gateway's loop with it); RE2 filters it at once, and another connection and /health are
    answered. A pattern RE2 refuses (a back-reference) is answered unfiltered."""
    nodes = nodes_with()
    for local in ("a" * 40, "a" * 25 + "x", "a" * 60 + "x"):
        nodes[f"{LEDGERS}/{local}"] = {}
    async with gateway(tmp_path, nodes) as (binary, http):
        raw, _ = await connected(binary)
        other, _ = await connected(binary)
        async with raw, other:
            raw.send(
                codec.get_topics_of_namespace("public/default", 1, topics_pattern="(.|.){40}x")
            )
            other.send(codec.partitioned_metadata("persistent://public/default/payments", 2))
            bomb = (await raw.expect()).getTopicsOfNamespaceResponse
            metadata = (await other.expect()).partitionMetadataResponse
            raw.send(codec.get_topics_of_namespace("public/default", 3, topics_pattern="(a)\\1"))
            refused = (await raw.expect()).getTopicsOfNamespaceResponse
        health, _ = await http_get(http, "/health")
    assert (bomb.request_id, bomb.filtered) == (1, True)
    assert list(bomb.topics) == ["persistent://public/default/" + "a" * 25 + "x"]
    assert (metadata.request_id, metadata.partitions, metadata.HasField("error")) == (2, 0, False)
    assert health == 200
    assert (refused.request_id, refused.filtered, len(refused.topics)) == (3, False, 6)


async def test_non_persistent_topics_and_schemas_come_from_a_broker(tmp_path: Path) -> None:
    async with BrokerPeer(name="broker") as peer:
        peer.topics["public/default"] = ["non-persistent://public/default/np"]
        peer.schemas["persistent://public/default/payments"] = codec.schema(
            "public/default/payments", Schema.JSON, b'{"type":"record"}', {"k": "v"}
        )
        peer.schema_version = 2
        nodes = nodes_with(peer)
        # the REST list asks the brokers that own the namespace's bundles (b1: the peer)
        nodes["/namespace/public/default/0x00000000_0x40000000"] = ownership_node(1)
        async with gateway(tmp_path, nodes) as (binary, http):
            raw, _ = await connected(binary)
            async with raw:
                raw.send(
                    codec.get_topics_of_namespace(
                        "public/default", 40, CommandGetTopicsOfNamespace.NON_PERSISTENT
                    )
                )
                topics = (await raw.expect()).getTopicsOfNamespaceResponse
                raw.send(codec.get_schema("persistent://public/default/payments", 41))
                schema = (await raw.expect()).getSchemaResponse
                raw.send(codec.get_schema("persistent://public/default/none", 42))
                no_schema = (await raw.expect()).getSchemaResponse
            listed = await http_get(
                http, "/admin/v2/namespaces/public/default/topics?mode=NON_PERSISTENT"
            )
            rest = await http_get(http, "/admin/v2/schemas/public/default/payments/schema")
            versioned = await http_get(http, "/admin/v2/schemas/public/default/payments/schema/2")
            absent = await http_get(http, "/admin/v2/schemas/public/default/none/schema")
    assert (topics.request_id, list(topics.topics)) == (40, ["non-persistent://public/default/np"])
    assert schema.request_id == 41 and schema.schema.type == Schema.JSON
    assert schema.schema_version == (2).to_bytes(8, "big")
    assert (no_schema.request_id, no_schema.error_code) == (42, ServerError.TopicNotFound)
    assert listed == (200, ["non-persistent://public/default/np"])
    assert rest == (
        200,
        {
            "version": 2,
            "type": "JSON",
            "timestamp": 0,
            "data": '{"type":"record"}',
            "properties": {"k": "v"},
        },
    )
    assert versioned[0] == 200
    assert absent[0] == 404
    # The REST version went to the broker as 8 bytes, big-endian.
    assert peer.topics_seen("GET_SCHEMA").count("persistent://public/default/payments") == 3


async def partitions(raw: RawClient, topic: str, request_id: int, creation: bool | None) -> Any:
    raw.send(codec.partitioned_metadata(topic, request_id, metadata_auto_creation_enabled=creation))
    answer = await raw.expect()
    assert answer.type == BaseCommand.PARTITIONED_METADATA_RESPONSE
    return answer.partitionMetadataResponse


async def test_partitioned_metadata_follows_the_creation_rules(tmp_path: Path) -> None:
    off = AutoCreationSettings(allow=False)
    async with gateway(tmp_path, nodes_with(), off) as (binary, http):
        raw, _ = await connected(binary)
        async with raw:
            existing = await partitions(raw, "persistent://public/default/payments", 1, None)
            missing = await partitions(raw, "persistent://public/default/missing", 2, None)
            partitioned = await partitions(raw, "persistent://public/default/orders", 3, False)
        lookup, body = await http_get(http, "/lookup/v2/topic/persistent/public/default/missing")
        exists, _ = await http_get(http, "/lookup/v2/topic/persistent/public/default/payments")
        part, _ = await http_get(
            http,
            "/admin/v2/persistent/public/default/missing/partitions?checkAllowAutoCreation=true",
        )
    assert (existing.partitions, existing.HasField("error")) == (0, False)
    assert missing.error == ServerError.TopicNotFound and missing.request_id == 2
    assert partitioned.partitions == 2
    assert (lookup, body) == (
        404,
        {"reason": "Topic not found persistent://public/default/missing"},
    )
    assert exists != 404
    assert part == 404


async def test_a_partitioned_topic_is_created_by_a_broker(tmp_path: Path) -> None:
    creation = AutoCreationSettings(topic_type=TopicType.PARTITIONED, default_partitions=3)
    peer = BrokerPeer(name="broker", create_partitions=3)
    async with peer, gateway(tmp_path, nodes_with(peer), creation) as (binary, http):
        raw, _ = await connected(binary)
        async with raw:
            created = await partitions(raw, "persistent://public/default/fresh", 9, True)
            existing = await partitions(raw, "persistent://public/default/payments", 10, True)
            # A client that asks for no creation gets TopicNotFound, and no broker is asked.
            refused = await partitions(raw, "persistent://public/default/other", 11, False)
        rest = await http_get(
            http,
            "/admin/v2/persistent/public/default/second/partitions?checkAllowAutoCreation=true",
        )
    assert (created.request_id, created.partitions) == (9, 3)
    assert existing.partitions == 0
    assert refused.error == ServerError.TopicNotFound
    assert rest == (200, {"partitions": 3})
    assert [(c.topic, c.creation) for c in peer.seen if c.type_name == "PARTITIONED_METADATA"] == [
        ("persistent://public/default/fresh", True),
        ("persistent://public/default/second", True),
    ]


@pytest.mark.zookeeper
async def test_a_new_topic_is_listed_through_the_children_watch(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk_admin: KazooClient
) -> None:
    seed(zk_admin, nodes_with())
    source = ZooKeeperSource(
        parse_metadata_url(f"zk:{zookeeper.connect_string}{zk_chroot}"), start_timeout=15
    )
    await source.start()
    service = LookupService(source)
    try:
        first = await service.namespaces.topics_of_namespace("public/default")
        assert list(first.topics) == TOPICS
        zk_admin.create(f"{LEDGERS}/refunds", b"")

        async def listed() -> bool:
            again = await service.namespaces.topics_of_namespace("public/default")
            return "persistent://public/default/refunds" in again.topics

        await eventually(listed)
        reads = source.reads
        await service.namespaces.topics_of_namespace("public/default")
        assert source.reads == reads  # answered from the watched list
        # A namespace nobody created lists nothing and costs no read.
        assert (await service.namespaces.topics_of_namespace("public/ghost")).topics == ()
        assert source.reads == reads
    finally:
        await source.close()
