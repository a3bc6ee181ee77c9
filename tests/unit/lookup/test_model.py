from __future__ import annotations

from typing import Any

import pytest

from pulsar_lookup_gateway.lookup.errors import FailureKind, MalformedNode, NodeNotLoaded
from pulsar_lookup_gateway.lookup.model import (
    decode_json,
    parse_broker,
    parse_leader,
    parse_ownership,
    parse_partitioned,
    parse_policies,
)
from pulsar_lookup_gateway.lookup.topics import NamespaceName, TopicName
from pulsar_lookup_gateway.lookup.view import ClusterView, SplitView
from pulsar_lookup_gateway.metadata_store.synthetic import broker_node

PATH = "/loadbalance/brokers/b1:8080"


def test_broker_registration_parses_and_ignores_unknown_keys() -> None:
    node = broker_node(1, usage=0.25) | {"someFutureKey": {"x": 1}, "lastUpdate": 17}
    data = parse_broker(PATH, node)
    assert data.web_service_url == "http://10.0.0.1:8080"
    assert data.advertised_listeners["external"].broker_service_url_tls == (
        "pulsar+ssl://b1.example.com:6651"
    )
    assert data.advertised_listeners["internal"].broker_service_url_tls is None
    assert data.max_resource_usage == 0.25
    assert data.last_update == 17
    assert not data.uses_extensible_load_manager


def test_optional_keys_are_optional() -> None:
    assert parse_broker(PATH, {}).advertised_listeners == {}
    assert parse_ownership("/namespace/a/b/x", {}).disabled is False
    assert parse_leader("/loadbalance/leader", {"serviceUrl": "http://x:8080"}).broker_id is None
    assert parse_policies("/admin/policies/a/b", {"auth_policies": {}}).bundles is None


@pytest.mark.parametrize(
    ("parser", "content", "fragment"),
    [
        (parse_broker, {"webServiceUrl": 8080}, "webServiceUrl"),
        (parse_broker, {"advertisedListeners": {"x": {"brokerServiceUrl": 1}}}, "brokerServiceUrl"),
        (parse_broker, {"maxResourceUsage": "high"}, "maxResourceUsage"),
        (parse_broker, ["not", "an", "object"], "expected a JSON object"),
        (parse_ownership, {"disabled": "no"}, "disabled"),
        (parse_leader, {"brokerId": 5}, "brokerId"),
        (parse_policies, {"bundles": {"boundaries": "0x0"}}, "bundles.boundaries"),
        (parse_policies, {"bundles": {"boundaries": ["0x00000000", "0x10"]}}, "end at"),
        (parse_partitioned, {"partitions": "4"}, "partitions"),
        (parse_partitioned, {"partitions": -1}, "partitions"),
    ],
)
def test_wrong_types_name_the_path(parser: Any, content: Any, fragment: str) -> None:
    with pytest.raises(MalformedNode) as info:
        parser("/some/znode", content)
    assert info.value.path == "/some/znode"
    assert "/some/znode" in info.value.message
    assert fragment in info.value.message
    assert info.value.kind is FailureKind.METADATA_MALFORMED


def test_decode_json() -> None:
    assert decode_json("/p", b"") is None
    assert decode_json("/p", b'{"a": 1}') == {"a": 1}
    with pytest.raises(MalformedNode, match="/p: not JSON"):
        decode_json("/p", b"\xff{")


def test_partial_view_asks_for_what_it_lacks() -> None:
    view = ClusterView(complete=False)
    ns = NamespaceName("a", "b")
    # Existence comes from the parents' children lists (read and watched once per parent),
    # so a namespace nobody created costs no read of its own.
    asked = []
    for _ in range(4):
        try:
            view.policies(ns)
            break
        except NodeNotLoaded as missing:
            asked.append(missing.path)
            if missing.path == "/admin/policies/":
                view.set_children("/admin/policies", ["a"])
            elif missing.path == "/admin/policies/a/":
                view.set_children("/admin/policies/a", ["b"])
            else:
                view.put_json(missing.path, {})
    assert asked == ["/admin/policies/", "/admin/policies/a/", "/admin/policies/a/b"]
    assert view.policies(ns) is not None
    assert view.policies(NamespaceName("a", "made-up")) is None  # no read: not listed
    assert view.policies(NamespaceName("made-up", "b")) is None
    with pytest.raises(NodeNotLoaded):
        view.broker_registry()
    view.set_children("/loadbalance/brokers", ["b1:8080"])
    with pytest.raises(NodeNotLoaded, match="b1:8080"):
        view.broker_registry()
    view.put_json(PATH, broker_node(1))
    assert list(view.broker_registry().brokers) == ["b1:8080"]


