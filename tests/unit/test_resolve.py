"""resolve() against snapshots built in Pulsar's layout, one rule per test."""

from __future__ import annotations

from typing import Any

import pytest

from lookup.errors import FailureKind, LookupFailure, ServerError
from lookup.resolve import (
    ResolvePolicy,
    ResponseKind,
    UnownedBundleRedirect,
    resolve,
    resolve_partitions,
)
from lookup.selection import ChoiceSource, ListenerChoice
from lookup.topics import TopicName
from lookup.view import ClusterView
from metadata_store.synthetic import broker_id, broker_node, cluster, ownership_node, topic_in_range

FIRST, SECOND, LAST = "0x00000000_0x40000000", "0x40000000_0x80000000", "0xc0000000_0xffffffff"
IN_FIRST = TopicName.parse(topic_in_range(0, 0x40000000))
IN_SECOND = TopicName.parse(topic_in_range(0x40000000, 0x80000000))
IN_LAST = TopicName.parse(topic_in_range(0xC0000000, 0xFFFFFFFF))

EXTERNAL = ListenerChoice("external", ChoiceSource.EXPLICIT)
INTERNAL_SOCKET = ListenerChoice("internal", ChoiceSource.SOCKET, internal=True)
NO_LISTENER = ListenerChoice("internal", ChoiceSource.INTERNAL, internal=True)
LEAST = ResolvePolicy(unowned_redirect=UnownedBundleRedirect.LEAST_LOADED)


def view_of(nodes: dict[str, Any]) -> ClusterView:
    return ClusterView.from_snapshot(nodes)


def failure(topic: TopicName, choice: ListenerChoice, nodes: dict[str, Any]) -> LookupFailure:
    with pytest.raises(LookupFailure) as info:
        resolve(topic, choice, view_of(nodes))
    return info.value


@pytest.mark.parametrize(
    ("choice", "service", "tls", "http", "https"),
    [
        # The external listener has no plain web URL: "" rather than the internal one.
        (EXTERNAL, "pulsar://b2.example.com:6650", "pulsar+ssl://b2.example.com:6651",
         None, "https://b2.example.com:8443"),
        (INTERNAL_SOCKET, "pulsar://10.0.0.2:6650", None, "http://10.0.0.2:8080", None),
        (NO_LISTENER, "pulsar://10.0.0.2:6650", None, "http://10.0.0.2:8080", None),
    ],
)  # fmt: skip
def test_owned_bundle_connects_to_the_owner_for_the_listener(
    choice: ListenerChoice, service: str, tls: str | None, http: str, https: str | None
) -> None:
    answer = resolve(IN_SECOND, choice, view_of(cluster(owned={FIRST: 1, SECOND: 2})))
    assert answer.response is ResponseKind.CONNECT
    assert answer.authoritative is True
    assert answer.broker_id == broker_id(2)
    assert answer.bundle.name == SECOND
    assert (answer.urls.service_url, answer.urls.service_url_tls) == (service, tls)
    assert (answer.urls.http_url, answer.urls.http_url_tls) == (http, https)
    assert answer.listener == choice
    assert answer.urls.service_url_for(tls=True) == tls


def test_owner_listeners_come_from_the_registration_when_the_ownership_node_lacks_them() -> None:
    nodes = cluster()
    nodes[f"/namespace/public/default/{FIRST}"] = ownership_node(3, with_listeners=False)
    answer = resolve(IN_FIRST, EXTERNAL, view_of(nodes))
    assert answer.broker_id == broker_id(3)
    assert answer.urls.service_url == "pulsar://b3.example.com:6650"


def test_owner_is_found_by_broker_id_when_present() -> None:
    nodes = cluster()
    node = ownership_node(3, with_listeners=False) | {"brokerId": broker_id(1)}
    nodes[f"/namespace/public/default/{FIRST}"] = node
    assert resolve(IN_FIRST, EXTERNAL, view_of(nodes)).urls.service_url == (
        "pulsar://b1.example.com:6650"
    )


