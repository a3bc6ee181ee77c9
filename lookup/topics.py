"""Pulsar topic names: full and short forms, domains, partitions."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import quote_plus, unquote_plus

from pulsar_lookup_gateway.lookup.errors import InvalidTopicName
from pulsar_lookup_gateway.lookup.untrusted import printable

PARTITION_SUFFIX = "-partition-"
DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "default"

# Pulsar's NamedEntity rule for tenant and namespace names (Java's ASCII \w).
_ENTITY = re.compile(r"[-=:.A-Za-z0-9_]+")
_PARTITIONED = re.compile(r"(.+)-partition-([0-9]+)")
_MAX_PARTITION = 2**31 - 1
# Pulsar sets no limit on name length (apache/pulsar#12023), but every name a client sends is
# held in caches and becomes znode paths: past this many UTF-8 bytes it is refused.
MAX_TOPIC_NAME_BYTES = 4096
# Valid by the character rule, but ZooKeeper refuses them as path elements (and `..` would
# climb to another node): never a tenant, namespace or topic.
_DOT_SEGMENTS = frozenset({".", ".."})


# NamespaceService's system service namespaces (Java's matches(): the whole name): the
# heartbeat namespaces of a broker, v1 `pulsar/<cluster>/<host:port>` and v2
# `pulsar/<host:port>`, its SLA-monitor namespace `sla-monitor/<cluster>/<host:port>`, and
# `pulsar/system`. Fixed patterns, linear in the name.
_SYSTEM_SERVICE_NAMESPACES = re.compile(
    r"pulsar/system|pulsar/[^/]+/[^:]+:[0-9]+|pulsar/[^:]+:[0-9]+|sla-monitor/[^/]+/[^:]+:[0-9]+"
)
_SLA_OR_HEARTBEAT = re.compile(
    r"pulsar/[^/]+/[^:]+:[0-9]+|pulsar/[^:]+:[0-9]+|sla-monitor/[^/]+/[^:]+:[0-9]+"
)


def is_system_service_namespace(namespace: str) -> bool:
    """NamespaceService.isSystemServiceNamespace: topics there may always be created
    (BrokerService.isSystemTopic)."""
    return _SYSTEM_SERVICE_NAMESPACES.fullmatch(namespace) is not None


def is_sla_or_heartbeat_namespace(namespace: str) -> bool:
    """NamespaceService.isSLAOrHeartbeatNamespace: such a namespace skips the cluster checks
    of a lookup (PulsarWebResource.checkLocalOrGetPeerReplicationCluster)."""
    return _SLA_OR_HEARTBEAT.fullmatch(namespace) is not None


class TopicDomain(StrEnum):
    PERSISTENT = "persistent"
    NON_PERSISTENT = "non-persistent"


# (a dict read instead of the enum's constructor: a name is parsed on every cold lookup and for
# every topic a watch herd subscribes)
_DOMAINS = {domain.value: domain for domain in TopicDomain}
# Tenant and namespace names already found valid: a herd's or a sweep's names share a few, and
# the rule is a regular expression per name. Bounded by count and by each entry's length, so a
# stranger's names cost at most ~0.7 MiB here; when full, names are checked as before.
_VALID_ENTITIES: set[str] = set()
_VALID_ENTITIES_MAX = 4096
_VALID_ENTITY_MAX_LENGTH = 64


def _valid_entity(name: str) -> bool:
    """Pulsar's NamedEntity rule, and not a dot segment."""
    if name in _VALID_ENTITIES:
        return True
    if not _ENTITY.fullmatch(name) or name in _DOT_SEGMENTS:
        return False
    if len(name) <= _VALID_ENTITY_MAX_LENGTH and len(_VALID_ENTITIES) < _VALID_ENTITIES_MAX:
        _VALID_ENTITIES.add(name)
    return True


@dataclass(frozen=True, slots=True)
class NamespaceName:
    tenant: str
    namespace: str

    def __str__(self) -> str:
        return f"{self.tenant}/{self.namespace}"


