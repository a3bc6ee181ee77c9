"""resolve() against snapshots built in Pulsar's layout, one rule per test."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure, ServerError
from pulsar_lookup_gateway.lookup.resolve import (
    ResolvePolicy,
    ResponseKind,
    resolve,
    resolve_partitions,
)
from pulsar_lookup_gateway.lookup.selection import ChoiceSource, ListenerChoice
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.metadata_store.synthetic import (
    broker_id,
    broker_node,
    cluster,
    ownership_node,
    topic_in_range,
)

FIRST, SECOND, LAST = "0x00000000_0x40000000", "0x40000000_0x80000000", "0xc0000000_0xffffffff"
IN_FIRST = TopicName.parse(topic_in_range(0, 0x40000000))
IN_SECOND = TopicName.parse(topic_in_range(0x40000000, 0x80000000))
IN_LAST = TopicName.parse(topic_in_range(0xC0000000, 0xFFFFFFFF))

EXTERNAL = ListenerChoice("external", ChoiceSource.EXPLICIT)
INTERNAL_SOCKET = ListenerChoice("internal", ChoiceSource.SOCKET, internal=True)
NO_LISTENER = ListenerChoice("internal", ChoiceSource.INTERNAL, internal=True)
EXTENSIBLE = "org.apache.pulsar.broker.loadbalance.extensions.ExtensibleLoadManagerImpl"


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
def test_without_a_usable_leader_a_broker_is_chosen_by_the_bundle_hash(
    leader: int | None,
) -> None:
    answer = resolve(IN_LAST, EXTERNAL, view_of(cluster(leader=leader)))
    # Never authoritative: only a load manager may place a bundle.
    assert (answer.response, answer.authoritative) == (ResponseKind.REDIRECT, False)
    assert answer.broker_id in {broker_id(i) for i in (1, 2, 3)}


def test_unowned_bundles_spread_over_the_brokers_by_bundle() -> None:
    """Without a leader, each bundle goes to one broker (the same for all its topics and for
    every gateway), and the bundles of a namespace spread over the brokers."""
    boundaries = [f"0x{i * 2**26:08x}" for i in range(64)] + ["0xffffffff"]
    view = view_of(cluster(brokers=4, leader=None, boundaries=boundaries))
    picked: dict[str, set[str | None]] = {}
    for n in range(2000):
        answer = resolve(TopicName.parse(f"t{n}"), EXTERNAL, view)
        assert answer.authoritative is False
        picked.setdefault(answer.bundle.name, set()).add(answer.broker_id)
    assert all(len(brokers) == 1 for brokers in picked.values())
    counts = Counter(next(iter(brokers)) for brokers in picked.values())
    assert set(counts) == {broker_id(i) for i in (1, 2, 3, 4)}
    assert min(counts.values()) >= 4  # 64 bundles over 4 brokers: none is left out


def test_a_broker_leaving_moves_only_its_own_bundles() -> None:
    boundaries = [f"0x{i * 2**26:08x}" for i in range(64)] + ["0xffffffff"]
    nodes = cluster(brokers=4, leader=None, boundaries=boundaries)
    before = {n: resolve(TopicName.parse(f"t{n}"), EXTERNAL, view_of(nodes)) for n in range(500)}
    del nodes[f"/loadbalance/brokers/{broker_id(4)}"]
    after = view_of(nodes)
    for n, answer in before.items():
        if answer.broker_id != broker_id(4):
            assert resolve(TopicName.parse(f"t{n}"), EXTERNAL, after).broker_id == answer.broker_id


def test_the_bundle_hash_skips_brokers_without_the_listener_or_the_domain() -> None:
    nodes = cluster(brokers=0, leader=None)
    nodes["/loadbalance/brokers/b1:8080"] = broker_node(1, names=("internal",))
    nodes["/loadbalance/brokers/b2:8080"] = broker_node(2)
    nodes["/loadbalance/brokers/b3:8080"] = broker_node(3) | {"nonPersistentTopicsEnabled": False}
    view = view_of(nodes)
    for n in range(50):
        topic = TopicName.parse(f"non-persistent://public/default/t{n}")
        assert resolve(topic, EXTERNAL, view).broker_id == "b2:8080"
    only_internal = cluster(brokers=0, leader=None)
    only_internal["/loadbalance/brokers/b1:8080"] = broker_node(1, names=("internal",))
    assert failure(IN_LAST, EXTERNAL, only_internal).kind is FailureKind.LISTENER_NOT_FOUND
    for i in (1, 2):
        nodes[f"/loadbalance/brokers/b{i}:8080"]["nonPersistentTopicsEnabled"] = False
    topic = TopicName.parse("non-persistent://public/default/t0")
    assert failure(topic, NO_LISTENER, nodes).kind is FailureKind.NO_BROKER


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
    """Master: TopicLookupBase.lookupTopicAsync answers the 404 of
    PulsarWebResource.checkLocalOrGetPeerReplicationCluster ("Namespace not found") with
    TopicNotFound (older brokers: MetadataError "Policies not found for ... namespace")."""
    topic = TopicName.parse("persistent://nobody/here/t")
    exc = failure(topic, EXTERNAL, cluster())
    assert exc.kind is FailureKind.NAMESPACE_NOT_FOUND
    assert exc.code is ServerError.TopicNotFound
    assert exc.message == "Namespace not found"
    assert exc.detail == "no policies for nobody/here"
    with pytest.raises(LookupFailure, match="Namespace not found"):
        resolve_partitions(topic, view_of(cluster()))


def extensible(nodes: dict[str, Any]) -> dict[str, Any]:
    for path, node in nodes.items():
        if path.startswith("/loadbalance/brokers/"):
            node["loadManagerClassName"] = EXTENSIBLE
    return nodes


def test_extensible_load_manager_without_table_view_spreads_redirects() -> None:
    # Ownership is in a system topic: /namespace nodes and the modular leader are not used.
    nodes = extensible(cluster(owned={FIRST: 1}, leader=1))
    boundaries = [f"0x{i * 2**26:08x}" for i in range(64)] + ["0xffffffff"]
    nodes["/admin/policies/public/default"]["bundles"] = {"boundaries": boundaries}
    view = view_of(nodes)
    targets = set()
    for n in range(300):
        answer = resolve(TopicName.parse(f"t{n}"), EXTERNAL, view)
        assert (answer.response, answer.authoritative) == (ResponseKind.REDIRECT, False)
        targets.add(answer.broker_id)
    assert targets == {broker_id(i) for i in (1, 2, 3)}  # not always the lowest broker id


def unit_state(state: str, dst: int | None = None, src: int | None = None) -> dict[str, Any]:
    node: dict[str, Any] = {"state": state, "force": False, "timestamp": 1, "versionId": 3}
    if dst is not None:
        node["dstBroker"] = broker_id(dst)
    if src is not None:
        node["sourceBroker"] = broker_id(src)
    return node


@pytest.mark.parametrize(
    ("state", "response", "broker"),
    [
        (unit_state("Owned", dst=2), ResponseKind.CONNECT, 2),
        (unit_state("Splitting", src=3), ResponseKind.CONNECT, 3),  # the source still serves
        (unit_state("Assigning", dst=2), ResponseKind.CONNECT, 2),  # the target waits for it
        (unit_state("Releasing", dst=3, src=2), ResponseKind.CONNECT, 3),  # a transfer
        (unit_state("Releasing", src=2), ResponseKind.REDIRECT, None),  # unloaded: unowned
        (unit_state("Free", src=2), ResponseKind.REDIRECT, None),
        (unit_state("Init"), ResponseKind.REDIRECT, None),
        (None, ResponseKind.REDIRECT, None),
    ],
)
def test_extensible_table_view_answers_as_its_brokers_do(
    state: dict[str, Any] | None, response: ResponseKind, broker: int | None
) -> None:
    nodes = extensible(cluster(owned={FIRST: 1}))  # the /namespace node is not used
    nodes["/service_unit_state/public/default/0x40000000_0x80000000"] = unit_state("Owned", 1)
    if state is not None:
        nodes[f"/service_unit_state/public/default/{FIRST}"] = state
    answer = resolve(IN_FIRST, EXTERNAL, view_of(nodes))
    assert answer.response is response
    if broker is not None:
        assert (answer.broker_id, answer.authoritative) == (broker_id(broker), True)
        assert answer.urls.service_url == f"pulsar://b{broker}.example.com:6650"
    else:
        assert answer.authoritative is False


def test_extensible_table_view_failures() -> None:
    nodes = extensible(cluster())
    path = f"/service_unit_state/public/default/{FIRST}"
    nodes[path] = unit_state("Deleted", src=1)
    exc = failure(IN_FIRST, EXTERNAL, nodes)
    assert (exc.kind, exc.code) == (FailureKind.BUNDLE_DELETED, ServerError.ServiceNotReady)
    assert exc.message == f"public/default/{FIRST} is deleted." and exc.kind.retriable
    nodes[path] = unit_state("Owned", dst=7)  # an owner that is not registered (any more)
    exc = failure(IN_FIRST, EXTERNAL, nodes)
    assert (exc.kind, exc.code) == (FailureKind.OWNER_INACTIVE, ServerError.MetadataError)
    assert exc.kind.retriable
    nodes[path] = unit_state("Owned", dst=1)
    zone_x = ListenerChoice("zone-x", ChoiceSource.EXPLICIT)
    assert failure(IN_FIRST, zone_x, nodes).message == "the broker do not have zone-x listener"
    nodes[path] = {"state": "Owned"}  # no dstBroker
    assert failure(IN_FIRST, EXTERNAL, nodes).kind is FailureKind.METADATA_MALFORMED
    nodes[path] = {"state": "Exploded", "dstBroker": broker_id(1)}
    assert failure(IN_FIRST, EXTERNAL, nodes).kind is FailureKind.METADATA_MALFORMED


def test_modular_brokers_ignore_service_unit_state() -> None:
    nodes = cluster(owned={FIRST: 1})
    nodes[f"/service_unit_state/public/default/{FIRST}"] = unit_state("Owned", dst=2)
    assert resolve(IN_FIRST, EXTERNAL, view_of(nodes)).broker_id == broker_id(1)


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


def test_a_namespace_without_bundle_data_has_one_full_bundle() -> None:
    # Pulsar's NamespaceBundleFactory: no bundle data in the policies (nor local policies) is
    # one bundle over the whole hash range, whatever defaultNumberOfNamespaceBundles says.
    nodes = cluster(boundaries=None, owned={"0x00000000_0xffffffff": 2})
    for topic in (IN_FIRST, IN_LAST):
        answer = resolve(topic, EXTERNAL, view_of(nodes))
        assert (answer.bundle.name, answer.broker_id) == ("0x00000000_0xffffffff", broker_id(2))


# -- geo-replication (clusterName) --------------------------------------------------------------

LOCAL = ResolvePolicy(cluster_name="us-west")
PEER_URLS = {
    "serviceUrl": "http://east.example.com:8080",
    "serviceUrlTls": "https://east.example.com:8443",
    "brokerServiceUrl": "pulsar://east.example.com:6650",
    "brokerServiceUrlTls": "pulsar+ssl://east.example.com:6651",
}


def geo(replication: list[str], peers: list[str] | None, **policies: Any) -> dict[str, Any]:
    nodes = cluster(owned={FIRST: 1})
    nodes["/admin/policies/public/default"] |= {"replication_clusters": replication, **policies}
    nodes["/admin/clusters/us-west"] = {"serviceUrl": "http://west:8080"}
    if peers is not None:
        nodes["/admin/clusters/us-west"]["peerClusterNames"] = peers
    nodes["/admin/clusters/us-east"] = PEER_URLS
    nodes["/admin/clusters/eu"] = {"brokerServiceUrl": "pulsar://eu.example.com:6650"}
    return nodes


def geo_failure(nodes: dict[str, Any], policy: ResolvePolicy = LOCAL) -> LookupFailure:
    with pytest.raises(LookupFailure) as info:
        resolve(IN_FIRST, EXTERNAL, view_of(nodes), policy)
    return info.value


def test_a_namespace_of_the_local_cluster_is_looked_up_here() -> None:
    for replication, allowed in ((["us-west", "us-east"], []), (["us-east"], ["us-west"])):
        nodes = geo(replication, ["us-east"], allowed_clusters=allowed)
        answer = resolve(IN_FIRST, EXTERNAL, view_of(nodes), LOCAL)
        assert (answer.response, answer.broker_id) == (ResponseKind.CONNECT, broker_id(1))


def test_a_namespace_of_a_peer_cluster_is_redirected_there_authoritatively() -> None:
    nodes = geo(["eu", "us-east"], ["us-central", "us-east", "eu"])  # the first peer listed
    answer = resolve(IN_FIRST, EXTERNAL, view_of(nodes), LOCAL)
    assert (answer.response, answer.authoritative) == (ResponseKind.REDIRECT, True)
    assert (answer.peer_cluster, answer.broker_id) == ("us-east", None)
    assert answer.urls.service_url == "pulsar://east.example.com:6650"
    assert answer.urls.service_url_tls == "pulsar+ssl://east.example.com:6651"
    assert answer.urls.http_url_tls == "https://east.example.com:8443"
    assert resolve_partitions(IN_FIRST, view_of(nodes), LOCAL) == 0  # metadata is shared


def test_geo_failures_as_the_broker_words_them() -> None:
    exc = geo_failure(geo(["us-east"], None))  # the local cluster has no peers
    assert (exc.kind, exc.code) == (FailureKind.NOT_IN_CLUSTER, ServerError.MetadataError)
    assert exc.message == (
        "Namespace missing local cluster name in clusters list: local_cluster=us-west "
        "ns=public/default clusters=[us-east]"
    )
    with pytest.raises(LookupFailure, match="missing local cluster"):
        resolve_partitions(IN_FIRST, view_of(geo(["us-east"], ["eu"])), LOCAL)
    exc = geo_failure(geo([], ["us-east"]))
    assert exc.message == (
        "Namespace does not have any clusters configured : local_cluster=us-west ns=public/default"
    )
    exc = geo_failure(geo(["nowhere"], ["nowhere"]))
    assert (exc.kind, exc.code) == (FailureKind.PEER_CLUSTER_MISSING, ServerError.TopicNotFound)
    assert exc.message == "Peer cluster nowhere data not found"
    nodes = geo(["us-east"], ["us-east"])
    nodes["/admin/clusters/us-east"] = {"serviceUrl": "http://east:8080"}
    exc = geo_failure(nodes)
    assert exc.message == "Redirected cluster's brokerService url is not configured"
    # Without clusterName none of this is checked.
    assert resolve(IN_FIRST, EXTERNAL, view_of(geo(["us-east"], None))).broker_id == "b1:8080"


def test_a_deleted_namespace_fails_as_not_found() -> None:
    nodes = geo(["us-west"], None, deleted=True)
    for policy in (LOCAL, ResolvePolicy()):  # needs no cluster name
        exc = geo_failure(nodes, policy)
        assert (exc.kind, exc.code, exc.message) == (
            FailureKind.NAMESPACE_DELETED,
            ServerError.TopicNotFound,
            "Namespace is deleted",
        )
        with pytest.raises(LookupFailure, match="Namespace is deleted"):
            resolve_partitions(IN_FIRST, view_of(nodes), policy)
    # The broker still serves the topics it needs to clean a namespace up.
    events = TopicName.parse("persistent://public/default/__change_events")
    assert resolve(events, EXTERNAL, view_of(nodes), LOCAL).response is not None


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