def test_owner_without_the_listener_fails_like_pulsar() -> None:
    zone_x = ListenerChoice("zone-x", ChoiceSource.SOCKET)
    exc = failure(IN_FIRST, zone_x, cluster(owned={FIRST: 1}))
    assert exc.kind is FailureKind.LISTENER_NOT_FOUND
    assert exc.code is ServerError.ServiceNotReady
    assert exc.message == "the broker do not have zone-x listener"


def test_disabled_bundle_is_being_unloaded() -> None:
    nodes = cluster()
    nodes[f"/namespace/public/default/{FIRST}"] = ownership_node(1, disabled=True)
    exc = failure(IN_FIRST, EXTERNAL, nodes)
    assert exc.code is ServerError.MetadataError and exc.kind.retriable
    assert exc.message == f"Namespace bundle public/default/{FIRST} is being unloaded"


def test_unowned_bundle_redirects_to_the_leader_non_authoritatively() -> None:
    answer = resolve(IN_LAST, EXTERNAL, view_of(cluster(owned={FIRST: 1}, leader=3)))
    assert answer.response is ResponseKind.REDIRECT
    assert answer.authoritative is False
    assert answer.broker_id == broker_id(3)
    assert answer.urls.service_url_tls == "pulsar+ssl://b3.example.com:6651"
    assert answer.bundle.name == LAST


def test_a_2x_leader_node_is_matched_by_service_url() -> None:
    nodes = cluster(leader=None)
    nodes["/loadbalance/leader"] = {"serviceUrl": "http://10.0.0.2:8080"}
    answer = resolve(IN_LAST, NO_LISTENER, view_of(nodes))
    assert (answer.broker_id, answer.urls.service_url) == (broker_id(2), "pulsar://10.0.0.2:6650")


def test_leader_without_the_listener_fails() -> None:
    nodes = cluster(leader=1)
    nodes[f"/loadbalance/brokers/{broker_id(1)}"] = broker_node(1, names=("internal",))
    assert failure(IN_LAST, EXTERNAL, nodes).kind is FailureKind.LISTENER_NOT_FOUND


@pytest.mark.parametrize("leader", [None, 9])  # no leader node; a leader that is not registered
def test_without_a_usable_leader_the_least_loaded_broker_is_chosen(leader: int | None) -> None:
    answer = resolve(IN_LAST, EXTERNAL, view_of(cluster(leader=leader)))
    assert (answer.broker_id, answer.authoritative) == (broker_id(1), True)


def test_least_loaded_policy_picks_lowest_usage_then_id_among_brokers_with_the_listener() -> None:
    nodes = cluster(brokers=0, leader=None)
    nodes["/loadbalance/brokers/b1:8080"] = broker_node(1, usage=0.5)
    nodes["/loadbalance/brokers/b2:8080"] = broker_node(2, usage=0.1, names=("internal",))
    nodes["/loadbalance/brokers/b4:8080"] = broker_node(4, usage=0.3)
    nodes["/loadbalance/brokers/b3:8080"] = broker_node(3, usage=0.3)
    nodes["/loadbalance/leader"] = {"brokerId": "b1:8080"}
    view = view_of(nodes)
    assert resolve(IN_LAST, EXTERNAL, view, LEAST).broker_id == "b3:8080"
    assert resolve(IN_LAST, NO_LISTENER, view, LEAST).broker_id == "b2:8080"
    answer = resolve(IN_LAST, EXTERNAL, view)
    assert (answer.broker_id, answer.authoritative) == ("b1:8080", False)


def test_least_loaded_respects_the_topic_domain() -> None:
    nodes = cluster(brokers=2, leader=None)
    nodes["/loadbalance/brokers/b1:8080"]["nonPersistentTopicsEnabled"] = False
    topic = TopicName.parse(IN_LAST.full.replace("persistent://", "non-persistent://"))
    view = view_of(nodes)
    assert resolve(topic, NO_LISTENER, view, LEAST).broker_id == broker_id(2)
    nodes["/loadbalance/brokers/b2:8080"]["nonPersistentTopicsEnabled"] = False
    with pytest.raises(LookupFailure) as info:
        resolve(topic, NO_LISTENER, view_of(nodes), LEAST)
    assert info.value.kind is FailureKind.NO_BROKER


