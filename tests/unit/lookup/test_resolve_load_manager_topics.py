"""resolve() under the extensible load manager without asking a broker (issue 40): its own
topics go to the channel owner, a heartbeat namespace to the broker it names, and the brokers'
loadManagerServiceUnitStateTableViewClassName decides whether /service_unit_state is read."""

from __future__ import annotations

from typing import Any

import pytest

from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure
from pulsar_lookup_gateway.lookup.resolve import ResolvePolicy, ResponseKind, resolve
from pulsar_lookup_gateway.lookup.selection import ChoiceSource, ListenerChoice
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.metadata_store.synthetic import cluster, topic_in_range

EXTERNAL = ListenerChoice("external", ChoiceSource.EXPLICIT)
EXTENSIBLE = "org.apache.pulsar.broker.loadbalance.extensions.ExtensibleLoadManagerImpl"
IN_FIRST = TopicName.parse(topic_in_range(0, 0x40000000))
FIRST = "0x00000000_0x40000000"


def extensible(leader: int | None = 3) -> dict[str, Any]:
    nodes = cluster(leader=None)
    for path, node in nodes.items():
        if path.startswith("/loadbalance/brokers/"):
            node["loadManagerClassName"] = EXTENSIBLE
    nodes["/admin/policies/pulsar/system"] = {}
    nodes["/admin/policies/pulsar/b2:8080"] = {}
    if leader is not None:
        nodes["/loadbalance/extension/leader"] = {"brokerId": f"b{leader}:8080"}
    return nodes


@pytest.mark.parametrize(
    ("topic", "owner"),
    [
        ("persistent://pulsar/system/loadbalancer-service-unit-state", "b3:8080"),
        ("non-persistent://pulsar/system/loadbalancer-broker-load-data", "b3:8080"),
        ("non-persistent://pulsar/system/loadbalancer-top-bundles-load-data", "b3:8080"),
        ("persistent://pulsar/b2:8080/healthcheck", "b2:8080"),
    ],
)
def test_named_without_the_table_view(topic: str, owner: str) -> None:
    answer = resolve(TopicName.parse(topic), EXTERNAL, ClusterView.from_snapshot(extensible()))
    assert (answer.response, answer.authoritative, answer.broker_id) == (
        ResponseKind.CONNECT,
        True,
        owner,
    )
    assert answer.urls.service_url == f"pulsar://{owner.split(':')[0]}.example.com:6650"


def test_another_system_topic_is_not_the_channel_owners() -> None:
    topic = TopicName.parse("persistent://pulsar/system/something-else")
    answer = resolve(topic, EXTERNAL, ClusterView.from_snapshot(extensible()))
    assert answer.response is ResponseKind.REDIRECT and answer.needs_broker


def test_no_channel_owner_is_retriable() -> None:
    topic = TopicName.parse("persistent://pulsar/system/loadbalancer-service-unit-state")
    with pytest.raises(LookupFailure) as info:
        resolve(topic, EXTERNAL, ClusterView.from_snapshot(extensible(leader=None)))
    assert info.value.kind is FailureKind.NO_BROKER


@pytest.mark.parametrize(
    ("table_view", "response"),
    [(None, ResponseKind.CONNECT), (True, ResponseKind.CONNECT), (False, ResponseKind.REDIRECT)],
)
def test_the_table_view_key_decides_whether_the_tree_is_read(
    table_view: bool | None, response: ResponseKind
) -> None:
    nodes = extensible()
    nodes[f"/service_unit_state/public/default/{FIRST}"] = {
        "state": "Owned",
        "dstBroker": "b1:8080",
    }
    view = ClusterView.from_snapshot(nodes)
    answer = resolve(IN_FIRST, EXTERNAL, view, ResolvePolicy(table_view=table_view))
    assert answer.response is response
    assert answer.needs_broker is (response is ResponseKind.REDIRECT)
