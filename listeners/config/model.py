"""The gateway's configuration: Pulsar's broker.conf keys, validated with pydantic.

This module only validates. Every problem is reported with the key (and the entry) it concerns;
`load_config` gathers them all into one ConfigError instead of stopping at the first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel, to_snake
from pydantic_core import InitErrorDetails, PydanticCustomError

from pulsar_lookup_gateway.listeners.config.auth_keys import (
    BROKER_CLIENT_PLUGINS,
    CLIENT_AUTH_PACKAGE,
    SECRET_KEY_ALGORITHM,
    TLS_PROVIDER,
    TOKEN_PROVIDER,
    ClaimName,
    KeyUrlText,
    Providers,
    PublicAlgorithm,
    SecretKeyUrl,
    parse_key_url,
)
from pulsar_lookup_gateway.listeners.config.conf_file import (
    RawConfig,
    closest_key,
    read_config_file,
)
from pulsar_lookup_gateway.listeners.config.listener_settings import (
    LISTENER_PREFIX,
    CommaList,
    ListenerSettings,
    OptionalText,
    Port,
    StoreType,
    blank_is_none,
)
from pulsar_lookup_gateway.listeners.config.rules import (
    LEGACY_FIELDS,
    client_routes,
    merge_tls,
    problems_of,
    sockets,
)
from pulsar_lookup_gateway.listeners.config.salvage import (
    PROTOCOL_MAPS,
    declared_listeners,
    parsed_binds,
    parsed_listener_map,
)
from pulsar_lookup_gateway.listeners.endpoints.addresses import (
    AdvertisedListener,
    BindAddress,
    parse_advertised_listeners,
    parse_bind_addresses,
)
from pulsar_lookup_gateway.listeners.endpoints.forwarded import HEADERS as FORWARDED_HEADERS
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.lookup.auto_creation import AutoCreationSettings, TopicType
from pulsar_lookup_gateway.lookup.networks import NetworkTable, parse_cidr
from pulsar_lookup_gateway.lookup.protocol_listeners import (
    GRPC,
    KAFKA,
    LISTENER_MAP_KEYS,
    MQTT,
    ProtocolListeners,
    parse_kafka_protocol_map,
    parse_listener_map,
)
from pulsar_lookup_gateway.lookup.resolve import ResolvePolicy
from pulsar_lookup_gateway.lookup.selection import ClientRoutes, RoutesError
from pulsar_lookup_gateway.lookup.topic_list import DEFAULT_PATTERN_MAX_LENGTH
from pulsar_lookup_gateway.metadata_store.url import MetadataUrl, parse_metadata_url
from pulsar_lookup_gateway.tls.settings import TlsSettings

# Names other modules import from here (the configuration's face).
__all__ = [
    "KNOWN_KEYS",
    "LISTENER_PREFIX",
    "SECRET_KEY_ALGORITHM",
    "TLS_PROVIDER",
    "TOKEN_PROVIDER",
    "ConfigError",
    "ConfigProblem",
    "GatewayConfig",
    "ListenerSettings",
    "LoadedConfig",
    "load_config",
    "parse_key_url",
    "validate_raw",
]


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    key: str  # where: the key with the file line or variable it came from, or a file line
    message: str
    name: str = ""  # the bare key ('bindAddresses', 'listener.a.tlsKeyFilePath'); '' for a line

    def __str__(self) -> str:
        return f"{self.key}: {self.message}"


class ConfigError(Exception):
    def __init__(
        self,
        problems: list[ConfigProblem],
        warnings: list[str] | None = None,
        partial: GatewayConfig | None = None,
    ) -> None:
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = problems
        # The unknown keys too: a misspelt key is often why a problem is reported at all.
        self.warnings = warnings or []
        # What validated, for check-config's host checks only (never run): the keys that
        # failed left out, the entries of bindAddresses that parse, no rule between keys run.
        self.partial = partial

    @property
    def keys(self) -> frozenset[str]:
        """The keys that have a problem (a host check that reads one of them is not made)."""
        return frozenset(problem.name for problem in self.problems if problem.name)


#: A protocol handler's `<listener>:<handler name>` pairs; None: the key is unset.
ListenerMap = tuple[tuple[str, str], ...] | None


def _listener_map(protocol: str, value: Any) -> Any:
    """A protocol's `<listener>:<handler name>,...` (blank: unset)."""
    if not isinstance(value, str):
        return value
    return parse_listener_map(protocol, value) if value.strip() else None


