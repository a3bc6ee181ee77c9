"""The ownership watch's view of one topic: what a client is told (owner, unowned, an error),
the generation that dates it, and which metadata changes may change it.

Pure: reads a ClusterView, and the LookupAnswer or LookupFailure the lookup service made from
that same view (so the URLs are exactly `/lookup/v2/topic`'s), never does I/O.

Generation: the ZooKeeper zxid of the newest change behind the answer (ClusterView.zxid):

- owner: the ownership node's mzxid, the owner's registration's czxid (a registration is
  rewritten by every load report, its URLs only by a new registration), the pzxid of
  `/loadbalance/brokers` (the list the owner was found alive in), and the mzxid of the node
  that holds the namespace's bundles (policies, local policies);
- unowned: that bundles node, the ownership node if it is there (being unloaded, or its owner
  gone), the pzxid of the namespace's ownership parent (the zxid of the last ownership node
  created or deleted under it: a deletion dates the "unowned" after it), and where the owner's
  registration decides, the pzxid of `/loadbalance/brokers`.

Every input is a zxid of the cluster's ZooKeeper, so every gateway computes the same number for
the same state, and a restart changes nothing. A change of the answer is a newer write to one
of these nodes or lists, so the number grows with it.

Both "owner" and "unowned" (where a registration decides) read the list of registrations, so
both are dated by it: the view is read node by node, and a node can be served stale while a
list read after it is new (an owner B read, then B's deregistration at 700, while B had handed
the bundle to C at 690): "unowned" at 700, then, once the node is read again, "owner C" is at
700 too, not 690, and is told (`supersedes`: an equal generation with another answer is the
later read, never dropped). A stable state has one generation on every gateway.

While ZooKeeper's notifications of one change arrive one after the other, the view can be
half-way: an ownership node (or a registration) already read as deleted while its parent's
list still names it. `settled` is False for such a state: nothing is told until the list is
read again (its own notification follows).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from enum import StrEnum

from pulsar_lookup_gateway.lookup.auto_creation import managed_ledger_path
from pulsar_lookup_gateway.lookup.bundles import BundleRange
from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure, NodeNotLoaded
from pulsar_lookup_gateway.lookup.model import (
    BROKERS_ROOT,
    BrokerData,
    broker_path,
    local_policies_path,
    ownership_path,
    parse_broker,
    partitioned_path,
    policies_path,
    service_unit_state_path,
)
from pulsar_lookup_gateway.lookup.resolve import LookupAnswer, ResponseKind, namespace_bundle
from pulsar_lookup_gateway.lookup.topics import NamespaceName, TopicDomain, TopicName
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.lookup.write_keys import BROKERS, Key


class TopicStateKind(StrEnum):
    OWNER = "owner"
    UNOWNED = "unowned"
    ERROR = "error"


class ErrorCode(StrEnum):
    """Per-topic error codes (the stream stays open)."""

    INVALID_TOPIC = "invalid_topic"
    NOT_FOUND = "not_found"
    NOT_AUTHORIZED = "not_authorized"
    # The owner advertises no URLs for the stream's listener (a lookup fails the same way).
    LISTENER_NOT_FOUND = "listener_not_found"
    # The gateway cannot tell now (metadata unreachable or malformed, too many lookups): it
    # keeps trying, and tells the answer once it can.
    UNAVAILABLE = "unavailable"


_ERROR_CODES: dict[FailureKind, ErrorCode] = {
    FailureKind.INVALID_TOPIC: ErrorCode.INVALID_TOPIC,
    FailureKind.NAMESPACE_NOT_FOUND: ErrorCode.NOT_FOUND,
    FailureKind.NAMESPACE_DELETED: ErrorCode.NOT_FOUND,
    FailureKind.TOPIC_NOT_FOUND: ErrorCode.NOT_FOUND,
    FailureKind.NOT_AUTHORIZED: ErrorCode.NOT_AUTHORIZED,
    FailureKind.LISTENER_NOT_FOUND: ErrorCode.LISTENER_NOT_FOUND,
}
#: Failures that mean nobody (alive) owns the bundle now: told as "unowned".
_UNOWNED_FAILURES = frozenset(
    {
        FailureKind.BUNDLE_UNLOADING,  # the owner is giving the bundle up
        FailureKind.OWNER_INACTIVE,  # the owner's registration is gone
        FailureKind.NO_BROKER,
        FailureKind.BUNDLE_DELETED,  # split: the client looks it up again
    }
)
#: Failures of the moment (not of the cluster's state): tried again, never told over an answer.
TRANSIENT_FAILURES = frozenset({FailureKind.METADATA_UNAVAILABLE, FailureKind.TOO_MANY_REQUESTS})

#: What an answer depends on, as keys the watch indexes topics by (lookup.write_keys: the one
#: rule of what a write may change, which the watch hears through the answer memo):
#: ("ns", tenant, ns) policies and local policies; ("tenant", tenant) its admin roles;
#: ("bundle", tenant, ns, bundle) the ownership node; ("children", tenant, ns) the list of
#: ownership nodes; ("topics", tenant, ns) the topics that exist; ("broker", id) one
#: registration; ("brokers",) the list of registrations; ("all",) anything; ("absent", tenant,
#: ns) marks a topic not found: the watch keeps it by the paths of its own nodes (absence_paths),
#: not by namespace, so a ledger written in the namespace re-looks-up no made-up name.
ABSENT = "absent"


@dataclass(frozen=True, slots=True)
class TopicState:
    """What the watch says about one topic. `owner`, `bundle`: for the watch's bookkeeping."""

    kind: TopicStateKind
    generation: int = 0
    service_url: str | None = None
    service_url_tls: str | None = None
    http_url: str | None = None
    http_url_tls: str | None = None
    code: ErrorCode | None = None
    message: str = field(default="", compare=False)
    owner: str | None = field(default=None, compare=False)
    bundle: str | None = field(default=None, compare=False)

    @property
    def dated(self) -> bool:
        return self.kind is not TopicStateKind.ERROR

    def message_json(self, topic: str) -> str:
        """The message a client gets (one JSON text frame)."""
        body: dict[str, object] = {"type": self.kind.value, "topic": topic}
        if self.kind is TopicStateKind.ERROR:
            body["code"] = self.code.value if self.code is not None else ErrorCode.UNAVAILABLE
            body["message"] = self.message
            return json.dumps(body)
        body["generation"] = self.generation
        if self.kind is TopicStateKind.OWNER:
            for key, url in (
                ("brokerUrl", self.service_url),
                ("brokerUrlTls", self.service_url_tls),
                ("httpUrl", self.http_url),
                ("httpUrlTls", self.http_url_tls),
            ):
                if url:  # absent where /lookup/v2/topic gives none ("")
                    body[key] = url
        return json.dumps(body)


