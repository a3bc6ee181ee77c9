"""lookup.bundle_owners: which broker holds each bundle's topics, per load manager."""

from __future__ import annotations

from typing import Any

import pytest

from pulsar_lookup_gateway.lookup.bundle_owners import bundles_with_owners, holder_of
from pulsar_lookup_gateway.lookup.bundles import NamespaceBundles
from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure
from pulsar_lookup_gateway.lookup.topic_list import parse_namespace
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.metadata_store.synthetic import cluster, ownership_node

NS = parse_namespace("public/default")
FIRST = NamespaceBundles.equal(4).ranges[0]
EXTENSIBLE = "org.apache.pulsar.broker.loadbalance.extensions.ExtensibleLoadManagerImpl"


def view_of(nodes: dict[str, Any]) -> ClusterView:
    return ClusterView.from_snapshot(nodes)


@pytest.mark.parametrize(
    ("owner", "holder"),
    [
        (None, None),  # nobody owns it: no topics loaded anywhere
        ({"nativeUrl": "pulsar://elsewhere:6650", "brokerId": "b2:8080"}, "b2:8080"),
        (ownership_node(3), "b3:8080"),  # no brokerId: the registration its URLs name
        (ownership_node(2, disabled=True), "b2:8080"),  # unloading: it still has them
    ],
)
def test_modular_load_manager_owners(owner: dict[str, Any] | None, holder: str | None) -> None:
    nodes = cluster(brokers=3, owned={})
    if owner is not None:
        nodes[f"/namespace/public/default/{FIRST.name}"] = owner
    view = view_of(nodes)
    assert bundles_with_owners(view, NS) == NamespaceBundles.equal(4)
    assert holder_of(view, NS, FIRST) == holder


@pytest.mark.parametrize(
    "owner", [{"nativeUrl": "pulsar://x:1", "brokerId": "b9:8080"}, ownership_node(9)]
)
def test_an_owner_that_is_not_registered_fails_retriably(owner: dict[str, Any]) -> None:
    nodes = cluster(brokers=3, owned={})
    nodes[f"/namespace/public/default/{FIRST.name}"] = owner
    with pytest.raises(LookupFailure) as failure:
        holder_of(view_of(nodes), NS, FIRST)
    assert failure.value.kind is FailureKind.OWNER_INACTIVE
    assert failure.value.kind.retriable


def extensible(states: dict[str, Any] | None) -> ClusterView:
    nodes = cluster(brokers=3, owned={})
    for i in (1, 2, 3):
        nodes[f"/loadbalance/brokers/b{i}:8080"]["loadManagerClassName"] = EXTENSIBLE
    if states is not None:
        nodes[f"/service_unit_state/public/default/{FIRST.name}"] = states
    return view_of(nodes)


@pytest.mark.parametrize(
    ("state", "holder"),
    [
        ({"state": "Owned", "dstBroker": "b2:8080"}, "b2:8080"),
        ({"state": "Splitting", "sourceBroker": "b1:8080", "dstBroker": "b1:8080"}, "b1:8080"),
        ({"state": "Releasing", "sourceBroker": "b3:8080", "dstBroker": "b2:8080"}, "b3:8080"),
        ({"state": "Assigning", "dstBroker": "b2:8080"}, None),
        ({"state": "Free", "sourceBroker": "b2:8080"}, None),
        ({"state": "Init"}, None),
        ({"state": "Deleted", "sourceBroker": "b2:8080"}, None),
    ],
)
def test_extensible_load_manager_table_view(state: dict[str, Any], holder: str | None) -> None:
    view = extensible(state)
    assert bundles_with_owners(view, NS) is not None
    assert holder_of(view, NS, FIRST) == holder


def test_extensible_load_manager_without_table_view_has_unknown_owners() -> None:
    assert bundles_with_owners(extensible(None), NS) is None


def test_a_missing_namespace_is_not_found() -> None:
    with pytest.raises(LookupFailure) as failure:
        bundles_with_owners(view_of(cluster(brokers=1, owned={})), parse_namespace("public/x"))
    assert failure.value.kind is FailureKind.NAMESPACE_NOT_FOUND
