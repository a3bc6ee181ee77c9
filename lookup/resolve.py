"""resolve(): topic + chosen listener + cluster view -> the broker address to use.

Pure: reads only the ClusterView. A view that lacks a node raises NodeNotLoaded, and the I/O
shell reads the node and calls again.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from pulsar_lookup_gateway.lookup.bundles import BundleRange, topic_hash
from pulsar_lookup_gateway.lookup.errors import (
    NAMESPACE_NOT_FOUND_MESSAGE,
    FailureKind,
    LookupFailure,
    MalformedNode,
)
from pulsar_lookup_gateway.lookup.model import (
    BrokerData,
    ClusterData,
    ListenerUrls,
    NamespacePolicies,
    OwnershipData,
    ServiceUnitState,
    ServiceUnitStateData,
    ownership_path,
    service_unit_state_path,
)
from pulsar_lookup_gateway.lookup.protocol_listeners import (
    NO_PROTOCOL_LISTENERS,
    ProtocolListeners,
)
from pulsar_lookup_gateway.lookup.selection import ListenerChoice
from pulsar_lookup_gateway.lookup.topics import (
    NamespaceName,
    TopicDomain,
    TopicName,
    is_sla_or_heartbeat_namespace,
)
from pulsar_lookup_gateway.lookup.view import BrokerRegistry, ClusterView


@dataclass(frozen=True, slots=True)
class ResolvePolicy:
    """What resolve() needs from the gateway's configuration."""

    # clusterName: the local cluster, for the geo-replication checks (None: they are skipped).
    cluster_name: str | None = None
    # kafkaListenerMap, mqttListenerMap, grpcListenerMap, kafkaProtocolMap: which listener gets
    # which protocol-handler endpoint (lookup.protocol_data's resolve_protocol).
    protocol_listeners: ProtocolListeners = NO_PROTOCOL_LISTENERS
    # loadManagerServiceUnitStateTableViewClassName under the extensible load manager: True,
    # the metadata-store table view (read /service_unit_state); False, the system-topic one
    # (never read it: a tree left there is stale); None, unset (the tree's presence tells).
    table_view: bool | None = None


class ResponseKind(StrEnum):
    CONNECT = "connect"
    REDIRECT = "redirect"


@dataclass(frozen=True, slots=True)
class BrokerUrls:
    service_url: str | None
    service_url_tls: str | None
    http_url: str | None
    http_url_tls: str | None

    def service_url_for(self, tls: bool) -> str | None:
        return self.service_url_tls if tls else self.service_url


@dataclass(frozen=True, slots=True)
class LookupAnswer:
    topic: TopicName
    bundle: BundleRange
    response: ResponseKind
    authoritative: bool
    broker_id: str | None
    urls: BrokerUrls
    listener: ListenerChoice
    # The peer cluster a geo-replicated namespace is redirected to (broker_id is None then).
    peer_cluster: str | None = None
    # A broker gave this answer (the gateway forwarded the lookup), not the metadata store:
    # no write tells when it goes stale, so it is kept apart (serving.forwarded_lookups).
    forwarded: bool = False

    @property
    def needs_broker(self) -> bool:
        """Whether only a broker can turn this answer into Connect: a redirect within this
        cluster (a bundle the metadata does not show an owner for)."""
        return self.response is ResponseKind.REDIRECT and self.peer_cluster is None


def namespace_bundle(topic: TopicName, view: ClusterView) -> BundleRange:
    """The bundle a topic belongs to; fails if its namespace does not exist."""
    namespace = topic.namespace_name
    bundles = view.bundles(namespace)
    if bundles is None:
        raise namespace_not_found(namespace)
    return bundles.find(topic_hash(topic.full))


def resolve_partitions(
    topic: TopicName, view: ClusterView, policy: ResolvePolicy = ResolvePolicy()
) -> int:
    """Partitioned-topic metadata: the partition count, 0 for a non-partitioned topic. The
    namespace checks of a lookup apply (a namespace served by a peer cluster passes: its
    partitions are in the configuration store all clusters share)."""
    policies = view.policies(topic.namespace_name)
    if policies is None:
        raise namespace_not_found(topic.namespace_name)
    _check_namespace(topic, policies, view, policy)
    return view.partitions(topic)