class GatewayConfig(BaseModel):
    """Each key validates on its own (its field validator sees its own value only); the rules
    that tie keys together run once, on the validated values (listeners.config_rules), so
    neither depends on the order keys are declared or validated in."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True
    )

    metadata_store_url: MetadataUrl
    # A separate configuration store (policies, tenants, partitioned topics, clusters); unset:
    # metadataStoreUrl holds everything. Pulsar's older key: configurationStoreServers.
    configuration_metadata_store_url: Annotated[
        MetadataUrl | None, BeforeValidator(blank_is_none)
    ] = None
    # The local cluster's name, for the geo-replication checks (unset: they are skipped).
    cluster_name: OptionalText = None
    bind_address: str = "0.0.0.0"
    broker_service_port: Port = 6650
    broker_service_port_tls: Port = None
    web_service_port: Port = 8080
    web_service_port_tls: Port = None

    tls_certificate_file_path: OptionalText = None
    tls_key_file_path: OptionalText = None
    tls_key_password: OptionalText = None
    tls_trust_certs_file_path: OptionalText = None
    tls_key_store_type: StoreType = "PEM"
    tls_key_store: OptionalText = None
    tls_key_store_password: OptionalText = None
    tls_require_trusted_client_cert_on_connect: bool = False
    tls_protocols: CommaList = ()
    tls_ciphers: CommaList = ()
    tls_cert_refresh_check_duration_sec: int = Field(300, ge=0)

    advertised_listeners: tuple[AdvertisedListener, ...] = ()
    internal_listener_name: str | None = Field(None, validate_default=True)
    # `listener.<name>.<key>=value`: per-listener settings, keyed by listener name.
    listener_settings: dict[str, ListenerSettings] = Field(default_factory=dict)
    # Load balancers whose PROXY headers and X-Forwarded-For / Forwarded headers are believed.
    trusted_proxy_cidrs: CommaList = Field((), validate_default=True)
    # Which of those headers are read from them, in order of preference (the first one a
    # request carries; the others are ignored). Name only the header the proxies write: one
    # they pass through untouched is the client's own. Blank: none (PROXY headers only).
    trusted_forwarded_headers: CommaList = FORWARDED_HEADERS
    bind_addresses: tuple[BindAddress, ...] = Field((), validate_default=True)

    max_concurrent_lookup_request: int = Field(50_000, ge=1)

    # Connections (binary protocol). The frame cap is maxMessageSize + 10 KiB, as in Pulsar.
    max_message_size: int = Field(5 * 1024 * 1024, ge=1024)
    # Bounds on what strangers can hold open. Pulsar's brokerMaxConnections defaults to
    # unlimited; a gateway faces the open network, so it gets a finite default.
    broker_max_connections: int = Field(10_000, ge=0)  # 0: unlimited
    max_connections_per_ip: int = Field(0, ge=0)  # Pulsar's key; 0: no per-address cap
    max_http_server_connections: int = Field(2048, ge=0)  # Pulsar's key, per HTTP socket
    keep_alive_interval_seconds: int = Field(30, ge=0)  # 0: never ping
    connection_handshake_timeout_seconds: float = Field(10.0, gt=0)

    # The ownership watch (GET /lookup/v2/watch): what its clients may hold. 0: no limit.
    watch_max_topics_per_stream: int = Field(10_000, ge=1)
    watch_max_streams_per_address: int = Field(64, ge=0)
    watch_max_streams_per_role: int = Field(1_024, ge=0)
    watch_max_frame_bytes: int = Field(1024 * 1024, ge=1024)
    # A stream whose client reads nothing of what it is sent for this long is closed.
    watch_stalled_reader_timeout_seconds: float = Field(30.0, gt=0)

    # Graceful stop: how long in-flight lookups may take once a stop is asked for.
    shutdown_timeout_seconds: float = Field(5.0, gt=0)

    # Authentication and authorization (Pulsar's keys).
    authentication_enabled: bool = False
    authentication_providers: Providers = Field((), validate_default=True)
    token_secret_key: SecretKeyUrl = None  # HS256: data:;base64,... or file:///path
    token_public_key: KeyUrlText = None  # of tokenPublicAlg
    token_public_alg: PublicAlgorithm = "RS256"
    token_auth_claim: ClaimName = "sub"
    token_audience_claim: ClaimName = "aud"
    token_audience: OptionalText = None
    super_user_roles: CommaList = ()
    # /metrics on a socket requiring authentication: superUserRoles only (false: anyone).
    authenticate_metrics_endpoint: bool = True
    # The role requests forwarded to a broker are made for when their client proved none.
    anonymous_user_role: OptionalText = None
    authorization_enabled: bool = Field(False, validate_default=True)

    # Topic auto-creation (Pulsar's broker keys): what PARTITIONED_METADATA answers for a topic
    # that does not exist; a namespace policy's autoTopicCreationOverride wins over them.
    allow_auto_topic_creation: bool = True
    allow_auto_topic_creation_type: TopicType = TopicType.NON_PARTITIONED
    default_num_partitions: int = Field(1, ge=1)
    # Topic listing: patterns longer than this are answered unfiltered (the client filters).
    subscription_pattern_max_length: int = Field(DEFAULT_PATTERN_MAX_LENGTH, ge=0)
    enable_broker_side_subscription_pattern_evaluation: bool = True
    # The broker link, for what only a broker can answer (Pulsar's proxy keys).
    broker_client_authentication_plugin: OptionalText = None
    broker_client_authentication_parameters: Annotated[
        SecretStr | None, BeforeValidator(blank_is_none)
    ] = Field(None, validate_default=True)
    broker_client_trust_certs_file_path: OptionalText = None
    tls_enabled_with_broker: bool = False
    tls_hostname_verification_enabled: bool = False
    forward_authorization_credentials: bool = False
    # Protocol handlers' endpoints per listener (lookup.protocol_listeners): each protocol's
    # `<listener>:<handler name>,...` (None: unset, the unambiguous guess), and KoP's own
    # kafkaProtocolMap for the security protocol of its named listeners.
    kafka_listener_map: Annotated[ListenerMap, BeforeValidator(partial(_listener_map, KAFKA))] = (
        None
    )
    mqtt_listener_map: Annotated[ListenerMap, BeforeValidator(partial(_listener_map, MQTT))] = None
    grpc_listener_map: Annotated[ListenerMap, BeforeValidator(partial(_listener_map, GRPC))] = None
    kafka_protocol_map: tuple[tuple[str, str], ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _legacy_zookeeper_servers(cls, data: Any) -> Any:
        if (
            isinstance(data, dict)
            and not data.get("metadataStoreUrl")
            and data.get("zookeeperServers")
        ):
            data = {**data, "metadataStoreUrl": "zk:" + data["zookeeperServers"]}
        return data

    @model_validator(mode="before")
    @classmethod
    def _legacy_configuration_store(cls, data: Any) -> Any:
        if (
            isinstance(data, dict)
            and not data.get("configurationMetadataStoreUrl")
            and data.get("configurationStoreServers")
        ):
            servers = data["configurationStoreServers"]
            data = {**data, "configurationMetadataStoreUrl": "zk:" + servers}
        return data

    @field_validator("metadata_store_url", "configuration_metadata_store_url", mode="before")
    @classmethod
    def _metadata_url(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip():
            return parse_metadata_url(value)
        return value

    @field_validator("advertised_listeners", mode="before")
    @classmethod
    def _advertised(cls, value: Any) -> Any:
        return parse_advertised_listeners(value) if isinstance(value, str) else value

    @field_validator("kafka_protocol_map", mode="before")
    @classmethod
    def _kafka_protocol_map(cls, value: Any) -> Any:
        return parse_kafka_protocol_map(value) if isinstance(value, str) else value

    @field_validator("internal_listener_name", mode="before")
    @classmethod
    def _internal(cls, value: Any) -> Any:
        return blank_is_none(value)

    @field_validator("bind_addresses", mode="before")
    @classmethod
    def _binds(cls, value: Any) -> Any:
        return parse_bind_addresses(value) if isinstance(value, str) else value

    @field_validator("listener_settings")
    @classmethod
    def _routes(cls, value: dict[str, ListenerSettings]) -> dict[str, ListenerSettings]:
        try:
            client_routes(value)
        except RoutesError as exc:
            keys = {"sni": "sniHostnames", "network": "clientCidrs"}
            raise ValueError(
                "\n".join(
                    f"{LISTENER_PREFIX}{name}.{keys[kind]}: {message}"
                    for name, kind, message in exc.problems
                )
            ) from None
        return value

    @field_validator("trusted_proxy_cidrs")
    @classmethod
    def _trusted_proxies(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        problems = []
        for entry in value:
            try:
                parse_cidr(entry)
            except ValueError as exc:
                problems.append(str(exc))
        if problems:
            raise ValueError("\n".join(problems))
        return value

    @field_validator("trusted_forwarded_headers")
    @classmethod
    def _forwarded_headers(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        """Each entry a header the gateway reads (case ignored, written as in HEADERS), once."""
        known = {name.lower(): name for name in FORWARDED_HEADERS}
        names: list[str] = []
        problems = []
        for entry in value:
            name = known.get(entry.lower())
            if name is None:
                problems.append(
                    f"'{entry}' is not a header the gateway reads ({', '.join(FORWARDED_HEADERS)})"
                )
            elif name in names:
                problems.append(f"'{entry}' is listed twice")
            else:
                names.append(name)
        if problems:
            raise ValueError("\n".join(problems))
        return tuple(names)

    @model_validator(mode="after")
    def _keys_together(self, info: ValidationInfo) -> GatewayConfig:
        """The rules that tie keys together, on the validated values, all problems at once.
        A second pass of validate_raw (context "failed": the keys that failed on their own,
        at their defaults here) runs the rules those keys do not feed."""
        values = dict(self)
        failed: frozenset[str] = (info.context or {}).get("failed", frozenset())
        problems = problems_of(values, failed)
        if problems:
            raise ValidationError.from_exception_data(
                type(self).__name__,
                [
                    InitErrorDetails(
                        type=PydanticCustomError(_RULE_ERROR, message),
                        loc=(to_camel(field),),
                        input=values.get(field),
                    )
                    for field, message in problems
                ],
            )
        if self.internal_listener_name is None and self.advertised_listeners:
            # Unset: the first listener declared, as in Pulsar.
            return self.model_copy(
                update={"internal_listener_name": self.advertised_listeners[0].name}
            )
        return self

    def authentication_required(self, listener: str | None) -> bool:
        """Whether a socket tagged with `listener` (None: a legacy socket) requires
        authentication: its listener's authenticationRequired, else authenticationEnabled."""
        own = self.settings_for(listener).authentication_required
        return self.authentication_enabled if own is None else own

    def tls_for(self, listener: str | None) -> TlsSettings:
        """The TLS settings of a socket tagged with `listener` (None: a legacy socket)."""
        return merge_tls(self.model_dump(), self.listener_settings.get(listener or ""), listener)

    def tls_settings(self) -> dict[str | None, TlsSettings]:
        """The TLS settings of every listener with a TLS socket (None: legacy TLS sockets), and
        of every listener with sniHostnames and TLS material of its own or the global one."""
        tls = {s.listener for s in self.sockets() if s.tls}
        if tls:  # a server name dialled on a TLS socket may pick another listener's certificate
            tls |= {
                name
                for name, own in self.listener_settings.items()
                if own.sni_hostnames and self.tls_for(name).has_material
            }
        listeners = sorted(tls, key=lambda n: n or "")
        return {listener: self.tls_for(listener) for listener in listeners}

    def settings_for(self, listener: str | None) -> ListenerSettings:
        if listener is not None and listener in self.listener_settings:
            return self.listener_settings[listener]
        return _DEFAULT_LISTENER_SETTINGS

    # -- derived views, no I/O ------------------------------------------------------------

    def sockets(self) -> list[SocketSpec]:
        return sockets(dict(self), self.bind_addresses)

    def listener(self, name: str) -> AdvertisedListener | None:
        return next((lst for lst in self.advertised_listeners if lst.name == name), None)

    def client_routes(self) -> ClientRoutes:
        """The sniHostnames and clientCidrs of every listener (validated already)."""
        return client_routes(self.listener_settings)

    def trusted_proxies(self) -> NetworkTable[bool]:
        networks = {parse_cidr(entry): True for entry in self.trusted_proxy_cidrs}
        return NetworkTable.build(networks.items())

    def resolve_policy(self) -> ResolvePolicy:
        maps = {
            protocol: getattr(self, to_snake(key)) for protocol, key in LISTENER_MAP_KEYS.items()
        }
        listeners = ProtocolListeners(
            tuple((protocol, pairs) for protocol, pairs in maps.items() if pairs is not None),
            self.kafka_protocol_map,
        )
        return ResolvePolicy(cluster_name=self.cluster_name, protocol_listeners=listeners)

    def auto_creation(self) -> AutoCreationSettings:
        return AutoCreationSettings(
            allow=self.allow_auto_topic_creation,
            topic_type=self.allow_auto_topic_creation_type,
            default_partitions=self.default_num_partitions,
        )

    @field_validator("broker_client_authentication_plugin")
    @classmethod
    def _broker_client_plugin(cls, value: str | None) -> str | None:
        if value is None:
            return None
        plugin = BROKER_CLIENT_PLUGINS.get(value.strip())
        if plugin is None:
            raise ValueError(
                f"'{value}' is not a plugin the gateway supports: {CLIENT_AUTH_PACKAGE}"
                "AuthenticationToken (or token), or AuthenticationDisabled"
            )
        return plugin


