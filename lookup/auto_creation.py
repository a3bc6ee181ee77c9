"""Partitioned-topic metadata and topic auto-creation: what a broker answers, decided without I/O.

Pulsar's broker rules (BrokerService / ServerCnx / TopicLookupBase), as the gateway applies them:

- **May a missing topic be created?** Not in a namespace whose policies say ``deleted``, and
  never the extensible load manager's own topics (``pulsar/system/loadbalancer-*``). Pulsar's
  system topics, and every topic of a system service namespace (a broker's heartbeat
  namespace ``pulsar/<host:port>``, ``pulsar/system``; NamespaceService.
  isSystemServiceNamespace), may always be created (``systemTopicEnabled``). Otherwise the namespace
  policy's ``autoTopicCreationOverride.allowAutoTopicCreation`` decides when the policy has an
  override, else the broker key ``allowAutoTopicCreation`` (default true).
- **As a partitioned topic?** Never a dead-letter (``-DLQ``) or retry (``-RETRY``) topic;
  otherwise the override's ``topicType``, else ``allowAutoTopicCreationType`` (default
  ``non-partitioned``). It gets the override's ``defaultNumPartitions``, else the broker's
  ``defaultNumPartitions`` (default 1). A partition's own name is never created partitioned.
- **Does a topic exist?** It has partitioned metadata (``/admin/partitioned-topics/...``), or,
  persistent, a managed ledger (a child of ``/managed-ledgers/<tenant>/<ns>/persistent``).
  Non-persistent topics live in brokers' memory only: only a broker can tell.
  The gateway's own addition: a partition (``t-partition-i``) of a partitioned topic with more
  than ``i`` partitions exists, so a client that looks a partition up over HTTP before any
  broker loaded it is not refused.
- **PARTITIONED_METADATA** (binary; HTTP ``/partitions?checkAllowAutoCreation=``): creation is
  wanted when the client allows it (binary field 6, default true; HTTP
  ``checkAllowAutoCreation``, default false) *and* the rules above allow it. A partitioned topic
  answers its count. Without creation: an existing topic answers 0, a missing one
  ``TopicNotFound`` (HTTP 404). With creation: a missing topic that must be created partitioned
  is created by a broker (the gateway only reads, so it asks one), anything else answers 0 (the
  broker creates a non-partitioned topic when a producer or consumer arrives).
- **HTTP lookup** (``/lookup/v2/topic/...``): a persistent topic that does not exist and may not
  be created answers 404 ``Topic not found``; non-persistent topics are not checked.

Pure: reads the ClusterView only; NodeNotLoaded when it lacks a node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure, MalformedNode
from pulsar_lookup_gateway.lookup.model import policies_path
from pulsar_lookup_gateway.lookup.resolve import (
    ResolvePolicy,
    namespace_not_found,
    resolve_partitions,
)
from pulsar_lookup_gateway.lookup.topic_list import MANAGED_LEDGERS_ROOT, is_system_topic
from pulsar_lookup_gateway.lookup.topics import (
    NamespaceName,
    TopicDomain,
    TopicName,
    is_system_service_namespace,
)
from pulsar_lookup_gateway.lookup.view import ClusterView

__all__ = [
    "AskBroker",
    "AutoCreationSettings",
    "CreationOverride",
    "Partitions",
    "TopicNotFound",
    "TopicType",
    "creation_allowed",
    "creation_override",
    "decide",
    "decide_partitions",
    "lookup_allowed",
    "managed_ledger_path",
    "topic_not_found",
]

_DLQ_SUFFIX = "-DLQ"
_RETRY_SUFFIX = "-RETRY"
_LOAD_MANAGER_TOPICS = "pulsar/system/loadbalancer-"
_DEFAULT_POLICY = ResolvePolicy()


class TopicType(StrEnum):
    PARTITIONED = "partitioned"
    NON_PARTITIONED = "non-partitioned"


@dataclass(frozen=True, slots=True)
class AutoCreationSettings:
    """The broker keys (gateway config keys of the same names)."""

    allow: bool = True  # allowAutoTopicCreation
    topic_type: TopicType = TopicType.NON_PARTITIONED  # allowAutoTopicCreationType
    default_partitions: int = 1  # defaultNumPartitions
    system_topics: bool = True  # systemTopicEnabled


@dataclass(frozen=True, slots=True)
class CreationOverride:
    """A namespace policy's ``autoTopicCreationOverride``."""

    allow: bool
    topic_type: TopicType | None = None
    default_partitions: int | None = None


