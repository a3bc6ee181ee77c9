"""Who may look up a topic (``authorizationEnabled``): Pulsar's rule for the LOOKUP operation.

A role may look up a topic when it

1. is a superuser (``superUserRoles``), or
2. may produce or consume on the topic: the namespace policies' ``auth_policies`` grant it
   ``produce`` or ``consume`` on the whole namespace (``namespace_auth``) or on the topic
   (``destination_auth``, keyed by the full topic name; a partition also counts the grants of
   its partitioned topic), or
3. administers the topic's tenant (``adminRoles`` of ``/admin/policies/<tenant>``).

Listing a namespace's topics (GET_TOPICS_OF_NAMESPACE) needs ``consume`` on the whole
namespace instead of 2.

Pure: reads the ClusterView only. A view that lacks a node raises NodeNotLoaded and the lookup
service fetches it (and, from ZooKeeper, watches it), so permission changes apply through the
same watches as every other metadata change.

Not modelled (Pulsar's defaults leave them off): wildcard role matching
(``authorizationAllowWildcardsMatching``), and an authorization *provider* other than Pulsar's
own. A namespace that does not exist grants nothing: an unauthorized role learns nothing about
which namespaces exist.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure
from pulsar_lookup_gateway.lookup.model import AuthPolicies, NamespacePolicies, TenantInfo
from pulsar_lookup_gateway.lookup.topics import NamespaceName, TopicName
from pulsar_lookup_gateway.lookup.view import ClusterView

__all__ = [
    "LIST_ACTIONS",
    "LOOKUP_ACTIONS",
    "LookupAuthorizer",
    "can_lookup",
    "grants",
    "not_authorized",
]

#: Either is enough to look a topic up (Pulsar's canLookup: canProduce || canConsume).
LOOKUP_ACTIONS = frozenset({"produce", "consume"})
#: Listing a namespace's topics needs consume on the namespace (Pulsar's GET_TOPICS).
LIST_ACTIONS = frozenset({"consume"})


def grants(
    auth: AuthPolicies, role: str, topic: TopicName, actions: Collection[str] = LOOKUP_ACTIONS
) -> bool:
    """Whether the namespace permissions give `role` one of `actions` on `topic`."""
    if _any_of(auth.namespace_auth.get(role), actions):
        return True
    names = [topic.full]
    if topic.is_partition:
        names.append(topic.base.full)
    for name in names:
        roles = auth.destination_auth.get(name)
        if roles is not None and _any_of(roles.get(role), actions):
            return True
    return False


def _any_of(granted: Iterable[str] | None, actions: Collection[str]) -> bool:
    return granted is not None and any(action in actions for action in granted)


def can_lookup(
    role: str,
    topic: TopicName,
    policies: NamespacePolicies | None,
    tenant: TenantInfo | None,
    super_users: Collection[str],
) -> bool:
    """The whole rule on already-read nodes (None: the node does not exist)."""
    if role in super_users:
        return True
    if policies is not None and grants(policies.auth_policies, role, topic):
        return True
    return tenant is not None and role in tenant.admin_roles


def not_authorized(role: str, topic: TopicName) -> LookupFailure:
    return LookupFailure(
        FailureKind.NOT_AUTHORIZED,
        f"Client with role '{role}' is not authorized to look up {topic.full}",
    )


@dataclass(frozen=True, slots=True)
class LookupAuthorizer:
    """The check the lookup service runs for an authenticated role."""

    super_users: frozenset[str] = frozenset()

    def check(self, role: str, topic: TopicName, view: ClusterView) -> None:
        """Return if `role` may look up `topic`; raise LookupFailure(NOT_AUTHORIZED) if not.

        Reads only what it needs, in the order of cost: no node for a superuser, the namespace
        policies (which the lookup reads anyway), then the tenant node."""
        if role in self.super_users:
            return
        policies = view.policies(topic.namespace_name)
        if policies is not None and grants(policies.auth_policies, role, topic):
            return
        tenant = view.tenant(topic.tenant)
        if tenant is not None and role in tenant.admin_roles:
            return
        raise not_authorized(role, topic)

    def check_namespace(self, role: str, namespace: NamespaceName, view: ClusterView) -> None:
        """Pulsar's GET_TOPICS namespace operation: a superuser, a role granted ``consume`` on
        the whole namespace, or a tenant admin may list its topics; raise LookupFailure
        (NOT_AUTHORIZED) otherwise."""
        if role in self.super_users:
            return
        policies = view.policies(namespace)
        if policies is not None and _any_of(
            policies.auth_policies.namespace_auth.get(role), LIST_ACTIONS
        ):
            return
        tenant = view.tenant(namespace.tenant)
        if tenant is not None and role in tenant.admin_roles:
            return
        raise LookupFailure(
            FailureKind.NOT_AUTHORIZED,
            f"Client with role '{role}' is not authorized to list the topics of {namespace}",
        )