def test_no_broker_registered() -> None:
    exc = failure(IN_LAST, EXTERNAL, cluster(brokers=0, leader=None))
    assert (exc.kind, exc.code, exc.message) == (
        FailureKind.NO_BROKER,
        ServerError.ServiceNotReady,
        "No broker was available",
    )


def test_owned_bundle_answers_even_with_no_registered_broker() -> None:
    answer = resolve(IN_FIRST, EXTERNAL, view_of(cluster(brokers=0, owned={FIRST: 2})))
    assert answer.response is ResponseKind.CONNECT
    assert answer.broker_id is None
    assert answer.urls.service_url == "pulsar://b2.example.com:6650"


def test_missing_namespace() -> None:
    topic = TopicName.parse("persistent://nobody/here/t")
    exc = failure(topic, EXTERNAL, cluster())
    assert exc.kind is FailureKind.NAMESPACE_NOT_FOUND
    assert exc.code is ServerError.MetadataError
    assert exc.message == "Policies not found for nobody/here namespace"
    with pytest.raises(LookupFailure, match="Policies not found"):
        resolve_partitions(topic, view_of(cluster()))


def test_extensible_load_manager_only_redirects_to_a_live_broker() -> None:
    nodes = cluster(owned={FIRST: 1})
    for i in (1, 2, 3):
        nodes[f"/loadbalance/brokers/{broker_id(i)}"]["loadManagerClassName"] = (
            "org.apache.pulsar.broker.loadbalance.extensions.ExtensibleLoadManagerImpl"
        )
    answer = resolve(IN_FIRST, EXTERNAL, view_of(nodes))
    assert answer.response is ResponseKind.REDIRECT
    assert answer.authoritative is False
    assert answer.broker_id == broker_id(1)  # usage 0.1, the least loaded


def test_split_bundle_from_local_policies() -> None:
    nodes = cluster(owned={"0x00000000_0x20000000": 1, "0x20000000_0x40000000": 2})
    nodes["/admin/local-policies/public/default"] = {
        "bundles": {
            "boundaries": ["0x00000000", "0x20000000", "0x40000000", "0x80000000",
                           "0xc0000000", "0xffffffff"],
            "numBundles": 5,
        }
    }  # fmt: skip
    low = TopicName.parse(topic_in_range(0, 0x20000000))
    high = TopicName.parse(topic_in_range(0x20000000, 0x40000000))
    view = view_of(nodes)
    assert resolve(low, EXTERNAL, view).broker_id == broker_id(1)
    assert resolve(high, EXTERNAL, view).broker_id == broker_id(2)
    assert resolve(high, EXTERNAL, view).bundle.name == "0x20000000_0x40000000"


def test_default_bundle_count_applies_without_bundle_policy() -> None:
    nodes = cluster(boundaries=None, owned={"0x00000000_0x80000000": 2})
    topic = TopicName.parse(topic_in_range(0, 0x80000000))
    answer = resolve(topic, EXTERNAL, view_of(nodes), ResolvePolicy(default_bundles=2))
    assert (answer.bundle.name, answer.broker_id) == ("0x00000000_0x80000000", broker_id(2))
    answer = resolve(topic, EXTERNAL, view_of(nodes))  # 4 bundles: not the owned one
    assert answer.response is ResponseKind.REDIRECT


def test_partitions() -> None:
    nodes = cluster()
    nodes["/admin/partitioned-topics/public/default/persistent/orders"] = {"partitions": 4}
    nodes["/admin/partitioned-topics/public/default/non-persistent/a+b"] = {"partitions": 2}
    view = view_of(nodes)
    assert resolve_partitions(TopicName.parse("orders"), view) == 4
    assert resolve_partitions(TopicName.parse("non-persistent://public/default/a b"), view) == 2
    assert resolve_partitions(TopicName.parse("orders-partition-1"), view) == 0
    assert resolve_partitions(TopicName.parse("plain"), view) == 0


def test_partitions_of_a_partitioned_topic_hash_to_their_own_bundles() -> None:
    owned = {FIRST: 1, SECOND: 2, "0x80000000_0xc0000000": 3}
    view = view_of(cluster(owned=owned))
    base = TopicName.parse("persistent://public/default/orders")
    bundles = {resolve(base.partition(i), EXTERNAL, view).bundle.name for i in range(16)}
    assert len(bundles) > 1