@dataclass(frozen=True, slots=True)
class TopicName:
    """A validated v2 topic name. Build it with `parse` or `from_rest`."""

    domain: TopicDomain
    tenant: str
    namespace: str
    local_name: str
    full: str
    partition_index: int  # -1 when the name has no partition suffix

    @classmethod
    def parse(cls, name: str) -> TopicName:
        if not name or not name.strip():
            raise InvalidTopicName(name, "empty name")
        if len(name) > MAX_TOPIC_NAME_BYTES or (
            len(name) * 4 > MAX_TOPIC_NAME_BYTES and len(name.encode()) > MAX_TOPIC_NAME_BYTES
        ):
            raise InvalidTopicName(name, f"longer than {MAX_TOPIC_NAME_BYTES} bytes")
        if "://" not in name:
            parts = name.split("/")
            if len(parts) == 1:
                name = f"persistent://{DEFAULT_TENANT}/{DEFAULT_NAMESPACE}/{name}"
            elif len(parts) == 3:
                name = f"persistent://{name}"
            else:
                raise InvalidTopicName(
                    name, "a short name is <topic> or <tenant>/<namespace>/<topic>"
                )
        domain_text, _, rest = name.partition("://")
        domain = _DOMAINS.get(domain_text)
        if domain is None:
            raise InvalidTopicName(
                name, f"domain '{domain_text}' is not persistent or non-persistent"
            )
        parts = rest.split("/", 3)
        if len(parts) == 4:
            raise InvalidTopicName(
                name, "legacy v1 names (tenant/cluster/namespace/topic) are not supported"
            )
        if len(parts) != 3:
            raise InvalidTopicName(name, "expected <domain>://<tenant>/<namespace>/<topic>")
        tenant, namespace, local = parts
        return cls._build(domain, tenant, namespace, local, name)

    @classmethod
    def from_rest(cls, domain: str, tenant: str, namespace: str, topic: str) -> TopicName:
        """The topic named by raw (percent-encoded) REST path segments.

        Each is decoded exactly once, as Pulsar's broker decodes it (Java's URLDecoder: `+` is
        a space, `%2B` a plus), and a segment that decodes to a slash is refused: it would
        silently name another (v1-style) topic.
        """
        parts = [unquote_plus(raw) for raw in (domain, tenant, namespace, topic)]
        name = "{}://{}/{}/{}".format(*parts)
        if any("/" in part for part in parts[1:]):
            raise InvalidTopicName(
                name, "'/' (%2F) is not allowed inside the tenant, namespace or topic path segment"
            )
        return cls.parse(name)

    @classmethod
    def _build(
        cls, domain: TopicDomain, tenant: str, namespace: str, local: str, original: str
    ) -> TopicName:
        if not _valid_entity(tenant):
            raise InvalidTopicName(original, f"invalid tenant '{printable(tenant)}'")
        if not _valid_entity(namespace):
            raise InvalidTopicName(original, f"invalid namespace '{printable(namespace)}'")
        if not local:
            raise InvalidTopicName(original, "empty local topic name")
        if local in _DOT_SEGMENTS:
            raise InvalidTopicName(original, f"invalid local topic name '{local}'")
        index = -1
        match = _PARTITIONED.fullmatch(local) if PARTITION_SUFFIX in local else None
        # As in Pulsar, a suffix that is not a Java int makes an ordinary, unpartitioned name.
        # (Length first: int() refuses numbers of thousands of digits with a ValueError.)
        if match is not None and len(digits := match.group(2)) <= 10:
            index = int(digits) if int(digits) <= _MAX_PARTITION else -1
        full = f"{domain.value}://{tenant}/{namespace}/{local}"
        return cls(domain, tenant, namespace, local, full, index)

    @property
    def namespace_name(self) -> NamespaceName:
        return NamespaceName(self.tenant, self.namespace)

    @property
    def is_partition(self) -> bool:
        return self.partition_index >= 0

    @property
    def base(self) -> TopicName:
        """The partitioned topic this partition belongs to (itself if not a partition)."""
        if self.partition_index < 0:
            return self
        local = self.local_name[: self.local_name.rindex(PARTITION_SUFFIX)]
        return TopicName._build(self.domain, self.tenant, self.namespace, local, self.full)

    def partition(self, index: int) -> TopicName:
        local = f"{self.base.local_name}{PARTITION_SUFFIX}{index}"
        return TopicName._build(self.domain, self.tenant, self.namespace, local, self.full)

    @property
    def encoded_local_name(self) -> str:
        """The local name as Pulsar encodes it in znode paths (Java's URLEncoder)."""
        return quote_plus(self.local_name, safe="*").replace("~", "%7E")

    def __str__(self) -> str:
        return self.full
