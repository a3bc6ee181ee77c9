"""Answers compared with the broker's, through the gateway's real sockets (issue 27).

Each test names the Pulsar source (master) its expectation comes from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import BaseCommand, ServerError
from pulsar_lookup_gateway.lookup.auto_creation import AutoCreationSettings
from pulsar_lookup_gateway.metadata_store.synthetic import broker_node
from tests.broker_peer import BrokerPeer
from tests.integration.http_api.listing_gateway import (
    LEDGERS,
    connected,
    gateway,
    http_get,
    nodes_with,
)

CREATION_OFF = AutoCreationSettings(allow=False)
EXTENSIBLE = "org.apache.pulsar.broker.loadbalance.extensions.ExtensibleLoadManagerImpl"


def with_names(nodes: dict[str, Any], *names: str) -> dict[str, Any]:
    for name in names:
        nodes[f"{LEDGERS}/{name}"] = {}
    return nodes


async def test_patterns_filter_with_the_brokers_meaning(tmp_path: Path) -> None:
    """ServerCnx.internalHandleGetTopicsOfNamespace with TopicList.filterTopics and
    TopicsPatternFactory (RE2J, then the JDK): `\\w` is ASCII (RE2J), `\\p{Lower}` is the
    JDK's ASCII class, an invalid pattern or scheme is MetadataError with the exception."""
    nodes = with_names(nodes_with(), "caf%C3%A9", "cafe", "Cafe")
    async with gateway(tmp_path, nodes) as (binary, _):
        raw, _ = await connected(binary)
        async with raw:
            answers = []
            for request_id, pattern in enumerate(
                [
                    "public/default/caf\\w",
                    "public/default/\\p{Lower}+",
                    "public/default/(caf",
                    "http://public/default/.*",
                ],
                start=1,
            ):
                raw.send(
                    codec.get_topics_of_namespace(
                        "public/default", request_id, topics_pattern=pattern
                    )
                )
                answers.append(await raw.expect())
    word, lower, unclosed, scheme = answers
    assert word.getTopicsOfNamespaceResponse.filtered
    assert list(word.getTopicsOfNamespaceResponse.topics) == ["persistent://public/default/cafe"]
    assert lower.getTopicsOfNamespaceResponse.filtered
    assert list(lower.getTopicsOfNamespaceResponse.topics) == [
        "persistent://public/default/cafe",
        "persistent://public/default/payments",
    ]
    assert unclosed.type == BaseCommand.ERROR and unclosed.error.request_id == 3
    assert unclosed.error.error == ServerError.MetadataError
    assert unclosed.error.message == (
        "java.util.regex.PatternSyntaxException: Unclosed group near index 19"
    )
    assert scheme.type == BaseCommand.ERROR and scheme.error.error == ServerError.MetadataError
    assert scheme.error.message == (
        "java.lang.IllegalArgumentException: Does not support topic domain: http"
    )


def registered(nodes: dict[str, Any], i: int, peer: BrokerPeer, *, extensible: bool = False) -> str:
    """`peer` registered as broker `b<i>:8080` (its internal listener: the peer); its id."""
    broker_id = f"b{i}:8080"
    node = broker_node(i)
    node["advertisedListeners"]["internal"]["brokerServiceUrl"] = peer.url
    node["pulsarServiceUrl"] = peer.url
    if extensible:
        node["loadManagerClassName"] = EXTENSIBLE
    nodes[f"/loadbalance/brokers/{broker_id}"] = node
    return broker_id


def owned_by(nodes: dict[str, Any], bundle: str, broker_id: str) -> None:
    nodes[f"/namespace/public/default/{bundle}"] = {"nativeUrl": "-", "brokerId": broker_id}