def resolve(
    topic: TopicName,
    choice: ListenerChoice,
    view: ClusterView,
    policy: ResolvePolicy = ResolvePolicy(),
) -> LookupAnswer:
    namespace = topic.namespace_name
    policies = view.policies(namespace)
    if policies is None:
        raise namespace_not_found(namespace)
    peer = _check_namespace(topic, policies, view, policy)
    bundle = namespace_bundle(topic, view)
    if peer is not None:
        return _peer_redirect(topic, bundle, choice, *peer)
    registry = view.broker_registry()
    if registry.extensible:
        named = _named_by_load_manager(topic, view, registry)
        if named is not None:
            urls = _registered_urls(named, namespace, bundle, choice, registry)
            return LookupAnswer(topic, bundle, ResponseKind.CONNECT, True, named, urls, choice)
        if reads_table_view(view, policy):
            owner_id = _table_view_owner(view, namespace, bundle)
            if owner_id is not None:
                urls = _registered_urls(owner_id, namespace, bundle, choice, registry)
                return LookupAnswer(
                    topic, bundle, ResponseKind.CONNECT, True, owner_id, urls, choice
                )
        # Without the metadata-store table view, ownership is in a system topic the gateway
        # cannot read: any broker can find the owner or assign the bundle.
        return _unowned(topic, bundle, choice, view, registry)
    owner = view.ownership(namespace, bundle.name)
    if owner is not None:
        if owner.disabled:
            # Pulsar's NamespaceService fails the lookup with an IllegalStateException carrying
            # this message, and the broker's lookup handler answers an IllegalStateException as
            # MetadataError (FailureKind.BUNDLE_UNLOADING), not as ServiceNotReady.
            raise LookupFailure(
                FailureKind.BUNDLE_UNLOADING,
                f"Namespace bundle {namespace}/{bundle.name} is being unloaded",
            )
        broker_id, urls = _owner_urls(
            owner, ownership_path(namespace, bundle.name), choice, registry
        )
        return LookupAnswer(topic, bundle, ResponseKind.CONNECT, True, broker_id, urls, choice)
    return _unowned(topic, bundle, choice, view, registry)


# -- namespace checks (Pulsar's global-namespace validation) -----------------------------------

# Topics a broker must reach even in a namespace being deleted (to clean it up): the topic
# policies' events, transaction buffer snapshots and pending-ack stores, and the system namespace.
_SYSTEM_TOPIC_PREFIXES = ("__change_events", "__transaction_buffer_snapshot")
_SYSTEM_TOPIC_SUFFIX = "__transaction_pending_ack"


def _is_system_topic(topic: TopicName) -> bool:
    if (topic.tenant, topic.namespace) == ("pulsar", "system"):
        return True
    local = topic.base.local_name
    return local.startswith(_SYSTEM_TOPIC_PREFIXES) or local.endswith(_SYSTEM_TOPIC_SUFFIX)


def _check_namespace(
    topic: TopicName, policies: NamespacePolicies, view: ClusterView, policy: ResolvePolicy
) -> tuple[str, ClusterData] | None:
    """Pulsar's checks of a namespace before a lookup: a deleted namespace fails; with a
    cluster name, a namespace whose replication (or allowed) clusters do not name the local
    cluster goes to the first of the local cluster's peerClusterNames that they name, or fails.
    Returns (peer name, its cluster data) for a redirect, None to go on locally."""
    namespace = topic.namespace_name
    if is_sla_or_heartbeat_namespace(str(namespace)):
        return None  # a broker's own namespace: no cluster checks
    if policies.deleted and not _is_system_topic(topic):
        # The broker answers "not found" with this message (binary TopicNotFound, HTTP 404).
        raise LookupFailure(FailureKind.NAMESPACE_DELETED, "Namespace is deleted")
    local = policy.cluster_name
    if local is None:
        return None
    replication, allowed = policies.replication_clusters, policies.allowed_clusters
    if not replication and not allowed:
        raise LookupFailure(
            FailureKind.NOT_IN_CLUSTER,
            "Namespace does not have any clusters configured : "
            f"local_cluster={local} ns={namespace}",
        )
    if local in replication or local in allowed:
        return None
    own = view.cluster(local)
    for peer in (own.peer_cluster_names or []) if own is not None else []:
        if peer in replication or peer in allowed:
            data = view.cluster(peer)
            if data is None:
                raise LookupFailure(
                    FailureKind.PEER_CLUSTER_MISSING, f"Peer cluster {peer} data not found"
                )
            return peer, data
    raise LookupFailure(
        FailureKind.NOT_IN_CLUSTER,
        "Namespace missing local cluster name in clusters list: "
        f"local_cluster={local} ns={namespace} clusters=[{', '.join(replication)}]",
    )