def test_view_reparses_a_changed_node_and_reports_undecodable_bytes() -> None:
    view = ClusterView(complete=True)
    path = "/admin/partitioned-topics/a/b/persistent/t"
    view.put_json(path, {"partitions": 2})
    topic = TopicName.parse("persistent://a/b/t")
    assert view.partitions(topic) == 2
    view.put_json(path, {"partitions": 5})
    assert view.partitions(topic) == 5
    view.put_bytes(path, b"not json")
    with pytest.raises(MalformedNode, match=path):
        view.partitions(topic)
    view.put_absent(path)
    assert view.partitions(topic) == 0


def test_malformed_registration_is_left_out_of_the_registry_but_named() -> None:
    view = ClusterView.from_snapshot(
        {PATH: broker_node(1), "/loadbalance/brokers/b2:8080": {"webServiceUrl": 1}}
    )
    registry = view.broker_registry()
    assert list(registry.brokers) == ["b1:8080"]
    assert list(registry.invalid) == ["b2:8080"]
    assert registry.by_url["pulsar://10.0.0.1:6650"] == "b1:8080"
    with pytest.raises(MalformedNode) as malformed:
        view.broker("b2:8080")
    # the broker's id is an internal address: in the log's detail, not the client's message
    assert "b2:8080" in (malformed.value.detail or "")
    assert "b2:8080" not in malformed.value.message


def test_bundles_prefer_local_policies_then_policies_then_one_full_bundle() -> None:
    # As Pulsar's NamespaceBundleFactory: no bundle data means one bundle over the whole range
    # (defaultNumberOfNamespaceBundles is applied when a namespace is created, not here).
    ns = NamespaceName("a", "b")
    view = ClusterView.from_snapshot({"/admin/policies/a/b": {}})
    assert view.bundles(ns) is not None
    assert view.bundles(ns).names() == ["0x00000000_0xffffffff"]  # type: ignore[union-attr]
    four = ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"]
    view.put_json("/admin/policies/a/b", {"bundles": {"boundaries": four}})
    assert len(view.bundles(ns).ranges) == 4  # type: ignore[union-attr]
    split = ["0x00000000", "0x10000000", "0xffffffff"]
    view.put_json("/admin/local-policies/a/b", {"bundles": {"boundaries": split}})
    assert view.bundles(ns).names() == [  # type: ignore[union-attr]
        "0x00000000_0x10000000",
        "0x10000000_0xffffffff",
    ]
    # A local-policies node without bundle data wins over the policies' data, as on brokers.
    view.put_json("/admin/local-policies/a/b", {"bookieAffinityGroup": None})
    assert view.bundles(ns).names() == ["0x00000000_0xffffffff"]  # type: ignore[union-attr]
    assert view.bundles(NamespaceName("a", "missing")) is None


def test_a_split_view_reads_each_path_from_its_store() -> None:
    local = ClusterView.from_snapshot(
        {
            PATH: broker_node(1),
            "/namespace/a/b/0x00000000_0xffffffff": {"nativeUrl": "pulsar://10.0.0.1:6650"},
            "/admin/local-policies/a/b": {"bundles": {"boundaries": ["0x00000000", "0xffffffff"]}},
        }
    )
    configuration = ClusterView(complete=False)  # a cache: what it lacks must be fetched
    view = SplitView(local, configuration)
    ns = NamespaceName("a", "b")
    with pytest.raises(NodeNotLoaded) as missing:
        view.policies(ns)
    assert missing.value.path == "/admin/policies/"  # asked of the configuration store
    configuration.set_children("/admin/policies", ["a"])
    configuration.set_children("/admin/policies/a", ["b"])
    version = view.version
    configuration.put_json("/admin/policies/a/b", {"replication_clusters": ["c"]})
    assert view.version > version  # a write to either store changes the split view
    assert view.policies(ns) is not None
    assert view.bundles(ns).names() == ["0x00000000_0xffffffff"]  # type: ignore[union-attr]
    assert view.ownership(ns, "0x00000000_0xffffffff") is not None
    assert list(view.broker_registry().brokers) == ["b1:8080"]
    with pytest.raises(NodeNotLoaded, match="/admin/clusters/"):
        view.cluster("c")
    with pytest.raises(TypeError):
        view.put_json("/x", {})