async def test_rest_topic_list_asks_the_owners_of_the_namespaces_bundles(
    tmp_path: Path,
) -> None:
    """Namespaces.getTopics: NamespacesBase.internalGetListOfTopics joins the persistent topics
    with internalGetNonPersistentTopics, which asks each bundle's owner (an unowned bundle
    contributes none); includeSystemTopic=true keeps system topics, left out by default. A
    live broker that owns none of the namespace's bundles is not asked, and an owner of two
    bundles is asked once."""
    async with (
        BrokerPeer(name="b1") as first,
        BrokerPeer(name="b2") as second,
        BrokerPeer(name="b3") as idle,
    ):
        first.topics["public/default"] = ["non-persistent://public/default/np-1"]
        second.topics["public/default"] = ["non-persistent://public/default/np-2"]
        idle.topics["public/default"] = ["non-persistent://public/default/np-3"]
        nodes = nodes_with()
        for i, peer in enumerate((first, second, idle), start=1):
            registered(nodes, i, peer)
        owned_by(nodes, "0x00000000_0x40000000", "b1:8080")
        owned_by(nodes, "0x40000000_0x80000000", "b2:8080")
        owned_by(nodes, "0x80000000_0xc0000000", "b1:8080")  # (0xc0000000_0xffffffff: nobody)
        async with gateway(tmp_path, nodes) as (_, http):
            listed = await http_get(
                http, "/admin/v2/namespaces/public/default/topics?mode=NON_PERSISTENT"
            )
            every = await http_get(http, "/admin/v2/namespaces/public/default/topics?mode=ALL")
            system = await http_get(
                http, "/admin/v2/namespaces/public/default/topics?includeSystemTopic=true"
            )
            plain = await http_get(http, "/admin/v2/namespaces/public/default/topics")
            ghost = await http_get(http, "/admin/v2/namespaces/public/ghost/topics?mode=ALL")
    both = ["non-persistent://public/default/np-1", "non-persistent://public/default/np-2"]
    assert listed == (200, both)
    assert every[0] == 200 and every[1][-2:] == both
    assert "persistent://public/default/payments" in every[1]
    assert "persistent://public/default/__change_events" in system[1]
    assert "persistent://public/default/__change_events" not in plain[1]
    assert ghost[0] == 404
    assert first.topics_seen("GET_TOPICS_OF_NAMESPACE") == ["public/default"] * 2
    assert second.topics_seen("GET_TOPICS_OF_NAMESPACE") == ["public/default"] * 2
    assert idle.topics_seen("GET_TOPICS_OF_NAMESPACE") == []


async def test_rest_topic_list_asks_every_broker_where_the_owners_are_unknown(
    tmp_path: Path,
) -> None:
    """Under the extensible load manager without the metadata-store table view, ownership
    is in a system topic the gateway cannot read: every live broker is asked; with the table
    view, the broker that has each bundle's topics loaded (Owned: dstBroker, Splitting:
    sourceBroker; Free: nobody)."""
    async with BrokerPeer(name="b1") as first, BrokerPeer(name="b2") as second:
        first.topics["public/default"] = ["non-persistent://public/default/np-1"]
        second.topics["public/default"] = ["non-persistent://public/default/np-2"]
        nodes = nodes_with()
        for i, peer in enumerate((first, second), start=1):
            registered(nodes, i, peer, extensible=True)
        path = "/admin/v2/namespaces/public/default/topics?mode=NON_PERSISTENT"
        async with gateway(tmp_path / "system-topic", nodes) as (_, http):
            unknown = await http_get(http, path)
        table = "/service_unit_state/public/default"
        nodes[f"{table}/0x00000000_0x40000000"] = {"state": "Owned", "dstBroker": "b2:8080"}
        nodes[f"{table}/0x40000000_0x80000000"] = {
            "state": "Splitting",
            "sourceBroker": "b2:8080",
            "dstBroker": "b1:8080",
        }
        nodes[f"{table}/0x80000000_0xc0000000"] = {"state": "Free", "dstBroker": "b1:8080"}
        async with gateway(tmp_path / "table-view", nodes) as (_, http):
            viewed = await http_get(http, path)
    assert unknown == (
        200,
        ["non-persistent://public/default/np-1", "non-persistent://public/default/np-2"],
    )
    assert viewed == (200, ["non-persistent://public/default/np-2"])
    assert first.topics_seen("GET_TOPICS_OF_NAMESPACE") == ["public/default"]
    assert second.topics_seen("GET_TOPICS_OF_NAMESPACE") == ["public/default"] * 2


async def test_heartbeat_namespace_topics_may_be_created_with_creation_off(
    tmp_path: Path,
) -> None:
    """BrokerService.isAllowAutoTopicCreationAsync: a system topic may always be created, and
    BrokerService.isSystemTopic counts every topic of NamespaceService.isSystemServiceNamespace
    (a broker's heartbeat namespace pulsar/<host:port>); other topics get TopicNotFound."""
    nodes = nodes_with()
    nodes["/admin/policies/pulsar/b1:8080"] = {}
    async with gateway(tmp_path, nodes, CREATION_OFF) as (binary, _):
        raw, _ = await connected(binary)
        async with raw:
            raw.send(codec.partitioned_metadata("persistent://pulsar/b1:8080/healthcheck", 1))
            heartbeat = (await raw.expect()).partitionMetadataResponse
            raw.send(codec.partitioned_metadata("persistent://public/default/nothing", 2))
            user = (await raw.expect()).partitionMetadataResponse
    assert not heartbeat.HasField("error") and heartbeat.partitions == 0
    assert user.error == ServerError.TopicNotFound
