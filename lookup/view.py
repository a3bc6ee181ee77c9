"""ClusterView: the in-memory copy of the znodes a lookup reads, with parse caches.

Metadata sources (a snapshot file, ZooKeeper watches) write raw node content into a view; the
pure resolve() reads typed, parsed nodes from it. A view is either *complete* (a snapshot: a
path it does not hold does not exist) or *partial* (a cache: a path it does not hold raises
NodeNotLoaded, and the source reads it and retries). All writes happen on one thread.

Whether a node exists is decided from its parent's children list (one read and one watch per
parent) before the node itself is read: names come from clients, and a made-up name must cost
no read or watch of its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from pulsar_lookup_gateway.lookup.bundles import NamespaceBundles
from pulsar_lookup_gateway.lookup.errors import MalformedNode, NodeNotLoaded
from pulsar_lookup_gateway.lookup.model import (
    BROKERS_ROOT,
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
    decode_json,
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
from pulsar_lookup_gateway.lookup.topics import NamespaceName, TopicName

T = TypeVar("T")
_BUNDLES_KEY = "#bundles"  # parse-cache key of a policies node's NamespaceBundles
# Equal znode contents share one decoded copy and one parse cache: ownership nodes of one broker
# are identical, so 100,000 bundles cost a few hundred objects. The table is bounded.
INTERN_LIMIT = 100_000
ABSENT_LIMIT = 100_000  # absent paths remembered (each saves a ZooKeeper read)
#: What observers hear when a source replaces a whole view (a reload, a lost session).
EVERY_PATH = "*"


class _Node:
    """One znode content, shared by every path that holds equal bytes, with its parses."""

    __slots__ = ("content", "parsed")

    def __init__(self, content: Any) -> None:
        self.content = content
        self.parsed: dict[object, Any] = {}


class _Undecodable:
    """Raw bytes that are not JSON, kept so the error names the path when a lookup needs it."""

    __slots__ = ("error",)

    def __init__(self, error: MalformedNode) -> None:
        self.error = error


@dataclass(frozen=True, slots=True)
class BrokerRegistry:
    """The live brokers, valid registrations only, with the indexes resolve() needs."""

    brokers: Mapping[str, BrokerData]
    invalid: Mapping[str, MalformedNode]
    by_url: Mapping[str, str]  # any service or web URL of a broker -> broker id
    # With the extensible load manager, ownership lives in a system topic, not in /namespace.
    extensible: bool

    @classmethod
    def build(
        cls, brokers: Mapping[str, BrokerData], invalid: Mapping[str, MalformedNode]
    ) -> BrokerRegistry:
        by_url: dict[str, str] = {}
        for broker_id in sorted(brokers):
            data = brokers[broker_id]
            for url in (
                data.pulsar_service_url,
                data.pulsar_service_url_tls,
                data.web_service_url,
                data.web_service_url_tls,
            ):
                if url:
                    by_url.setdefault(url, broker_id)
        extensible = any(b.uses_extensible_load_manager for b in brokers.values())
        return cls(brokers, invalid, by_url, extensible)


class ClusterView:
    def __init__(self, *, complete: bool) -> None:
        self.complete = complete
        self._raw: dict[str, _Node] = {}
        self._absent: set[str] = set()
        self._children: dict[str, set[str]] = {}
        self._interned: dict[bytes, _Node] = {}
        self._registry: BrokerRegistry | None = None
        self._version = 0  # bumped on every write; lets callers notice change
        # ZooKeeper's zxid dating each node and children list (see zxid()); one int per path.
        self._zxids: dict[str, int] = {}
        # What zxid() answers for a path its source dated with none (a snapshot: its file's
        # modification time, so that one snapshot dates every answer read from it alike).
        self.snapshot_zxid = 0
        self._observers: list[Callable[[str], None]] = []

    @property
    def version(self) -> int:
        """Bumped on every write: an answer read from this view holds while it is unchanged."""
        return self._version

    @classmethod
    def from_snapshot(cls, nodes: Mapping[str, Any]) -> ClusterView:
        """A complete view of a snapshot: znode path -> decoded JSON content."""
        view = cls(complete=True)
        for path, content in nodes.items():
            view.put_json(path, content)
        return view

    # -- writes (metadata sources) -------------------------------------------------------

    def put_bytes(self, path: str, data: bytes, zxids: tuple[int, int] | None = None) -> None:
        """`zxids`: the node's (czxid, mzxid) as ZooKeeper read it (see zxid())."""
        if zxids is not None:
            # A broker rewrites its registration with every load report; what a lookup reads
            # of it (its URLs) is fixed for the registration's life: it is dated by creation.
            registration = path.startswith(BROKERS_ROOT + "/")
            self._zxids[path] = zxids[0] if registration else zxids[1]
        node = self._interned.get(data)
        if node is None:
            try:
                node = _Node(decode_json(path, data))
            except MalformedNode as exc:
                node = _Node(_Undecodable(exc))
            self._intern(data, node)
        self._put(path, node)

    def put_json(self, path: str, content: Any) -> None:
        key = json.dumps(content, sort_keys=True, separators=(",", ":")).encode()
        node = self._interned.get(key)
        if node is None:
            node = _Node(content)
            self._intern(key, node)
        self._put(path, node)

    def _intern(self, key: bytes, node: _Node) -> None:
        if len(self._interned) >= INTERN_LIMIT:
            self._interned.clear()
        self._interned[key] = node

    def _put(self, path: str, node: _Node) -> None:
        self._raw[path] = node
        self._absent.discard(path)
        if self.complete:  # a snapshot lists every ancestor's children, as ZooKeeper would
            child = path
            while child not in ("", "/"):
                parent, _, name = child.rpartition("/")
                self._children.setdefault(parent or "/", set()).add(name)
                child = parent
        self._changed(path)

    def put_absent(self, path: str) -> None:
        """Record that `path` does not exist (a partial view stops asking for it)."""
        self._raw.pop(path, None)
        self._zxids.pop(path, None)
        if len(self._absent) >= ABSENT_LIMIT:
            # Clients choose the names looked up, so made-up namespaces and topics would grow
            # this set for ever; forgetting absences only costs a re-read when one is asked again.
            self._absent.clear()
        self._absent.add(path)
        if self.complete:
            parent, _, name = path.rpartition("/")
            self._children.get(parent or "/", set()).discard(name)
        self._changed(path)

    def set_children(self, path: str, names: Iterable[str], zxid: int | None = None) -> None:
        """`zxid`: the parent's pzxid (the zxid of its last child created or deleted)."""
        listed = set(names)
        self._children[path] = listed
        if zxid is not None:
            self._zxids[path + "/"] = zxid
        # A child listed now exists, whatever an earlier read of it found.
        for name in listed:
            self._absent.discard(f"{path}/{name}")
        self._changed(path + "/")

    def _changed(self, path: str) -> None:
        if path.startswith(BROKERS_ROOT):
            self._registry = None
        self._version += 1
        for observer in self._observers:
            observer(path)

    # -- observers (the ownership watch) -----------------------------------------------------

    def observe(self, observer: Callable[[str], None]) -> None:
        """Call `observer(path)` after every write to the view: a node's path, a children
        list's path with a trailing `/`, or EVERY_PATH when the source replaced the view."""
        if observer not in self._observers:  # (once: a view handed over brings its own along)
            self._observers.append(observer)

    def unobserve(self, observer: Callable[[str], None]) -> None:
        if observer in self._observers:
            self._observers.remove(observer)

    def hand_over(self, successor: ClusterView) -> None:
        """A source replaces this view with `successor` (a reload, a lost session): the
        observers move to it and hear that every path may have changed."""
        successor._observers, self._observers = self._observers, []
        for observer in list(successor._observers):
            observer(EVERY_PATH)

    # -- reads -------------------------------------------------------------------------

    def raw(self, path: str) -> Any:
        """The decoded content of `path`, or None if it does not exist."""
        if path in self._raw:
            content = self._raw[path].content
            if isinstance(content, _Undecodable):
                raise content.error
            return content
        if self.complete or path in self._absent:
            return None
        raise NodeNotLoaded(path)

    def exists(self, path: str) -> bool:
        if path in self._raw:
            return True
        if self.complete or path in self._absent:
            return False
        raise NodeNotLoaded(path)

    def node(self, path: str, parser: Callable[[str, Any], T]) -> T | None:
        """The parsed node at `path` (parsed once, until it changes), or None if absent."""
        stored = self._raw.get(path)
        if stored is None:
            self.raw(path)  # raises NodeNotLoaded when the view cannot tell
            return None
        try:
            return cast(T, stored.parsed[parser])
        except KeyError:
            pass
        parsed = parser(path, self.raw(path))
        stored.parsed[parser] = parsed
        return parsed

    def has_child(self, parent: str, name: str) -> bool:
        """Whether `parent`'s children list (read and watched once per parent) names `name`."""
        names = self._children.get(parent)
        if names is None:
            if self.complete:
                return False
            raise NodeNotLoaded(parent + "/")
        return name in names

    def listed(self, path: str) -> bool:
        """Whether `path` exists by its parent's children list. Names come from clients: a name
        nobody created is answered from the parent's list, with no read or watch of its own."""
        parent, _, name = path.rpartition("/")
        return self.has_child(parent, name)

    def children(self, path: str) -> list[str]:
        names = self._children.get(path)
        if names is None:
            if self.complete:
                return []
            raise NodeNotLoaded(path + "/")
        return sorted(names)

    def lists_children_of(self, path: str) -> bool:
        return path in self._children

    def zxid(self, path: str) -> int:
        """The ZooKeeper zxid that dates what the view holds of `path`: a node's last
        modification (a broker registration's creation), or with a trailing `/` the last
        child created or deleted under it (pzxid); `snapshot_zxid` for a path its source
        dated with none, or that the view does not hold (never raises)."""
        return self._zxids.get(path, self.snapshot_zxid)

    def known_paths(self) -> list[str]:
        """Every path the view holds, and the parents whose children it lists (with a trailing
        `/`). A source re-reads these to re-watch them. Absent paths are not among them: their
        parents' children lists say when they appear."""
        return [*self._raw, *(parent + "/" for parent in self._children)]

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