_DEFAULT_LISTENER_SETTINGS = ListenerSettings()
LISTENER_KEYS = frozenset(to_camel(name) for name in ListenerSettings.model_fields)
KNOWN_KEYS = frozenset(
    {to_camel(name) for name in GatewayConfig.model_fields if name != "listener_settings"}
    | {"zookeeperServers", "configurationStoreServers"}
)
#: Keys earlier versions of the gateway used: a config that sets one still loads, with a
#: warning that says why the key no longer does anything.
RETIRED_KEYS: Mapping[str, str] = {
    "unownedBundleRedirect": (
        "retired: a bundle nobody owns always gets a non-authoritative redirect (to the "
        "load-manager leader, else to a live broker chosen by the bundle's hash); "
        "'least-loaded' sent it authoritatively, which made the broker take the bundle "
        "without its load manager"
    ),
    "defaultNumberOfNamespaceBundles": (
        "not used by lookups: as on Pulsar's brokers, a namespace whose policies hold no "
        "bundle data has one bundle over the whole hash range (the broker applies this key "
        "only when it creates a namespace)"
    ),
}


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    config: GatewayConfig
    warnings: list[str]


def validate_raw(raw: RawConfig) -> LoadedConfig:
    """Validate the key/value pairs; raises ConfigError holding every problem found."""
    problems = [ConfigProblem(where, message) for where, message in raw.problems]
    config: GatewayConfig | None = None
    values: dict[str, Any] = {}
    per_listener: dict[str, dict[str, str]] = {}
    for key, value in raw.values.items():
        name, dot, setting = key.removeprefix(LISTENER_PREFIX).partition(".")
        if key.startswith(LISTENER_PREFIX) and dot and name and setting:
            per_listener.setdefault(name, {})[setting] = value
        else:
            values[key] = value
    values["listenerSettings"] = per_listener
    warnings = [
        f"{key} ({raw.sources.get(key, '?')}): "
        + (
            f"{RETIRED_KEYS[key]}; ignored"
            if key in RETIRED_KEYS
            else "not a key the gateway uses; ignored" + _did_you_mean(key, KNOWN_KEYS)
        )
        for key in sorted(raw.values)
        if key not in KNOWN_KEYS and not key.startswith(LISTENER_PREFIX)
    ]
    partial: GatewayConfig | None = None
    try:
        config = partial = GatewayConfig.model_validate(values)
    except ValidationError as exc:
        problems += _problems_of(exc, raw)
        if not all(err["type"] == _RULE_ERROR for err in exc.errors()):
            # Keys failed on their own, so the rules between keys were not run yet.
            problems += _rules_despite(exc, values, raw)
        partial = _partial(exc, values)
    if problems or config is None:
        raise ConfigError(problems, warnings, partial)
    return LoadedConfig(config, warnings)