def _peer_redirect(
    topic: TopicName, bundle: BundleRange, choice: ListenerChoice, name: str, peer: ClusterData
) -> LookupAnswer:
    """An authoritative redirect to a peer cluster, with the cluster's own URLs whatever the
    listener (cluster data has no listeners)."""
    if not peer.broker_service_url and not peer.broker_service_url_tls:
        raise LookupFailure(
            FailureKind.NOT_IN_CLUSTER, "Redirected cluster's brokerService url is not configured"
        )
    urls = BrokerUrls(
        peer.broker_service_url or None,
        peer.broker_service_url_tls or None,
        peer.service_url or None,
        peer.service_url_tls or None,
    )
    return LookupAnswer(
        topic, bundle, ResponseKind.REDIRECT, True, None, urls, choice, peer_cluster=name
    )


# -- extensible load manager -------------------------------------------------------------------

#: The extensible load manager's own topics (ExtensibleLoadManagerImpl's internal topics, matched
#: by prefix as it does): they belong to the broker that owns its channel, never in the table view.
_LOAD_MANAGER_TOPICS = (
    "persistent://pulsar/system/loadbalancer-service-unit-state",
    "non-persistent://pulsar/system/loadbalancer-broker-load-data",
    "non-persistent://pulsar/system/loadbalancer-top-bundles-load-data",
)
# A broker's heartbeat (v1 `pulsar/<cluster>/<host:port>`, v2 `pulsar/<host:port>`) and SLA
# monitor (`sla-monitor/<cluster>/<host:port>`) namespaces name the broker (its id) last.
_BROKER_NAMESPACE = re.compile(
    r"pulsar/(?:[^/]+/)?([^/:]+:[0-9]+)|sla-monitor/[^/]+/([^/:]+:[0-9]+)"
)


def reads_table_view(view: ClusterView, policy: ResolvePolicy) -> bool:
    """Whether bundle ownership is read from /service_unit_state (extensible load manager):
    as the brokers' table view is configured, else where the tree is present."""
    if policy.table_view is not None:
        return policy.table_view
    return view.uses_table_view()


def _named_by_load_manager(
    topic: TopicName, view: ClusterView, registry: BrokerRegistry
) -> str | None:
    """The broker the extensible load manager gives a topic without looking at the table view
    (ExtensibleLoadManagerImpl's lookup): its own topics to the channel owner (the leader at
    /loadbalance/extension/leader), a heartbeat or SLA-monitor namespace to the broker it
    names. None for every other topic."""
    if topic.full.startswith(_LOAD_MANAGER_TOPICS):
        leader = view.extension_leader()
        owner = None
        if leader is not None:
            owner = leader.broker_id or registry.by_url.get(leader.service_url or "")
        if not owner:
            raise LookupFailure(
                FailureKind.NO_BROKER, "the load manager has no channel owner now; retry"
            )
        return owner
    named = _BROKER_NAMESPACE.fullmatch(f"{topic.tenant}/{topic.namespace}")
    if named is None:
        return None
    return named.group(1) or named.group(2)


def _table_view_owner(
    view: ClusterView, namespace: NamespaceName, bundle: BundleRange
) -> str | None:
    """The broker a lookup connects to under the extensible load manager's table view, as its
    brokers answer a lookup they do not own: Owned -> the owner; Splitting -> the source broker
    (it keeps serving until the split is done); Assigning and Releasing -> the destination broker,
    which holds the client until it owns the bundle (none when released without one); Init and
    Free (or no node) -> nobody owns it (None); Deleted -> a retriable failure."""
    data = view.service_unit_state(namespace, bundle.name)
    if data is None:
        return None
    state = data.state
    if state is ServiceUnitState.DELETED:
        # Brokers fail it with an IllegalArgumentException, which they answer as
        # ServiceNotReady: the client retries and finds the bundle's split children.
        raise LookupFailure(FailureKind.BUNDLE_DELETED, f"{namespace}/{bundle.name} is deleted.")
    if state is ServiceUnitState.OWNED:
        return _required(data, data.dst_broker, "dstBroker", namespace, bundle)
    if state is ServiceUnitState.SPLITTING:
        return _required(data, data.source_broker, "sourceBroker", namespace, bundle)
    if state in (ServiceUnitState.ASSIGNING, ServiceUnitState.RELEASING):
        return data.dst_broker or None
    return None  # Init, Free