def supersedes(state: TopicState, last: TopicState | None) -> bool:
    """Whether `state` is news after `last`, told before: another answer not dated older, or
    the same answer dated newer (an older generation is a late read)."""
    if last is None:
        return True
    if state == last:
        return False
    return not (state.dated and last.dated and state.generation < last.generation)


def error_state(code: ErrorCode, message: str) -> TopicState:
    return TopicState(TopicStateKind.ERROR, code=code, message=message)


# -- the state of a topic -------------------------------------------------------------------


def answered_state(answer: LookupAnswer, view: ClusterView) -> TopicState | None:
    """The state behind a lookup answer made from `view` (None: the view is half-way)."""
    topic, bundle = answer.topic, answer.bundle
    namespace = topic.namespace_name
    base = _bundles_zxid(view, namespace)
    if answer.peer_cluster is not None:
        # Another cluster serves the namespace: its URLs, as a binary lookup's redirect.
        urls = answer.urls
        return TopicState(
            TopicStateKind.OWNER, base, urls.service_url, urls.service_url_tls,
            urls.http_url, urls.http_url_tls, bundle=bundle.name,
        )  # fmt: skip
    try:
        node = _ownership_node(view, namespace, bundle)
        if answer.response is ResponseKind.CONNECT:
            registry = view.broker_registry()
            owner = answer.broker_id
            if owner is not None and owner in registry.brokers:
                generation = max(base, view.zxid(broker_path(owner)), view.zxid(BROKERS_ROOT + "/"))
                if node is not None:
                    generation = max(generation, view.zxid(node))
                urls = answer.urls
                return TopicState(
                    TopicStateKind.OWNER, generation, urls.service_url, urls.service_url_tls,
                    urls.http_url, urls.http_url_tls, owner=owner, bundle=bundle.name,
                )  # fmt: skip
            # An owner without a live registration: nobody serves the bundle.
            return _unowned(view, namespace, bundle, node, base, registrations=True)
        # A non-authoritative redirect: nobody owns the bundle.
        if node is not None and view.listed(node) and not view.exists(node):
            return None  # read as deleted, still listed: the list's notification follows
        return _unowned(view, namespace, bundle, node, base, registrations=node is None)
    except NodeNotLoaded:
        return None  # (the lookup read all of it; the view changed since: try again)


def failed_state(topic: TopicName, failure: LookupFailure, view: ClusterView) -> TopicState | None:
    """The state behind a failed lookup of `topic` made from `view` (None: half-way, or a
    failure of the moment; TRANSIENT_FAILURES tells which)."""
    kind = failure.kind
    if kind in TRANSIENT_FAILURES:
        return None
    if kind in _UNOWNED_FAILURES:
        namespace = topic.namespace_name
        try:
            bundle = namespace_bundle(topic, view)
            node = _ownership_node(view, namespace, bundle)
            base = _bundles_zxid(view, namespace)
            return _unowned(view, namespace, bundle, node, base, registrations=True)
        except (NodeNotLoaded, LookupFailure):
            return None
    code = _ERROR_CODES.get(kind, ErrorCode.UNAVAILABLE)
    return error_state(code, failure.message)