# --- the decisions ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Partitions:
    """Answer with this partition count (0: not partitioned)."""

    count: int


@dataclass(frozen=True, slots=True)
class TopicNotFound:
    """Answer binary TopicNotFound, HTTP 404."""


@dataclass(frozen=True, slots=True)
class AskBroker:
    """Only a broker can answer: it must create the partitioned topic (``auto_creation``), or
    tell whether a non-persistent topic exists (``auto_creation=False``). Forward the request
    with this flag and relay the broker's answer."""

    auto_creation: bool


Decision = Partitions | TopicNotFound | AskBroker


def decide(
    topic: TopicName,
    *,
    partitions: int,
    exists: bool | None,
    create: bool,
    partitioned: bool,
) -> Decision:
    """The table of rules. `partitions`: the topic's partitioned metadata (0: none); `exists`:
    whether it exists (None: only a broker knows, a non-persistent topic); `create`: the client
    allows creation and the rules allow it; `partitioned`: a created topic is partitioned."""
    if partitions > 0:
        return Partitions(partitions)
    if not create:
        if exists is None:
            return AskBroker(auto_creation=False)
        return Partitions(0) if exists else TopicNotFound()
    if exists or not partitioned or topic.is_partition:
        return Partitions(0)
    return AskBroker(auto_creation=True)


def creation_allowed(
    topic: TopicName,
    override: CreationOverride | None,
    settings: AutoCreationSettings,
    *,
    namespace_deleted: bool = False,
) -> bool:
    """BrokerService.isAllowAutoTopicCreation."""
    if namespace_deleted:
        return False
    if f"{topic.tenant}/{topic.namespace}/{topic.local_name}".startswith(_LOAD_MANAGER_TOPICS):
        return False
    if settings.system_topics and (
        is_system_topic(topic) or is_system_service_namespace(str(topic.namespace_name))
    ):
        return True  # BrokerService.isSystemTopic: system topics, system service namespaces
    return override.allow if override is not None else settings.allow


def created_partitioned(
    topic: TopicName, override: CreationOverride | None, settings: AutoCreationSettings
) -> bool:
    """BrokerService.isDefaultTopicTypePartitioned."""
    base = topic.base.full
    if base.endswith(_DLQ_SUFFIX) or base.endswith(_RETRY_SUFFIX):
        return False
    if override is not None and override.topic_type is not None:
        return override.topic_type is TopicType.PARTITIONED
    return settings.topic_type is TopicType.PARTITIONED


def default_partitions(override: CreationOverride | None, settings: AutoCreationSettings) -> int:
    if override is not None and override.default_partitions is not None:
        return override.default_partitions
    return settings.default_partitions


# --- reading the view ---------------------------------------------------------------------------


def managed_ledger_path(topic: TopicName) -> str:
    return (
        f"{MANAGED_LEDGERS_ROOT}/{topic.tenant}/{topic.namespace}/persistent/"
        f"{topic.encoded_local_name}"
    )


def topic_exists(topic: TopicName, view: ClusterView) -> bool | None:
    """Whether a topic without partitioned metadata exists (None: non-persistent, unknown)."""
    if topic.domain is TopicDomain.NON_PERSISTENT:
        return None
    if view.listed(managed_ledger_path(topic)):
        return True
    return topic.is_partition and view.partitions(topic.base) > topic.partition_index


@dataclass(frozen=True, slots=True)
class _NamespaceCreation:
    override: CreationOverride | None
    deleted: bool


