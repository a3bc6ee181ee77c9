"""ClusterView: the typed nodes a lookup reads (brokers, leader, policies, bundles, owners ...).

The znodes themselves, their writes and observers are lookup.node_store.NodeStore's; a view adds
the typed, parsed readers the pure resolve() uses, and SplitView reads two stores as one.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import Any, TypeVar, cast

from pulsar_lookup_gateway.lookup.broker_registry import BrokerRegistry
from pulsar_lookup_gateway.lookup.bundles import NamespaceBundles
from pulsar_lookup_gateway.lookup.errors import MalformedNode
from pulsar_lookup_gateway.lookup.model import (
    BROKERS_ROOT,
    EXTENSION_LEADER_PATH,
    LEADER_PATH,
    SERVICE_UNIT_STATE_ROOT,
    BrokerData,
    ClusterData,
    LeaderData,
    NamespacePolicies,
    OwnershipData,
    ServiceUnitStateData,
    TenantInfo,
    broker_path,
    cluster_path,
    is_configuration_path,
    local_policies_path,
    ownership_path,
    parse_broker,
    parse_cluster,
    parse_leader,
    parse_ownership,
    parse_partitioned,
    parse_policies,
    parse_service_unit_state,
    parse_tenant,
    partitioned_path,
    policies_path,
    service_unit_state_path,
    tenant_path,
)
from pulsar_lookup_gateway.lookup.node_store import EVERY_PATH, NodeStore, _Node
from pulsar_lookup_gateway.lookup.topics import NamespaceName, TopicName

# Names other modules import from here (the view's face).
__all__ = ["EVERY_PATH", "BrokerRegistry", "ClusterView", "SplitView"]

T = TypeVar("T")
_BUNDLES_KEY = "#bundles"  # parse-cache key of a policies node's NamespaceBundles


class ClusterView(NodeStore):
    """A NodeStore read as a Pulsar cluster: each reader checks its node is listed by its
    parent, then parses it once (see NodeStore.node); the broker registry is kept until a
    write under /loadbalance/brokers."""

    def __init__(self, *, complete: bool) -> None:
        super().__init__(complete=complete)
        self._registry: BrokerRegistry | None = None

    def _changed(self, path: str) -> None:
        if path.startswith(BROKERS_ROOT):
            self._registry = None  # (before the observers hear of it: they may read it)
        super()._changed(path)

    # -- typed readers used by resolve() ------------------------------------------------

    def broker_registry(self) -> BrokerRegistry:
        if self._registry is None:
            valid: dict[str, BrokerData] = {}
            invalid: dict[str, MalformedNode] = {}
            for broker_id in self.children(BROKERS_ROOT):
                try:
                    data = self.node(broker_path(broker_id), parse_broker)
                except MalformedNode as exc:
                    invalid[broker_id] = exc
                    continue
                if data is not None:
                    valid[broker_id] = data
            self._registry = BrokerRegistry.build(valid, invalid)
        return self._registry

    def broker(self, broker_id: str) -> BrokerData:
        """A registered broker's data; a malformed registration raises MalformedNode."""
        registry = self.broker_registry()
        if broker_id in registry.invalid:
            raise registry.invalid[broker_id]
        return registry.brokers[broker_id]

    def leader(self) -> LeaderData | None:
        if not self.listed(LEADER_PATH):
            return None
        return self.node(LEADER_PATH, parse_leader)

    def extension_leader(self) -> LeaderData | None:
        """The extensible load manager's leader (its channel owner), None when there is none."""
        if not self.listed(EXTENSION_LEADER_PATH):
            return None
        return self.node(EXTENSION_LEADER_PATH, parse_leader)

    def policies(self, namespace: NamespaceName) -> NamespacePolicies | None:
        """None when the namespace does not exist (checked through the tenants' and the
        tenant's children lists first)."""
        path = policies_path(namespace)
        if not self.listed(tenant_path(namespace.tenant)) or not self.listed(path):
            return None
        return self.node(path, parse_policies)

    def tenant(self, tenant: str) -> TenantInfo | None:
        """The tenant's TenantInfo (admin roles); None if the tenant node does not exist or
        holds no data (created only as the parent of its namespaces' nodes)."""
        path = tenant_path(tenant)
        if not self.listed(path) or self.raw(path) is None:
            return None
        return self.node(path, parse_tenant)

    def local_policies(self, namespace: NamespaceName) -> NamespacePolicies | None:
        path = local_policies_path(namespace)
        if not self.listed(path):
            return None
        return self.node(path, parse_policies)

    def bundles(self, namespace: NamespaceName) -> NamespaceBundles | None:
        """The namespace's bundles; None if the namespace does not exist (it has no policies
        node). Pulsar's brokers read the local policies when that node exists, else they copy
        the policies' bundle data into a new local-policies node; bundle data that is absent
        means one bundle over the whole hash range (defaultNumberOfNamespaceBundles is applied
        only when a namespace is created, never by a lookup)."""
        policies = self.policies(namespace)
        if policies is None:
            return None
        local = self.local_policies(namespace)
        if local is not None:
            if local.bundles is None:
                return NamespaceBundles.full()
            return self._bundles_of(local_policies_path(namespace), local)
        if policies.bundles is not None:
            return self._bundles_of(policies_path(namespace), policies)
        return NamespaceBundles.full()

    def _bundles_of(self, path: str, policies: NamespacePolicies) -> NamespaceBundles:
        stored = self._raw[path]
        cached = stored.parsed.get(_BUNDLES_KEY)
        if cached is None:
            assert policies.bundles is not None
            try:
                cached = policies.bundles.to_bundles()
            except ValueError as exc:
                raise MalformedNode(path, f"bundles: {exc}") from None
            stored.parsed[_BUNDLES_KEY] = cached
        return cast(NamespaceBundles, cached)

    def ownership(self, namespace: NamespaceName, bundle_name: str) -> OwnershipData | None:
        path = ownership_path(namespace, bundle_name)
        if not self.listed(path):  # one children watch per namespace, none per unowned bundle
            return None
        return self.node(path, parse_ownership)

    def cluster(self, name: str) -> ClusterData | None:
        """`/admin/clusters/<name>`, None when that cluster is not registered."""
        path = cluster_path(name)
        if not self.listed(path):
            return None
        return self.node(path, parse_cluster)

    def uses_table_view(self) -> bool:
        """Whether bundle ownership is kept under /service_unit_state (the extensible load
        manager's metadata-store table view): the root's children list names it."""
        return self.has_child("/", SERVICE_UNIT_STATE_ROOT.lstrip("/"))

    def service_unit_state(
        self, namespace: NamespaceName, bundle_name: str
    ) -> ServiceUnitStateData | None:
        path = service_unit_state_path(namespace, bundle_name)
        if not self.listed(path):  # one children watch per namespace, as for /namespace
            return None
        return self.node(path, parse_service_unit_state)

    def partitions(self, topic: TopicName) -> int:
        path = partitioned_path(topic)
        if not self.listed(path):  # one children watch per namespace and domain
            return 0
        data = self.node(path, parse_partitioned)
        return 0 if data is None else data.partitions


