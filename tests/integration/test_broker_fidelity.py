"""Answers compared with the broker's, through the gateway's real sockets (issue 27).

Each test names the Pulsar source (master) its expectation comes from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import BaseCommand, ServerError
from pulsar_lookup_gateway.lookup.auto_creation import AutoCreationSettings
from tests.broker_peer import BrokerPeer
from tests.integration.test_topic_listing import (
    LEDGERS,
    connected,
    gateway,
    http_get,
    nodes_with,
)

CREATION_OFF = AutoCreationSettings(allow=False)


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


async def test_rest_topic_list_gathers_every_brokers_non_persistent_topics(
    tmp_path: Path,
) -> None:
    """Namespaces.getTopics: NamespacesBase.internalGetListOfTopics joins the persistent topics
    with internalGetNonPersistentTopics, which asks every bundle's owner (not one broker);
    includeSystemTopic=true keeps system topics, which are left out by default."""
    async with BrokerPeer(name="b1") as first, BrokerPeer(name="b2") as second:
        first.topics["public/default"] = ["non-persistent://public/default/np-1"]
        second.topics["public/default"] = ["non-persistent://public/default/np-2"]
        nodes = nodes_with(first)
        two = dict(nodes["/loadbalance/brokers/b1:8080"])
        two["advertisedListeners"] = {"internal": {"brokerServiceUrl": second.url}}
        two["pulsarServiceUrl"] = second.url
        two["webServiceUrl"] = "http://b2:8080"
        nodes["/loadbalance/brokers/b2:8080"] = two
        async with gateway(tmp_path, nodes) as (_, http):
            listed = []
            for _ in range(2):  # the same whole answer each time, not one broker's in turn
                listed.append(
                    await http_get(
                        http, "/admin/v2/namespaces/public/default/topics?mode=NON_PERSISTENT"
                    )
                )
            every = await http_get(http, "/admin/v2/namespaces/public/default/topics?mode=ALL")
            system = await http_get(
                http, "/admin/v2/namespaces/public/default/topics?includeSystemTopic=true"
            )
            plain = await http_get(http, "/admin/v2/namespaces/public/default/topics")
            ghost = await http_get(http, "/admin/v2/namespaces/public/ghost/topics?mode=ALL")
    both = ["non-persistent://public/default/np-1", "non-persistent://public/default/np-2"]
    assert listed == [(200, both), (200, both)]
    assert every[0] == 200 and every[1][-2:] == both
    assert "persistent://public/default/payments" in every[1]
    assert "persistent://public/default/__change_events" in system[1]
    assert "persistent://public/default/__change_events" not in plain[1]
    assert ghost[0] == 404


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
