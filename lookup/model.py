"""The cluster model: the JSON Pulsar's brokers write to their znodes, parsed and checked.

Unknown keys are ignored (brokers add keys between releases), optional keys are optional, and a
value of the wrong type is an error naming the znode path.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from pulsar_lookup_gateway.lookup.bundles import NamespaceBundles
from pulsar_lookup_gateway.lookup.errors import MalformedNode
from pulsar_lookup_gateway.lookup.topics import NamespaceName, TopicName

BROKERS_ROOT = "/loadbalance/brokers"
LEADER_PATH = "/loadbalance/leader"
# The extensible load manager's leader: the broker that owns its service-unit-state channel
# (and so the load manager's own topics); the same JSON as LEADER_PATH.
EXTENSION_LEADER_PATH = "/loadbalance/extension/leader"
NAMESPACE_ROOT = "/namespace"
POLICIES_ROOT = "/admin/policies"
LOCAL_POLICIES_ROOT = "/admin/local-policies"
PARTITIONED_ROOT = "/admin/partitioned-topics"
CLUSTERS_ROOT = "/admin/clusters"
EXTENSIBLE_LOAD_MANAGER_SUFFIX = "ExtensibleLoadManagerImpl"
# The extensible load manager with the metadata-store table view (PIP-378) keeps each bundle's
# ownership at /service_unit_state/<tenant>/<ns>/<bundle>, in the local store.
SERVICE_UNIT_STATE_ROOT = "/service_unit_state"
# With a separate configuration store (configurationMetadataStoreUrl), Pulsar keeps every
# /admin/... node there except the local policies, which stay in the local store with the
# load manager's nodes, ownership and managed ledgers.
_LOCAL_ADMIN_ROOTS = (LOCAL_POLICIES_ROOT,)


def is_configuration_path(path: str) -> bool:
    """Whether `path` (a node, or a parent's children with a trailing `/`) lives in the
    configuration store: /admin/policies, tenants, /admin/partitioned-topics, /admin/clusters."""
    if not path.startswith("/admin/"):
        return False
    return not any(path == root or path.startswith(root + "/") for root in _LOCAL_ADMIN_ROOTS)


def broker_path(broker_id: str) -> str:
    return f"{BROKERS_ROOT}/{broker_id}"


def ownership_path(namespace: NamespaceName, bundle_name: str) -> str:
    return f"{NAMESPACE_ROOT}/{namespace.tenant}/{namespace.namespace}/{bundle_name}"


def policies_path(namespace: NamespaceName) -> str:
    return f"{POLICIES_ROOT}/{namespace.tenant}/{namespace.namespace}"


def tenant_path(tenant: str) -> str:
    """`/admin/policies/<tenant>`: the tenant's TenantInfo (its namespaces are its children)."""
    return f"{POLICIES_ROOT}/{tenant}"


def local_policies_path(namespace: NamespaceName) -> str:
    return f"{LOCAL_POLICIES_ROOT}/{namespace.tenant}/{namespace.namespace}"


def cluster_path(name: str) -> str:
    return f"{CLUSTERS_ROOT}/{name}"


def service_unit_state_path(namespace: NamespaceName, bundle_name: str) -> str:
    return f"{SERVICE_UNIT_STATE_ROOT}/{namespace.tenant}/{namespace.namespace}/{bundle_name}"


def partitioned_path(topic: TopicName) -> str:
    return (
        f"{PARTITIONED_ROOT}/{topic.tenant}/{topic.namespace}/"
        f"{topic.domain.value}/{topic.encoded_local_name}"
    )


class _Znode(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        frozen=True,
        strict=True,
    )


class ListenerUrls(_Znode):
    """One advertised listener of a broker: any subset of its four URLs."""

    broker_service_url: str | None = None
    broker_service_url_tls: str | None = None
    broker_http_url: str | None = None
    broker_https_url: str | None = None


class BrokerData(_Znode):
    """`/loadbalance/brokers/<id>`: LocalBrokerData (modular) or BrokerLookupData (extensible)."""

    web_service_url: str | None = None
    web_service_url_tls: str | None = None
    pulsar_service_url: str | None = None
    pulsar_service_url_tls: str | None = None
    persistent_topics_enabled: bool = True
    non_persistent_topics_enabled: bool = True
    advertised_listeners: dict[str, ListenerUrls] = Field(default_factory=dict)
    # Protocol handler name -> the data it advertises (lookup.protocol_data reads it).
    protocols: dict[str, str] = Field(default_factory=dict)
    bundles: list[str] = Field(default_factory=list)
    num_bundles: int | None = None
    max_resource_usage: float | None = None
    load_manager_class_name: str | None = None
    broker_version_string: str | None = None
    last_update: int | None = None

    @field_validator("protocols", mode="before")
    @classmethod
    def _protocol_data_as_text(cls, value: Any) -> Any:
        # A handler may advertise null (Java's map keeps it) or, in a hand-written node,
        # something other than a string: neither may cost the broker its registration. null
        # is advertised data of nothing (""); any other value is kept as its JSON text.
        if not isinstance(value, Mapping):
            return value
        return {
            key: "" if data is None else data if isinstance(data, str) else json.dumps(data)
            for key, data in value.items()
        }

    @property
    def uses_extensible_load_manager(self) -> bool:
        name = self.load_manager_class_name or ""
        return name.endswith(EXTENSIBLE_LOAD_MANAGER_SUFFIX)


class OwnershipData(_Znode):
    """`/namespace/<tenant>/<ns>/<bundle>`: NamespaceEphemeralData of the owning broker."""

    native_url: str | None = None
    native_url_tls: str | None = None
    http_url: str | None = None
    http_url_tls: str | None = None
    disabled: bool = False
    advertised_listeners: dict[str, ListenerUrls] = Field(default_factory=dict)
    broker_id: str | None = None


class LeaderData(_Znode):
    """`/loadbalance/leader`: the load manager leader (2.x writes only `serviceUrl`)."""

    broker_id: str | None = None
    service_url: str | None = None


class BundlesData(_Znode):
    boundaries: list[str]
    num_bundles: int | None = None

    @field_validator("boundaries")
    @classmethod
    def _valid_boundaries(cls, value: list[str]) -> list[str]:
        NamespaceBundles.from_strings(value, None)
        return value

    def to_bundles(self) -> NamespaceBundles:
        return NamespaceBundles.from_strings(self.boundaries, self.num_bundles)


class AuthPolicies(_Znode):
    """A namespace's permissions (Pulsar's AuthPolicies; its JSON keys are snake_case):
    role -> actions on the whole namespace, and topic -> role -> actions on single topics.
    Actions are Pulsar's AuthAction names (produce, consume, functions, sources, sinks,
    packages); names this model does not know are kept, never refused."""

    namespace_auth: dict[str, list[str]] = Field(default_factory=dict, alias="namespace_auth")
    destination_auth: dict[str, dict[str, list[str]]] = Field(
        default_factory=dict, alias="destination_auth"
    )
    subscription_auth_roles: dict[str, list[str]] = Field(
        default_factory=dict, alias="subscription_auth_roles"
    )


class NamespacePolicies(_Znode):
    """`/admin/policies/<tenant>/<ns>` (only what a lookup needs) and its local twin."""

    bundles: BundlesData | None = None
    auth_policies: AuthPolicies = Field(default_factory=AuthPolicies, alias="auth_policies")
    # Geo-replication: the clusters that serve the namespace (allowed_clusters: PIP-321, the
    # clusters that may serve it without replicating to them).
    replication_clusters: list[str] = Field(default_factory=list, alias="replication_clusters")
    allowed_clusters: list[str] = Field(default_factory=list, alias="allowed_clusters")
    deleted: bool = False


class ClusterData(_Znode):
    """`/admin/clusters/<name>`: a cluster's service URLs and its peers (geo-replication)."""

    service_url: str | None = None
    service_url_tls: str | None = None
    broker_service_url: str | None = None
    broker_service_url_tls: str | None = None
    peer_cluster_names: list[str] | None = None


class ServiceUnitState(StrEnum):
    """The states of a bundle under the extensible load manager."""

    INIT = "Init"
    FREE = "Free"
    OWNED = "Owned"
    ASSIGNING = "Assigning"
    RELEASING = "Releasing"
    SPLITTING = "Splitting"
    DELETED = "Deleted"


class ServiceUnitStateData(_Znode):
    """`/service_unit_state/<tenant>/<ns>/<bundle>`: one bundle's state (extensible load
    manager, metadata-store table view). Broker fields hold broker ids."""

    state: ServiceUnitState
    dst_broker: str | None = None
    source_broker: str | None = None
    force: bool = False
    timestamp: int | None = None
    version_id: int | None = None

    @field_validator("state", mode="before")
    @classmethod
    def _state(cls, value: Any) -> Any:
        # strict mode takes enum members only; the node holds the state's name.
        if isinstance(value, str):
            try:
                return ServiceUnitState(value)
            except ValueError:
                raise ValueError(f"unknown state {value!r}") from None
        return value


class TenantInfo(_Znode):
    """`/admin/policies/<tenant>`: Pulsar's TenantInfo."""

    admin_roles: list[str] = Field(default_factory=list)
    allowed_clusters: list[str] = Field(default_factory=list)


class PartitionedMetadata(_Znode):
    partitions: int = Field(ge=0)


_M = TypeVar("_M", bound=_Znode)


def node_parser(model: type[_M]) -> Callable[[str, Any], _M]:
    """A parser for one znode type: (path, decoded JSON) -> model, or MalformedNode."""

    def parse(path: str, content: Any) -> _M:
        if not isinstance(content, Mapping):
            raise MalformedNode(path, f"expected a JSON object, got {type(content).__name__}")
        try:
            return model.model_validate(content)
        except ValidationError as exc:
            raise MalformedNode(path, _describe(exc)) from None

    parse.__name__ = f"parse_{model.__name__}"
    return parse


def decode_json(path: str, data: bytes) -> Any:
    """Znode bytes to JSON; empty data decodes to None (a node that only groups children)."""
    if not data:
        return None
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MalformedNode(path, f"not JSON ({exc})") from None


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or "(root)"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


parse_broker = node_parser(BrokerData)
parse_ownership = node_parser(OwnershipData)
parse_leader = node_parser(LeaderData)
parse_policies = node_parser(NamespacePolicies)
parse_tenant = node_parser(TenantInfo)
parse_partitioned = node_parser(PartitionedMetadata)
parse_cluster = node_parser(ClusterData)
parse_service_unit_state = node_parser(ServiceUnitStateData)
