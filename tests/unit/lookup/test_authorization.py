"""Lookup authorization: Pulsar's permission rule on namespace policies and tenant info,
table-driven; and how the check reads the cluster view."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from pulsar_lookup_gateway.lookup.authorization import (
    LOOKUP_ACTIONS,
    LookupAuthorizer,
    can_lookup,
    grants,
)
from pulsar_lookup_gateway.lookup.errors import (
    FailureKind,
    LookupFailure,
    MalformedNode,
    NodeNotLoaded,
    ServerError,
)
from pulsar_lookup_gateway.lookup.model import AuthPolicies, parse_policies, parse_tenant
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.lookup.view import ClusterView

TOPIC = "persistent://acme/orders/created"
POLICIES = "/admin/policies/acme/orders"
TENANT = "/admin/policies/acme"


def policies(
    namespace: dict[str, list[str]] | None = None,
    topics: dict[str, dict[str, list[str]]] | None = None,
) -> dict[str, Any]:
    """Namespace policies as Pulsar writes them (snake_case auth_policies)."""
    return {
        "bundles": {"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 1},
        "auth_policies": {
            "namespace_auth": namespace or {},
            "destination_auth": topics or {},
            "subscription_auth_roles": {},
        },
        "replication_clusters": ["test"],
    }


@dataclass(frozen=True)
class Case:
    name: str
    role: str
    allowed: bool
    topic: str = TOPIC
    policies: dict[str, Any] | None = field(default_factory=policies)  # None: no node
    tenant: dict[str, Any] | None = None  # None: no node
    super_users: frozenset[str] = frozenset()


CASES = [
    Case("nothing granted", "alice", False),
    Case("namespace produce", "alice", True, policies=policies({"alice": ["produce"]})),
    Case("namespace consume", "alice", True, policies=policies({"alice": ["consume"]})),
    Case("namespace both", "alice", True, policies=policies({"alice": ["consume", "produce"]})),
    Case("namespace functions only", "alice", False, policies=policies({"alice": ["functions"]})),
    Case("namespace no actions", "alice", False, policies=policies({"alice": []})),
    Case("another role granted", "alice", False, policies=policies({"bob": ["produce"]})),
    Case("role names are exact", "Alice", False, policies=policies({"alice": ["produce"]})),
    Case("no wildcard matching", "alice", False, policies=policies({"*": ["produce"]})),
    Case("unknown actions kept", "alice", True, policies=policies({"alice": ["x", "consume"]})),
    Case("topic produce", "alice", True, policies=policies(topics={TOPIC: {"alice": ["produce"]}})),
    Case(
        "topic grant is for another topic",
        "alice",
        False,
        policies=policies(topics={"persistent://acme/orders/other": {"alice": ["produce"]}}),
    ),
    Case(
        "topic grant is for another domain",
        "alice",
        False,
        policies=policies(topics={"non-persistent://acme/orders/created": {"alice": ["consume"]}}),
    ),
    Case(
        "topic grant to another role",
        "alice",
        False,
        policies=policies(topics={TOPIC: {"bob": ["consume"]}}),
    ),
    Case(
        "partition inherits the partitioned topic's grant",
        "alice",
        True,
        topic=f"{TOPIC}-partition-3",
        policies=policies(topics={TOPIC: {"alice": ["consume"]}}),
    ),
    Case(
        "partition's own grant",
        "alice",
        True,
        topic=f"{TOPIC}-partition-3",
        policies=policies(topics={f"{TOPIC}-partition-3": {"alice": ["produce"]}}),
    ),
    Case(
        "a partition's grant is not the topic's",
        "alice",
        False,
        policies=policies(topics={f"{TOPIC}-partition-3": {"alice": ["produce"]}}),
    ),
    Case("superuser without grants", "root", True, super_users=frozenset({"root", "ops"})),
    Case("superuser of a missing namespace", "root", True, policies=None,
         super_users=frozenset({"root"})),
    Case("no namespace grants nothing", "alice", False, policies=None),
    Case("tenant admin", "acme-admin", True, tenant={"adminRoles": ["acme-admin"]}),
    Case("tenant admin of a missing namespace", "acme-admin", True, policies=None,
         tenant={"adminRoles": ["acme-admin"], "allowedClusters": ["c1"]}),
    Case("not a tenant admin", "alice", False, tenant={"adminRoles": ["acme-admin"]}),
    Case("tenant without admins", "alice", False, tenant={"allowedClusters": ["c1"]}),
    Case(
        "other tenant's admin",
        "globex-admin",
        False,
        topic="persistent://acme/orders/created",
        tenant={"adminRoles": ["acme-admin"]},
    ),
]  # fmt: skip


def snapshot(case: Case) -> dict[str, Any]:
    nodes: dict[str, Any] = {}
    if case.policies is not None:
        nodes[POLICIES] = case.policies
    if case.tenant is not None:
        nodes[TENANT] = case.tenant
    # a different tenant whose admin must not count for acme
    nodes["/admin/policies/globex"] = {"adminRoles": ["globex-admin"]}
    return nodes


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_can_lookup(case: Case) -> None:
    topic = TopicName.parse(case.topic)
    nodes = snapshot(case)
    found_policies = parse_policies(POLICIES, nodes[POLICIES]) if POLICIES in nodes else None
    tenant = parse_tenant(TENANT, nodes[TENANT]) if TENANT in nodes else None
    assert can_lookup(case.role, topic, found_policies, tenant, case.super_users) is case.allowed


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_authorizer_reads_the_same_rule_from_the_view(case: Case) -> None:
    view = ClusterView.from_snapshot(snapshot(case))
    authorizer = LookupAuthorizer(case.super_users)
    topic = TopicName.parse(case.topic)
    if case.allowed:
        authorizer.check(case.role, topic, view)
        return
    with pytest.raises(LookupFailure) as info:
        authorizer.check(case.role, topic, view)
    assert info.value.kind is FailureKind.NOT_AUTHORIZED
    assert info.value.code is ServerError.AuthorizationError
    assert f"role '{case.role}'" in info.value.message and case.topic in info.value.message


def test_lookup_needs_produce_or_consume() -> None:
    assert {"produce", "consume"} == LOOKUP_ACTIONS
    auth = AuthPolicies.model_validate({"namespace_auth": {"a": ["sinks", "sources"]}})
    topic = TopicName.parse(TOPIC)
    assert not grants(auth, "a", topic)
    assert grants(auth, "a", topic, actions={"sinks"})


def list_namespace(view: ClusterView) -> None:
    """What the ZooKeeper source learns from the children lists of the policies' parents."""
    tenant, namespace = POLICIES.rsplit("/", 2)[-2:]
    view.set_children("/admin/policies", [tenant])
    view.set_children(f"/admin/policies/{tenant}", [namespace])