def _parse_creation(path: str, content: Any) -> _NamespaceCreation:
    if not isinstance(content, Mapping):
        raise MalformedNode(path, f"expected a JSON object, got {type(content).__name__}")
    deleted = content.get("deleted", False)
    raw = content.get("autoTopicCreationOverride")
    if raw is None:
        return _NamespaceCreation(None, deleted is True)
    if not isinstance(raw, Mapping) or not isinstance(raw.get("allowAutoTopicCreation"), bool):
        raise MalformedNode(path, "autoTopicCreationOverride.allowAutoTopicCreation: not a bool")
    kind = raw.get("topicType")
    count = raw.get("defaultNumPartitions")
    try:
        topic_type = TopicType(kind) if kind is not None else None
    except ValueError:
        raise MalformedNode(
            path, f"autoTopicCreationOverride.topicType: {str(kind)[:40]!r} is not a topic type"
        ) from None
    if count is not None and (isinstance(count, bool) or not isinstance(count, int)):
        raise MalformedNode(path, "autoTopicCreationOverride.defaultNumPartitions: not an int")
    if topic_type is TopicType.PARTITIONED and (count is None or count <= 0):
        # Pulsar refuses to store such an override (validateOverride); ignore one written by hand.
        return _NamespaceCreation(None, deleted is True)
    override = CreationOverride(raw["allowAutoTopicCreation"], topic_type, count)
    return _NamespaceCreation(override, deleted is True)


def creation_override(view: ClusterView, namespace: NamespaceName) -> CreationOverride | None:
    """The namespace policy's autoTopicCreationOverride (None: none, or no namespace)."""
    creation = _namespace_creation(view, namespace)
    return creation.override if creation is not None else None


def _namespace_creation(view: ClusterView, namespace: NamespaceName) -> _NamespaceCreation | None:
    if view.policies(namespace) is None:
        return None
    return view.node(policies_path(namespace), _parse_creation)


def topic_not_found(topic: TopicName) -> LookupFailure:
    return LookupFailure(FailureKind.TOPIC_NOT_FOUND, f"Topic not found {topic.full}")


def decide_partitions(
    topic: TopicName,
    view: ClusterView,
    settings: AutoCreationSettings,
    *,
    client_creation: bool,
    policy: ResolvePolicy = _DEFAULT_POLICY,
) -> Decision:
    """PARTITIONED_METADATA for `topic`; `client_creation`: binary field 6, HTTP
    checkAllowAutoCreation. The namespace checks of a lookup apply first (resolve_partitions).
    Reads only what the answer needs: a partitioned topic, its node; a topic that would be
    created non-partitioned, no managed-ledger list."""
    partitions = resolve_partitions(topic, view, policy)
    if partitions > 0:
        return Partitions(partitions)
    creation = _namespace_creation(view, topic.namespace_name)
    if creation is None:  # pragma: no cover - resolve_partitions found the policies
        raise namespace_not_found(topic.namespace_name)
    create = client_creation and creation_allowed(
        topic, creation.override, settings, namespace_deleted=creation.deleted
    )
    partitioned = created_partitioned(topic, creation.override, settings)
    if create and (not partitioned or topic.is_partition):
        return Partitions(0)  # whether it exists or not
    exists = topic_exists(topic, view)
    return decide(topic, partitions=0, exists=exists, create=create, partitioned=partitioned)


def namespace_allows_creation(
    topic: TopicName, view: ClusterView, settings: AutoCreationSettings
) -> bool:
    """Whether `topic`'s namespace's policies let it be created (False too when the
    namespace does not exist): what lookup_allowed asks before the topic's own nodes."""
    creation = _namespace_creation(view, topic.namespace_name)
    return creation is not None and creation_allowed(
        topic, creation.override, settings, namespace_deleted=creation.deleted
    )


def lookup_allowed(topic: TopicName, view: ClusterView, settings: AutoCreationSettings) -> bool:
    """Whether an HTTP lookup of `topic` may proceed: it exists, may be created, or is
    non-persistent (TopicLookupBase). A missing namespace is left to the lookup to report."""
    if topic.domain is TopicDomain.NON_PERSISTENT:
        return True
    creation = _namespace_creation(view, topic.namespace_name)
    if creation is None:
        return True
    if creation_allowed(topic, creation.override, settings, namespace_deleted=creation.deleted):
        return True
    return view.partitions(topic) > 0 or bool(topic_exists(topic, view))