#: The error type of a rule between keys (a key failing on its own has pydantic's types).
_RULE_ERROR = "config_rule"
#: What stands in, in the later passes, for a required key that failed: no rule reads it, and
#: a host check is not made on a key that has a problem.
_STAND_INS = {"metadataStoreUrl": "file:/"}
_ALL_FIELDS = frozenset(GatewayConfig.model_fields)


def _failed_keys(exc: ValidationError) -> set[str]:
    return {str(err["loc"][0]) for err in exc.errors() if err["loc"]}


def _salvaged(values: dict[str, Any], failed_keys: set[str]) -> tuple[dict[str, Any], set[str]]:
    """`values` without the keys that failed, but for the entries of advertisedListeners,
    bindAddresses and the protocol listener maps that parse (see config_salvage); and the keys
    that stay failed."""
    rest = {key: value for key, value in values.items() if key not in failed_keys}
    failed = set(failed_keys)
    salvage: dict[str, Callable[[str], object | None]] = {
        "advertisedListeners": declared_listeners,
        "bindAddresses": parsed_binds,
        **{
            f"{protocol}ListenerMap": partial(parsed_listener_map, protocol)
            for protocol in PROTOCOL_MAPS
        },
    }
    for key, entries in salvage.items():
        if key in failed and isinstance(values.get(key), str):
            kept = entries(values[key])
            if kept is not None:
                rest[key] = kept
                failed.discard(key)
    for key, stand_in in _STAND_INS.items():
        rest.setdefault(key, stand_in)
    return rest, failed