def test_reads_only_what_it_needs_from_a_partial_view() -> None:
    """A superuser reads nothing; a granted role reads the policies only; anyone else the
    tenant node too. A partial view asks for what it lacks (the ZooKeeper source then fetches
    and watches it)."""
    topic = TopicName.parse(TOPIC)
    authorizer = LookupAuthorizer(frozenset({"root"}))
    view = ClusterView(complete=False)
    authorizer.check("root", topic, view)
    with pytest.raises(NodeNotLoaded) as missing:
        authorizer.check("alice", topic, view)
    assert missing.value.path == "/admin/policies/"  # namespace existence: the parents' lists
    list_namespace(view)
    with pytest.raises(NodeNotLoaded) as missing:
        authorizer.check("alice", topic, view)
    assert missing.value.path == POLICIES
    view.put_json(POLICIES, policies({"alice": ["produce"]}))
    authorizer.check("alice", topic, view)
    with pytest.raises(NodeNotLoaded) as missing:
        authorizer.check("bob", topic, view)
    assert missing.value.path == TENANT
    view.put_absent(TENANT)
    with pytest.raises(LookupFailure):
        authorizer.check("bob", topic, view)
    view.put_json(TENANT, {"adminRoles": ["bob"]})
    authorizer.check("bob", topic, view)


def test_permission_changes_apply_when_the_node_changes() -> None:
    topic = TopicName.parse(TOPIC)
    authorizer = LookupAuthorizer()
    view = ClusterView.from_snapshot({POLICIES: policies()})
    with pytest.raises(LookupFailure):
        authorizer.check("alice", topic, view)
    view.put_json(POLICIES, policies(topics={TOPIC: {"alice": ["consume"]}}))
    authorizer.check("alice", topic, view)
    view.put_json(POLICIES, policies())
    with pytest.raises(LookupFailure):
        authorizer.check("alice", topic, view)


@pytest.mark.parametrize(
    ("path", "content", "fragment"),
    [
        (POLICIES, {"auth_policies": {"namespace_auth": {"a": "produce"}}},
         "auth_policies.namespace_auth.a"),
        (POLICIES, {"auth_policies": {"destination_auth": {"t": ["a"]}}},
         "auth_policies.destination_auth.t"),
        (POLICIES, {"auth_policies": []}, "auth_policies"),
        (TENANT, {"adminRoles": "acme-admin"}, "adminRoles"),
    ],
)  # fmt: skip
def test_malformed_permissions_name_the_node(path: str, content: Any, fragment: str) -> None:
    nodes = {POLICIES: policies(), TENANT: {}} | {path: content}
    view = ClusterView.from_snapshot(nodes)
    with pytest.raises(MalformedNode) as info:
        LookupAuthorizer().check("alice", TopicName.parse(TOPIC), view)
    assert info.value.path == path
    assert fragment in info.value.message


def test_policies_and_tenant_models() -> None:
    parsed = parse_policies(POLICIES, policies({"a": ["produce"]}, {TOPIC: {"b": ["consume"]}}))
    assert parsed.auth_policies.namespace_auth == {"a": ["produce"]}
    assert parsed.auth_policies.destination_auth == {TOPIC: {"b": ["consume"]}}
    assert parsed.bundles is not None  # bundles still parse beside the permissions
    assert parse_policies(POLICIES, {}).auth_policies == AuthPolicies()
    tenant = parse_tenant(TENANT, {"adminRoles": ["x"], "allowedClusters": ["c"], "new": 1})
    assert (tenant.admin_roles, tenant.allowed_clusters) == (["x"], ["c"])
    view = ClusterView.from_snapshot({TENANT: {"adminRoles": ["x"]}})
    assert view.tenant("acme") == tenant.model_copy(update={"allowed_clusters": []})
    assert view.tenant("globex") is None


def test_a_tenant_node_without_data_has_no_admins() -> None:
    """ZooKeeper parents created on the way to a namespace node hold no data."""
    view = ClusterView(complete=False)
    list_namespace(view)
    view.put_json(POLICIES, policies())
    view.put_bytes(TENANT, b"")
    assert view.tenant("acme") is None
    with pytest.raises(LookupFailure) as info:
        LookupAuthorizer().check("alice", TopicName.parse(TOPIC), view)
    assert info.value.kind is FailureKind.NOT_AUTHORIZED