def _required(
    data: ServiceUnitStateData,
    broker: str | None,
    key: str,
    namespace: NamespaceName,
    bundle: BundleRange,
) -> str:
    if not broker:
        path = service_unit_state_path(namespace, bundle.name)
        raise MalformedNode(path, f"state {data.state.value} without {key}")
    return broker


def _registered_urls(
    broker_id: str,
    namespace: NamespaceName,
    bundle: BundleRange,
    choice: ListenerChoice,
    registry: BrokerRegistry,
) -> BrokerUrls:
    """A registered broker's URLs for the listener (see `registered_owner`)."""
    broker = registered_owner(registry, broker_id, namespace, bundle)
    urls = broker_urls(broker, choice)
    if urls is None:
        raise listener_missing(choice.name)
    return urls


def registered_owner(
    registry: BrokerRegistry,
    broker_id: str,
    namespace: NamespaceName,
    bundle: BundleRange,
    *,
    name_it: bool = False,
) -> BrokerData:
    """The registration of the broker that owns `bundle`: a malformed one raises its
    MalformedNode; an owner without a registration fails as Pulsar's brokers fail it
    (MetadataError), retriable: it is restarting or gone, and the load manager moves its
    bundles. `name_it`: the failure names the owner's id too."""
    if broker_id in registry.invalid:
        raise registry.invalid[broker_id]
    broker = registry.brokers.get(broker_id)
    if broker is None:
        message = f"the owner of bundle {namespace}/{bundle.name} is not registered; retry"
        detail = f"owner {broker_id}" if name_it else None
        raise LookupFailure(FailureKind.OWNER_INACTIVE, message, detail)
    return broker


def namespace_not_found(namespace: NamespaceName) -> LookupFailure:
    """Master's answer (PulsarWebResource.checkLocalOrGetPeerReplicationCluster): binary
    TopicNotFound, HTTP 404, with its message; the log's detail names the namespace."""
    return LookupFailure(
        FailureKind.NAMESPACE_NOT_FOUND, NAMESPACE_NOT_FOUND_MESSAGE, f"no policies for {namespace}"
    )


def listener_missing(name: str | None) -> LookupFailure:
    """What a broker answers for a listener it does not advertise (Pulsar's own wording)."""
    return LookupFailure(FailureKind.LISTENER_NOT_FOUND, f"the broker do not have {name} listener")


def _from_listener(
    listener: ListenerUrls,
    choice: ListenerChoice,
    default_http: str | None,
    default_https: str | None,
) -> BrokerUrls:
    # Pulsar fills a listener's missing web URLs with the broker's defaults, but those are
    # internal addresses: only the internal listener gets them. A client of any other listener
    # gets its listener's own URLs ("" where it has none, as Pulsar answers brokerUrlSsl).
    if not choice.internal:
        default_http = default_https = None
    return BrokerUrls(
        listener.broker_service_url,
        listener.broker_service_url_tls,
        listener.broker_http_url or default_http,
        listener.broker_https_url or default_https,
    )


def _owner_urls(
    owner: OwnershipData, path: str, choice: ListenerChoice, registry: BrokerRegistry
) -> tuple[str | None, BrokerUrls]:
    broker_id = _owner_id(owner, registry)
    registration = registry.brokers.get(broker_id) if broker_id is not None else None
    http = owner.http_url or (registration.web_service_url if registration else None)
    https = owner.http_url_tls or (registration.web_service_url_tls if registration else None)
    if choice.uses_listener_urls:
        listener = owner.advertised_listeners.get(choice.name or "")
        if listener is None and registration is not None:
            listener = registration.advertised_listeners.get(choice.name or "")
        if listener is None:
            raise listener_missing(choice.name)
        return broker_id, _from_listener(listener, choice, http, https)
    native = owner.native_url or (registration.pulsar_service_url if registration else None)
    native_tls = owner.native_url_tls or (
        registration.pulsar_service_url_tls if registration else None
    )
    if native is None and native_tls is None:
        raise MalformedNode(path, "the owner advertises neither nativeUrl nor nativeUrlTls")
    return broker_id, BrokerUrls(native, native_tls, http, https)


def _owner_id(owner: OwnershipData, registry: BrokerRegistry) -> str | None:
    if owner.broker_id is not None:
        return owner.broker_id
    for url in (owner.native_url, owner.native_url_tls, owner.http_url, owner.http_url_tls):
        if url and url in registry.by_url:
            return registry.by_url[url]
    return None