def _rules_despite(
    exc: ValidationError, values: dict[str, Any], raw: RawConfig
) -> list[ConfigProblem]:
    """The problems of the rules between keys that did validate, when some key did not: a
    second pass with the failed keys at their defaults (the entries of a list that parse
    kept), and the rules they feed not run."""
    rest, failed_keys = _salvaged(values, _failed_keys(exc))
    failed = frozenset(to_snake(key) for key in failed_keys)
    try:
        GatewayConfig.model_validate(rest, context={"failed": failed})
    except ValidationError as second:
        return _problems_of(second, raw)
    return []


def _partial(exc: ValidationError, values: dict[str, Any]) -> GatewayConfig | None:
    """What validates of a config with problems, no rule between keys run; None when even that
    fails. A failed legacy port (or bindAddress) opens no socket here, rather than the default
    one; a failed listener.<name>.<key> drops that key only."""
    rest, failed = _salvaged(values, _failed_keys(exc))
    per_listener = {name: dict(keys) for name, keys in values.get("listenerSettings", {}).items()}
    # The keys that failed on their own are out (or salvaged) already; a listener's keys go
    # one by one.
    errors = [err for err in exc.errors() if err["loc"][:1] == ("listenerSettings",)]
    for _ in range(3):  # each pass drops what failed in the one before
        for err in errors:
            loc = err["loc"]
            if loc[:1] == ("listenerSettings",) and len(loc) >= 3:
                per_listener.get(str(loc[1]), {}).pop(str(loc[2]), None)
            elif loc[:1] == ("listenerSettings",):  # server names or networks that clash
                for keys in per_listener.values():
                    keys.pop("sniHostnames", None)
                    keys.pop("clientCidrs", None)
            elif loc:
                failed.add(str(loc[0]))
                rest.pop(str(loc[0]), None)
        rest["listenerSettings"] = per_listener
        for key in LEGACY_FIELDS:
            if key in failed or "bindAddress" in failed:
                rest[key] = ""
        rest.update({key: stand_in for key, stand_in in _STAND_INS.items() if key in failed})
        try:
            return GatewayConfig.model_validate(rest, context={"failed": _ALL_FIELDS})
        except ValidationError as again:
            errors = again.errors()
    return None