class SplitView(ClusterView):
    """The view of a cluster whose configuration store is separate from its local store: every
    read goes to the view of the store that holds the path (lookup.model.is_configuration_path).
    Each store's source writes its own view; this one is never written to."""

    def __init__(self, local: ClusterView, configuration: ClusterView) -> None:
        super().__init__(complete=local.complete and configuration.complete)
        self.local = local
        self.configuration = configuration

    def _of(self, path: str) -> ClusterView:
        return self.configuration if is_configuration_path(path) else self.local

    @property
    def version(self) -> int:
        # Each store's version only grows, so the sum changes whenever either store does.
        return self.local.version + self.configuration.version

    def _put(self, path: str, node: _Node) -> None:
        raise TypeError("a SplitView is written through the views of its stores")

    def put_absent(self, path: str) -> None:
        raise TypeError("a SplitView is written through the views of its stores")

    def set_children(self, path: str, names: Iterable[str], zxid: int | None = None) -> None:
        raise TypeError("a SplitView is written through the views of its stores")

    def raw(self, path: str) -> Any:
        return self._of(path).raw(path)

    def exists(self, path: str) -> bool:
        return self._of(path).exists(path)

    def node(self, path: str, parser: Callable[[str, Any], T]) -> T | None:
        return self._of(path).node(path, parser)

    def has_child(self, parent: str, name: str) -> bool:
        return self._of(parent + "/").has_child(parent, name)

    def children(self, path: str) -> list[str]:
        return self._of(path + "/").children(path)

    def child_names(self, path: str) -> Collection[str]:
        return self._of(path + "/").child_names(path)

    def lists_children_of(self, path: str) -> bool:
        return self._of(path + "/").lists_children_of(path)

    def zxid(self, path: str) -> int:
        return self._of(path).zxid(path)

    def observe(self, observer: Callable[[str], None]) -> None:
        self.local.observe(observer)
        self.configuration.observe(observer)

    def unobserve(self, observer: Callable[[str], None]) -> None:
        self.local.unobserve(observer)
        self.configuration.unobserve(observer)

    def known_paths(self) -> list[str]:
        return [*self.local.known_paths(), *self.configuration.known_paths()]

    def broker_registry(self) -> BrokerRegistry:
        return self.local.broker_registry()  # cached by the local view, rebuilt on its writes

    def _bundles_of(self, path: str, policies: NamespacePolicies) -> NamespaceBundles:
        return self._of(path)._bundles_of(path, policies)