def broker_urls(broker: BrokerData, choice: ListenerChoice) -> BrokerUrls | None:
    """A registered broker's URLs for the chosen listener, None if it lacks that listener."""
    if choice.uses_listener_urls:
        listener = broker.advertised_listeners.get(choice.name or "")
        if listener is None:
            return None
        return _from_listener(listener, choice, broker.web_service_url, broker.web_service_url_tls)
    return BrokerUrls(
        broker.pulsar_service_url,
        broker.pulsar_service_url_tls,
        broker.web_service_url,
        broker.web_service_url_tls,
    )


def _unowned(
    topic: TopicName,
    bundle: BundleRange,
    choice: ListenerChoice,
    view: ClusterView,
    registry: BrokerRegistry,
) -> LookupAnswer:
    """A bundle nobody owns: always a non-authoritative redirect. Only a load manager may
    choose the bundle's broker; an authoritative redirect would make the target take the bundle
    without its placement rules. The target is the modular load manager's leader (as Pulsar's
    other brokers redirect), else a live broker chosen by the bundle's hash, so that the
    lookups of different bundles spread over the brokers and every gateway picks the same one.
    Under the extensible load manager every broker assigns the bundles it is asked about (its
    leader, /loadbalance/extension/leader, only owns the system topics), so the hash decides."""
    if not registry.brokers:
        raise LookupFailure(FailureKind.NO_BROKER, "No broker was available")
    if not registry.extensible:
        leader_id = _leader_id(view, registry)
        if leader_id is not None:
            leader_urls = broker_urls(view.broker(leader_id), choice)
            if leader_urls is None:
                raise listener_missing(choice.name)
            return LookupAnswer(
                topic, bundle, ResponseKind.REDIRECT, False, leader_id, leader_urls, choice
            )
    broker_id, urls = _by_bundle_hash(topic, bundle, choice, registry.brokers)
    return LookupAnswer(topic, bundle, ResponseKind.REDIRECT, False, broker_id, urls, choice)


def _leader_id(view: ClusterView, registry: BrokerRegistry) -> str | None:
    leader = view.leader()
    if leader is None:
        return None
    if leader.broker_id is not None and leader.broker_id in registry.brokers:
        return leader.broker_id
    if leader.service_url is not None:
        return registry.by_url.get(leader.service_url)
    return None


def _by_bundle_hash(
    topic: TopicName,
    bundle: BundleRange,
    choice: ListenerChoice,
    brokers: Mapping[str, BrokerData],
) -> tuple[str, BrokerUrls]:
    """Rendezvous hashing of the bundle over the brokers that serve the topic's domain and have
    the chosen listener: the broker with the highest CRC-32 of (broker id, bundle). A broker
    joining or leaving moves only the bundles that hash to it."""
    key = f"\0{topic.tenant}/{topic.namespace}/{bundle.name}".encode()
    best: tuple[int, str, BrokerUrls] | None = None
    for broker_id, broker in brokers.items():
        if topic.domain is TopicDomain.PERSISTENT and not broker.persistent_topics_enabled:
            continue
        if topic.domain is TopicDomain.NON_PERSISTENT and not broker.non_persistent_topics_enabled:
            continue
        urls = broker_urls(broker, choice)
        if urls is None:
            continue
        score = zlib.crc32(broker_id.encode() + key)
        if best is None or score > best[0] or (score == best[0] and broker_id < best[1]):
            best = (score, broker_id, urls)
    if best is None:
        if choice.uses_listener_urls:
            raise listener_missing(choice.name)
        raise LookupFailure(
            FailureKind.NO_BROKER, f"No broker was available for {topic.domain.value} topics"
        )
    return best[1], best[2]


def broker_fingerprint(view: ClusterView) -> tuple[object, ...]:
    """What resolve() reads of the registered brokers, comparable between two views: a broker
    rewrites its registration with every load report, and an answer kept across such a write
    holds while this is unchanged. Raises NodeNotLoaded where the view cannot tell."""
    registry = view.broker_registry()
    brokers = tuple(
        (
            broker_id,
            b.web_service_url,
            b.web_service_url_tls,
            b.pulsar_service_url,
            b.pulsar_service_url_tls,
            b.persistent_topics_enabled,
            b.non_persistent_topics_enabled,
            tuple(sorted(b.advertised_listeners.items())),
            tuple(sorted(b.protocols.items())),
            b.load_manager_class_name,
        )
        for broker_id, b in sorted(registry.brokers.items())
    )
    return brokers, tuple(sorted(registry.invalid))