def _did_you_mean(key: str, known: frozenset[str]) -> str:
    near = closest_key(key, known)
    return f"; did you mean '{near}'?" if near else ""


def load_config(path: Path, env: Mapping[str, str]) -> LoadedConfig:
    return validate_raw(read_config_file(path, env))


def _problems_of(exc: ValidationError, raw: RawConfig) -> list[ConfigProblem]:
    problems = []
    for err in exc.errors(include_url=False):
        loc = err["loc"]
        key = str(loc[0]) if loc else "config"
        if key in GatewayConfig.model_fields:  # a default that failed validation: its key
            key = to_camel(key)
        if key == "listenerSettings" and len(loc) >= 3:
            key = f"{LISTENER_PREFIX}{loc[1]}.{loc[2]}"
            if err["type"] == "extra_forbidden":
                err["msg"] = "not a per-listener key" + _did_you_mean(str(loc[2]), LISTENER_KEYS)
        if key == "listenerSettings":
            message = err["msg"].removeprefix("Value error, ")
            for line in message.split("\n"):
                name, _, text = line.partition(": ")
                problems.append(ConfigProblem(name, text, name))
            continue
        if err["type"] == "missing" and key == "metadataStoreUrl":
            message = "required: zk:host:port[,host:port][/chroot] or file:PATH"
        else:
            message = err["msg"].removeprefix("Value error, ")
            if key in raw.values and err["type"] not in ("value_error", _RULE_ERROR):
                message = f"{message} (got '{raw.values[key]}')"
        where = f"{key} ({raw.sources[key]})" if key in raw.sources else key
        problems += [ConfigProblem(where, line, key) for line in message.split("\n")]
    return problems
