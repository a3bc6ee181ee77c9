"""resolve(): topic + chosen listener + cluster view -> the broker address to use.

Pure: reads only the ClusterView. A view that lacks a node raises NodeNotLoaded, and the I/O
shell reads the node and calls again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from lookup.bundles import DEFAULT_NUM_BUNDLES, BundleRange, topic_hash
from lookup.errors import FailureKind, LookupFailure, MalformedNode
from lookup.model import BrokerData, ListenerUrls, OwnershipData, ownership_path
from lookup.selection import ListenerChoice
from lookup.topics import NamespaceName, TopicDomain, TopicName
from lookup.view import BrokerRegistry, ClusterView


class UnownedBundleRedirect(StrEnum):
    """Where a lookup for a bundle nobody owns is sent (a broker must take ownership)."""

    LEADER = "leader"  # as Pulsar's non-leader brokers do: to the load manager leader
    LEAST_LOADED = "least-loaded"  # straight to the least loaded broker, authoritative


@dataclass(frozen=True, slots=True)
class ResolvePolicy:
    default_bundles: int = DEFAULT_NUM_BUNDLES
    unowned_redirect: UnownedBundleRedirect = UnownedBundleRedirect.LEADER


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


def namespace_bundle(topic: TopicName, view: ClusterView, policy: ResolvePolicy) -> BundleRange:
    """The bundle a topic belongs to; fails if its namespace does not exist."""
    namespace = topic.namespace_name
    bundles = view.bundles(namespace, policy.default_bundles)
    if bundles is None:
        raise _namespace_not_found(namespace)
    return bundles.find(topic_hash(topic.full))


def resolve_partitions(topic: TopicName, view: ClusterView) -> int:
    """Partitioned-topic metadata: the partition count, 0 for a non-partitioned topic."""
    if view.policies(topic.namespace_name) is None:
        raise _namespace_not_found(topic.namespace_name)
    return view.partitions(topic)


def resolve(
    topic: TopicName,
    choice: ListenerChoice,
    view: ClusterView,
    policy: ResolvePolicy = ResolvePolicy(),
) -> LookupAnswer:
    bundle = namespace_bundle(topic, view, policy)
    namespace = topic.namespace_name
    registry = view.broker_registry()
    if not registry.extensible:
        owner = view.ownership(namespace, bundle.name)
        if owner is not None:
            if owner.disabled:
                raise LookupFailure(
                    FailureKind.BUNDLE_UNLOADING,
                    f"Namespace bundle {namespace}/{bundle.name} is being unloaded",
                )
            broker_id, urls = _owner_urls(
                owner, ownership_path(namespace, bundle.name), choice, registry
            )
            return LookupAnswer(topic, bundle, ResponseKind.CONNECT, True, broker_id, urls, choice)
    broker_id, urls, authoritative = _redirect_target(topic, choice, view, registry, policy)
    return LookupAnswer(
        topic, bundle, ResponseKind.REDIRECT, authoritative, broker_id, urls, choice
    )


def _namespace_not_found(namespace: NamespaceName) -> LookupFailure:
    return LookupFailure(
        FailureKind.NAMESPACE_NOT_FOUND, f"Policies not found for {namespace} namespace"
    )


def _listener_missing(name: str | None) -> LookupFailure:
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
            raise _listener_missing(choice.name)
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


def _broker_urls(broker: BrokerData, choice: ListenerChoice) -> BrokerUrls | None:
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


def _redirect_target(
    topic: TopicName,
    choice: ListenerChoice,
    view: ClusterView,
    registry: BrokerRegistry,
    policy: ResolvePolicy,
) -> tuple[str, BrokerUrls, bool]:
    """(broker id, its URLs, authoritative) for a bundle that has no owner."""
    if not registry.brokers:
        raise LookupFailure(FailureKind.NO_BROKER, "No broker was available")
    if registry.extensible:
        # Only a broker can find the owner; let it do the lookup (non-authoritative).
        broker_id, urls = _least_loaded(topic, choice, registry.brokers)
        return broker_id, urls, False
    if policy.unowned_redirect is UnownedBundleRedirect.LEADER:
        leader_id = _leader_id(view, registry)
        if leader_id is not None:
            leader_urls = _broker_urls(view.broker(leader_id), choice)
            if leader_urls is None:
                raise _listener_missing(choice.name)
            return leader_id, leader_urls, False
    broker_id, urls = _least_loaded(topic, choice, registry.brokers)
    return broker_id, urls, True


def _leader_id(view: ClusterView, registry: BrokerRegistry) -> str | None:
    leader = view.leader()
    if leader is None:
        return None
    if leader.broker_id is not None and leader.broker_id in registry.brokers:
        return leader.broker_id
    if leader.service_url is not None:
        return registry.by_url.get(leader.service_url)
    return None


def _least_loaded(
    topic: TopicName, choice: ListenerChoice, brokers: Mapping[str, BrokerData]
) -> tuple[str, BrokerUrls]:
    """The least loaded broker (maxResourceUsage, then id) that serves the topic's domain and
    has the chosen listener."""
    best: tuple[float, str, BrokerUrls] | None = None
    for broker_id, broker in brokers.items():
        if topic.domain is TopicDomain.PERSISTENT and not broker.persistent_topics_enabled:
            continue
        if topic.domain is TopicDomain.NON_PERSISTENT and not broker.non_persistent_topics_enabled:
            continue
        urls = _broker_urls(broker, choice)
        if urls is None:
            continue
        usage = broker.max_resource_usage
        key = (usage if usage is not None else float("inf"), broker_id, urls)
        if best is None or key[:2] < best[:2]:
            best = key
    if best is None:
        if choice.uses_listener_urls:
            raise _listener_missing(choice.name)
        raise LookupFailure(
            FailureKind.NO_BROKER, f"No broker was available for {topic.domain.value} topics"
        )
    return best[1], best[2]