def _unowned(
    view: ClusterView,
    namespace: NamespaceName,
    bundle: BundleRange,
    node: str | None,
    base: int,
    *,
    registrations: bool,
) -> TopicState | None:
    """The "unowned" state, dated by the ownership list (and node, if there), and where the
    owner's registration decides, by the list of registrations (None while one is half-way)."""
    generation = base
    if node is not None:
        generation = max(generation, view.zxid(node), view.zxid(node.rpartition("/")[0] + "/"))
    if registrations:
        if not _registrations_settled(view):
            return None
        generation = max(generation, view.zxid(BROKERS_ROOT + "/"))
    return TopicState(TopicStateKind.UNOWNED, generation, bundle=bundle.name)


def _registrations_settled(view: ClusterView) -> bool:
    """False while a registration is read as deleted but still listed."""
    for name in view.children(BROKERS_ROOT):
        path = broker_path(name)
        if not view.exists(path):
            return False
    return True


def _ownership_node(view: ClusterView, namespace: NamespaceName, bundle: BundleRange) -> str | None:
    """Where the bundle's ownership is kept: /namespace (modular load manager), the table
    view's /service_unit_state (extensible), or None (extensible, in a system topic)."""
    if view.broker_registry().extensible:
        if view.uses_table_view():
            return service_unit_state_path(namespace, bundle.name)
        return None
    return ownership_path(namespace, bundle.name)


def _bundles_zxid(view: ClusterView, namespace: NamespaceName) -> int:
    return max(view.zxid(policies_path(namespace)), view.zxid(local_policies_path(namespace)))


# -- what a change may affect -----------------------------------------------------------------


def depends_on(topic: TopicName, state: TopicState | None) -> frozenset[Key]:
    """The keys of the changes that may change `state` (None: a state not known yet, or
    half-way: anything about its bundle and the brokers may settle it). The same set object
    for every topic of a bundle in the same state: thousands of watched topics cost a few
    sets, not a set and its tuples each (a full garbage collection walks every one)."""
    kind = state.kind if state is not None else None
    if kind is TopicStateKind.ERROR and state is not None:
        if state.code is ErrorCode.NOT_FOUND:  # (the namespace's policies, the topic's nodes)
            return _policy_keys(topic.tenant, topic.namespace, True)
        if state.code is ErrorCode.NOT_AUTHORIZED:  # (the namespace's and tenant's policies)
            return _policy_keys(topic.tenant, topic.namespace, False)
    bundle = state.bundle if state is not None else None
    owner = state.owner if state is not None and kind is TopicStateKind.OWNER else None
    return _keys(topic.tenant, topic.namespace, kind, bundle, owner)


@functools.lru_cache(maxsize=4096)
def _policy_keys(tenant: str, namespace: str, absent: bool) -> frozenset[Key]:
    keys: set[Key] = {("ns", tenant, namespace), ("tenant", tenant)}
    if absent:
        keys.add((ABSENT, tenant, namespace))
    return frozenset(keys)


def absence_paths(topic: TopicName) -> tuple[str, ...]:
    """The nodes whose appearance may find a topic not found now: its managed ledger, its
    partitioned metadata, and a partition's base's (auto_creation.topic_exists)."""
    paths = [partitioned_path(topic)]
    if topic.domain is TopicDomain.PERSISTENT:
        paths.append(managed_ledger_path(topic))
    if topic.is_partition:
        paths.append(partitioned_path(topic.base))
    return tuple(paths)


@functools.lru_cache(maxsize=4096)
def _keys(
    tenant: str,
    namespace: str,
    kind: TopicStateKind | None,
    bundle: str | None,
    owner: str | None,
) -> frozenset[Key]:
    keys: set[Key] = {("ns", tenant, namespace), ("tenant", tenant)}
    if bundle is not None:
        keys.add(("bundle", tenant, namespace, bundle))
    if owner is not None:
        keys.add(("broker", owner))
    keys.add(BROKERS)  # (an owner is dated by the list of registrations too)
    if kind is not TopicStateKind.OWNER:
        keys.add(("children", tenant, namespace))
    if kind is not TopicStateKind.OWNER and kind is not TopicStateKind.UNOWNED:
        keys.add(("topics", tenant, namespace))
    return frozenset(keys)


def registration_print(view: ClusterView, broker_id: str) -> object:
    """What of a broker's registration a watch answer reads (its date and URLs), to tell a
    load report (rewritten every few seconds, nothing of it read) from a change that counts."""
    path = broker_path(broker_id)
    try:
        if not view.listed(path):
            return None
        data = view.node(path, parse_broker)
    except (NodeNotLoaded, LookupFailure):
        return ("unreadable", view.zxid(path))
    return (view.zxid(path), _urls_of(data)) if data is not None else None


def _urls_of(data: BrokerData) -> tuple[object, ...]:
    return (
        data.web_service_url,
        data.web_service_url_tls,
        data.pulsar_service_url,
        data.pulsar_service_url_tls,
        data.persistent_topics_enabled,
        data.non_persistent_topics_enabled,
        data.load_manager_class_name,
        tuple(sorted(data.advertised_listeners.items(), key=lambda item: item[0])),
    )
