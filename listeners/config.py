"""The gateway's configuration: Pulsar's broker.conf keys, validated with pydantic.

This module only validates. Every problem is reported with the key (and the entry) it concerns;
`load_config` gathers them all into one ConfigError instead of stopping at the first.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import unquote, unquote_to_bytes, urlsplit

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

from pulsar_lookup_gateway.listeners.conf_file import RawConfig, closest_key, read_config_file
from pulsar_lookup_gateway.listeners.endpoints import (
    AdvertisedListener,
    BindAddress,
    parse_advertised_listeners,
    parse_bind_addresses,
)
from pulsar_lookup_gateway.listeners.socket_table import SocketSpec, plan_sockets, socket_conflicts
from pulsar_lookup_gateway.lookup.auto_creation import AutoCreationSettings, TopicType
from pulsar_lookup_gateway.lookup.networks import NetworkTable, parse_cidr
from pulsar_lookup_gateway.lookup.resolve import ResolvePolicy
from pulsar_lookup_gateway.lookup.selection import ClientRoutes, RoutesError
from pulsar_lookup_gateway.lookup.topic_list import DEFAULT_PATTERN_MAX_LENGTH
from pulsar_lookup_gateway.metadata_store.url import MetadataUrl, parse_metadata_url
from pulsar_lookup_gateway.tls.settings import TLS_KEYS, TlsSettings


def _blank_is_none(value: Any) -> Any:
    return None if isinstance(value, str) and not value.strip() else value


def _comma_list(value: Any) -> Any:
    if isinstance(value, str):
        return tuple(item.strip() for item in value.split(",") if item.strip())
    return value


Port = Annotated[Annotated[int, Field(ge=0, le=65535)] | None, BeforeValidator(_blank_is_none)]
OptionalText = Annotated[str | None, BeforeValidator(_blank_is_none)]
CommaList = Annotated[tuple[str, ...], BeforeValidator(_comma_list)]


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.key}: {self.message}"


class ConfigError(Exception):
    def __init__(self, problems: list[ConfigProblem], warnings: list[str] | None = None) -> None:
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = problems
        # The unknown keys too: a misspelt key is often why a problem is reported at all.
        self.warnings = warnings or []


def _store_type(value: Any) -> Any:
    if isinstance(value, str) and value.strip():
        if value.strip().upper() not in ("PEM", "PKCS12"):
            raise ValueError(f"'{value}' is not PEM or PKCS12")
        return value.strip().upper()
    return _blank_is_none(value)


StoreType = Annotated[str | None, BeforeValidator(_store_type)]
OptionalCommaList = Annotated[tuple[str, ...] | None, BeforeValidator(_comma_list)]


class ListenerSettings(BaseModel):
    """Settings one listener may override, written `listener.<name>.<key>=value`.
    A TLS key left unset here falls back to the global key of the same name."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    # Pulsar's proxy_through_service_url: clients would reconnect to the gateway with
    # CONNECT.proxy_to_broker_url and send their producers and consumers to it, which a lookup
    # service cannot serve. Accepted only as false (a config that spells out the default).
    proxy_through_service_url: bool = False

    tls_certificate_file_path: OptionalText = None
    tls_key_file_path: OptionalText = None
    tls_key_password: OptionalText = None
    tls_trust_certs_file_path: OptionalText = None
    tls_key_store_type: StoreType = None
    tls_key_store: OptionalText = None
    tls_key_store_password: OptionalText = None
    tls_require_trusted_client_cert_on_connect: bool | None = None
    tls_protocols: OptionalCommaList = None
    tls_ciphers: OptionalCommaList = None

    # Whether lookups on this listener must authenticate (unset: authenticationEnabled).
    authentication_required: Annotated[bool | None, BeforeValidator(_blank_is_none)] = None
    # Listener names a client on this listener may ask for (listenerName, the header, the
    # binary field); unset: any. A name outside the list is refused.
    allowed_listener_names: OptionalCommaList = None

    # Where a client is (issue: clients behind balancers all arrive from one address):
    # TLS server names and client networks that choose this listener, on any socket.
    sni_hostnames: OptionalCommaList = None
    client_cidrs: OptionalCommaList = None
    # This listener's sockets require a PROXY protocol header (v1 or v2) from a peer in
    # trustedProxyCidrs before anything else, TLS included.
    proxy_protocol: bool = False

    @field_validator("proxy_through_service_url")
    @classmethod
    def _no_proxying(cls, value: bool) -> bool:
        if value:
            raise ValueError(
                "the gateway answers lookups only: with true, clients would reconnect to the "
                "gateway and name the broker in CONNECT (proxy_to_broker_url), and their "
                "producers and consumers would be refused; remove the key (Pulsar's proxy "
                "is what proxies connections to brokers)"
            )
        return value


LISTENER_PREFIX = "listener."

# --- authentication keys ------------------------------------------------------------------------

TOKEN_PROVIDER = "token"
TLS_PROVIDER = "tls"
_PULSAR_AUTH_PACKAGE = "org.apache.pulsar.broker.authentication."
#: authenticationProviders accepts Pulsar's class names and the short names.
PROVIDER_NAMES: Mapping[str, str] = {
    TOKEN_PROVIDER: TOKEN_PROVIDER,
    TLS_PROVIDER: TLS_PROVIDER,
    _PULSAR_AUTH_PACKAGE + "AuthenticationProviderToken": TOKEN_PROVIDER,
    _PULSAR_AUTH_PACKAGE + "AuthenticationProviderTls": TLS_PROVIDER,
}
#: tokenPublicAlg: the asymmetric JWS algorithms (RFC 7518) Pulsar's tokens use. HS* are not
#: here on purpose: an HMAC "public" key would let anyone who has it sign tokens.
PUBLIC_KEY_ALGORITHMS = (
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512",
)  # fmt: skip
SECRET_KEY_ALGORITHM = "HS256"  # tokenSecretKey, as in Pulsar
_KEY_FORMATS = "data:;base64,<base64> or file:///absolute/path"


@dataclass(frozen=True, slots=True)
class KeyUrl:
    """A key given as Pulsar accepts it: inline (`data:[<type>][;base64],<data>`, RFC 2397) or
    a file (`file:///absolute/path`). Only parsed here; the file is read by listeners.auth."""

    data: bytes | None = None
    path: Path | None = None


def parse_key_url(value: str) -> KeyUrl:
    """Parse a tokenSecretKey / tokenPublicKey value; ValueError says what is wrong."""
    text = value.strip()
    if text[:5].lower() == "data:":
        meta, comma, payload = text[5:].partition(",")
        if not comma:
            raise ValueError(f"a data: URL needs a ',' before the data ({_KEY_FORMATS})")
        if meta.lower().endswith(";base64"):
            try:
                data = base64.b64decode("".join(payload.split()), validate=True)
            except (binascii.Error, ValueError):
                raise ValueError("the data: URL's data is not valid base64") from None
        else:
            data = unquote_to_bytes(payload)
        if not data:
            raise ValueError("the data: URL holds no key")
        return KeyUrl(data=data)
    if text[:5].lower() == "file:":
        parts = urlsplit(text)
        if parts.netloc not in ("", "localhost") or parts.query or parts.fragment:
            raise ValueError(f"'{value}' is not a local file URL ({_KEY_FORMATS})")
        path = unquote(parts.path)
        if not path.startswith("/") or path == "/":
            raise ValueError(f"'{value}' does not name an absolute path ({_KEY_FORMATS})")
        return KeyUrl(path=Path(path))
    raise ValueError(f"expected {_KEY_FORMATS}")


def _providers(value: Any) -> Any:
    if not isinstance(value, tuple):
        return value
    canonical: list[str] = []
    unknown: list[str] = []
    for name in value:
        short = PROVIDER_NAMES.get(name)
        if short is None:
            unknown.append(name)
        elif short not in canonical:
            canonical.append(short)
    if unknown:
        raise ValueError(
            "\n".join(
                f"'{name}' is not a provider the gateway supports: token or tls "
                f"({_PULSAR_AUTH_PACKAGE}AuthenticationProviderToken / ...Tls)"
                for name in unknown
            )
        )
    return tuple(canonical)


_CLIENT_AUTH_PACKAGE = "org.apache.pulsar.client.impl.auth."
#: brokerClientAuthenticationPlugin: Pulsar's client plugin class names and short names; None
#: is no authentication.
BROKER_CLIENT_PLUGINS: Mapping[str, str | None] = {
    TOKEN_PROVIDER: TOKEN_PROVIDER,
    _CLIENT_AUTH_PACKAGE + "AuthenticationToken": TOKEN_PROVIDER,
    _CLIENT_AUTH_PACKAGE + "AuthenticationDisabled": None,
}


def _required_anywhere(data: Mapping[str, Any]) -> list[str]:
    """The keys that make some socket require authentication (empty: none does)."""
    keys = ["authenticationEnabled=true"] if data.get("authentication_enabled") else []
    per_listener: dict[str, ListenerSettings] = data.get("listener_settings", {})
    keys += [
        f"{LISTENER_PREFIX}{name}.authenticationRequired=true"
        for name, settings in per_listener.items()
        if settings.authentication_required
    ]
    return keys


class GatewayConfig(BaseModel):
    """Field order matters: a validator sees only the fields declared above it."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True
    )

    metadata_store_url: MetadataUrl
    # A separate configuration store (policies, tenants, partitioned topics, clusters); unset:
    # metadataStoreUrl holds everything. Pulsar's older key: configurationStoreServers.
    configuration_metadata_store_url: Annotated[
        MetadataUrl | None, BeforeValidator(_blank_is_none)
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

    # Graceful stop: how long in-flight lookups may take once a stop is asked for.
    shutdown_timeout_seconds: float = Field(5.0, gt=0)

    # Authentication and authorization (Pulsar's keys).
    authentication_enabled: bool = False
    authentication_providers: CommaList = Field((), validate_default=True)
    token_secret_key: OptionalText = None  # HS256: data:;base64,... or file:///path
    token_public_key: OptionalText = Field(None, validate_default=True)  # tokenPublicAlg
    token_public_alg: str = "RS256"
    token_auth_claim: str = "sub"
    token_audience_claim: str = "aud"
    token_audience: OptionalText = None
    super_user_roles: CommaList = ()
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
        SecretStr | None, BeforeValidator(_blank_is_none)
    ] = Field(None, validate_default=True)
    broker_client_trust_certs_file_path: OptionalText = None
    tls_enabled_with_broker: bool = False
    tls_hostname_verification_enabled: bool = False
    forward_authorization_credentials: bool = False

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

    @field_validator("internal_listener_name", mode="before")
    @classmethod
    def _internal(cls, value: Any, info: ValidationInfo) -> Any:
        value = _blank_is_none(value)
        listeners: tuple[AdvertisedListener, ...] | None = info.data.get("advertised_listeners")
        if listeners is None:  # advertisedListeners itself is invalid; reported there
            return value
        names = [listener.name for listener in listeners]
        if value is None:
            return names[0] if names else None
        if value not in names:
            declared = ", ".join(names) or "none"
            raise ValueError(f"'{value}' is not declared in advertisedListeners ({declared})")
        return value

    @field_validator("bind_addresses", mode="before")
    @classmethod
    def _binds(cls, value: Any, info: ValidationInfo) -> Any:
        binds = parse_bind_addresses(value) if isinstance(value, str) else value
        problems: list[str] = []
        listeners: tuple[AdvertisedListener, ...] | None = info.data.get("advertised_listeners")
        if listeners is not None:
            declared = {listener.name for listener in listeners}
            problems += [
                f"entry '{b.listener}:{b.endpoint.url}': listener '{b.listener}' is not "
                "declared in advertisedListeners"
                for b in binds
                if b.listener not in declared
            ]
        if "bind_address" in info.data:
            legacy = {
                key: info.data.get(field)
                for key, field in _LEGACY_FIELDS.items()
                if field in info.data
            }
            specs = plan_sockets(info.data["bind_address"], legacy, binds)
            if not specs and len(legacy) == len(_LEGACY_FIELDS):  # (an invalid port: reported)
                problems.append(
                    "no socket would open: bindAddresses is empty and "
                    f"{', '.join(_LEGACY_FIELDS)} are all unset; set bindAddresses="
                    "name:scheme://host:port,... or one of those ports"
                )
            problems += socket_conflicts(specs)
            per_listener: dict[str, ListenerSettings] = info.data.get("listener_settings", {})
            problems += [
                f"{spec.origin} is a TLS socket but no TLS material is configured "
                "(tlsCertificateFilePath and tlsKeyFilePath, or tlsKeyStoreType=PKCS12 "
                f"and tlsKeyStore{_per_listener_hint(spec.listener)})"
                for spec in specs
                if spec.tls
                and not _merge_tls(
                    info.data, per_listener.get(spec.listener or ""), spec.listener
                ).has_material
            ]
        if problems:
            raise ValueError("\n".join(problems))
        return binds

    @field_validator("listener_settings", mode="before")
    @classmethod
    def _per_listener(cls, value: Any, info: ValidationInfo) -> Any:
        listeners: tuple[AdvertisedListener, ...] | None = info.data.get("advertised_listeners")
        if listeners is not None and isinstance(value, dict):
            declared = {listener.name for listener in listeners}
            unknown = [f"listener.{name}.*" for name in value if name not in declared]
            if unknown:
                raise ValueError(
                    "\n".join(
                        f"{key}: listener is not declared in advertisedListeners" for key in unknown
                    )
                )
        return value

    @field_validator("listener_settings")
    @classmethod
    def _allowed_names(
        cls, value: dict[str, ListenerSettings], info: ValidationInfo
    ) -> dict[str, ListenerSettings]:
        listeners: tuple[AdvertisedListener, ...] | None = info.data.get("advertised_listeners")
        if listeners is None:
            return value
        declared = [listener.name for listener in listeners]
        problems = [
            f"{LISTENER_PREFIX}{name}.allowedListenerNames: '{allowed}' is not declared in "
            f"advertisedListeners ({', '.join(declared) or 'none'})"
            for name, settings in value.items()
            for allowed in settings.allowed_listener_names or ()
            if allowed not in declared
        ]
        if problems:
            raise ValueError("\n".join(problems))
        return value

    @field_validator("listener_settings")
    @classmethod
    def _routes(
        cls, value: dict[str, ListenerSettings], info: ValidationInfo
    ) -> dict[str, ListenerSettings]:
        try:
            _client_routes(value)
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
    def _trusted_proxies(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        problems = []
        for entry in value:
            try:
                parse_cidr(entry)
            except ValueError as exc:
                problems.append(str(exc))
        per_listener: dict[str, ListenerSettings] = info.data.get("listener_settings", {})
        proxied = [name for name, own in per_listener.items() if own.proxy_protocol]
        if proxied and not value:
            problems += [
                f"{LISTENER_PREFIX}{name}.proxyProtocol=true needs the balancers' addresses "
                "here: a PROXY header is believed only from them"
                for name in proxied
            ]
        if problems:
            raise ValueError("\n".join(problems))
        return value

    @field_validator("authentication_providers")
    @classmethod
    def _auth_providers(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        providers: tuple[str, ...] = _providers(value)
        required = _required_anywhere(info.data)
        if required and not providers:
            raise ValueError(f"{' and '.join(required)} needs at least one provider (token, tls)")
        return providers

    @field_validator("token_secret_key")
    @classmethod
    def _secret_key(cls, value: str | None) -> str | None:
        if value is not None:
            data = parse_key_url(value).data
            if data is not None and len(data) < 32:
                # RFC 7518 3.2: an HS256 key has at least 256 bits (Pulsar makes 32 bytes).
                raise ValueError(f"an HS256 secret needs at least 32 bytes, this has {len(data)}")
        return value

    @field_validator("token_public_key")
    @classmethod
    def _public_key(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None:
            parse_key_url(value)
        if "token_secret_key" not in info.data or "authentication_providers" not in info.data:
            return value  # reported at those keys
        secret = info.data["token_secret_key"]
        if value is not None and secret is not None:
            raise ValueError("set tokenSecretKey (HS256) or tokenPublicKey, not both")
        providers: tuple[str, ...] = info.data["authentication_providers"]
        keyless = value is None and secret is None and TOKEN_PROVIDER in providers
        if keyless and _required_anywhere(info.data):
            raise ValueError(
                "the token provider needs a key: tokenSecretKey (HS256) or tokenPublicKey "
                f"(with tokenPublicAlg), as {_KEY_FORMATS}"
            )
        return value

    @field_validator("token_public_alg", mode="before")
    @classmethod
    def _public_alg(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        alg = value.strip().upper()
        if alg in PUBLIC_KEY_ALGORITHMS:
            return alg
        if alg.startswith("HS"):
            raise ValueError(
                f"'{value}' is a shared-secret algorithm: give the secret as tokenSecretKey "
                f"(HS256); tokenPublicAlg is one of {', '.join(PUBLIC_KEY_ALGORITHMS)}"
            )
        raise ValueError(f"'{value}' is not one of {', '.join(PUBLIC_KEY_ALGORITHMS)}")

    @field_validator("token_auth_claim", "token_audience_claim", mode="before")
    @classmethod
    def _claim_name(cls, value: Any) -> Any:
        if isinstance(value, str):
            if not value.strip():
                raise ValueError("must name a claim")
            return value.strip()
        return value

    @field_validator("authorization_enabled")
    @classmethod
    def _authorization(cls, value: bool, info: ValidationInfo) -> bool:
        known = "authentication_enabled" in info.data and "listener_settings" in info.data
        if value and known and not _required_anywhere(info.data):
            raise ValueError(
                "authorization checks the authenticated role: set authenticationEnabled=true "
                f"or {LISTENER_PREFIX}<name>.authenticationRequired=true"
            )
        return value

    def authentication_required(self, listener: str | None) -> bool:
        """Whether a socket tagged with `listener` (None: a legacy socket) requires
        authentication: its listener's authenticationRequired, else authenticationEnabled."""
        own = self.settings_for(listener).authentication_required
        return self.authentication_enabled if own is None else own

    def tls_for(self, listener: str | None) -> TlsSettings:
        """The TLS settings of a socket tagged with `listener` (None: a legacy socket)."""
        return _merge_tls(self.model_dump(), self.listener_settings.get(listener or ""), listener)

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
        legacy = {key: getattr(self, field) for key, field in _LEGACY_FIELDS.items()}
        return plan_sockets(self.bind_address, legacy, self.bind_addresses)

    def listener(self, name: str) -> AdvertisedListener | None:
        return next((lst for lst in self.advertised_listeners if lst.name == name), None)

    def client_routes(self) -> ClientRoutes:
        """The sniHostnames and clientCidrs of every listener (validated already)."""
        return _client_routes(self.listener_settings)

    def trusted_proxies(self) -> NetworkTable[bool]:
        networks = {parse_cidr(entry): True for entry in self.trusted_proxy_cidrs}
        return NetworkTable.build(networks.items())

    def resolve_policy(self) -> ResolvePolicy:
        return ResolvePolicy(cluster_name=self.cluster_name)

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
                f"'{value}' is not a plugin the gateway supports: {_CLIENT_AUTH_PACKAGE}"
                "AuthenticationToken (or token), or AuthenticationDisabled"
            )
        return plugin

    @field_validator("broker_client_authentication_parameters")
    @classmethod
    def _broker_client_parameters(
        cls, value: SecretStr | None, info: ValidationInfo
    ) -> SecretStr | None:
        # Never echo the value: it is a credential.
        plugin = info.data.get("broker_client_authentication_plugin")
        if plugin == TOKEN_PROVIDER and value is None:
            raise ValueError(
                "brokerClientAuthenticationPlugin=AuthenticationToken needs the token: "
                "token:<jwt> or file:///path/to/token"
            )
        if plugin == TOKEN_PROVIDER and value is not None:
            text = value.get_secret_value().strip()
            if text.startswith("file:"):
                path = unquote(urlsplit(text).path)
                if not path.startswith("/"):
                    raise ValueError("a file: token must name an absolute path (file:///path)")
            elif not text.removeprefix("token:").strip():
                raise ValueError("the token is empty")
        return value


_LEGACY_FIELDS = {
    "brokerServicePort": "broker_service_port",
    "brokerServicePortTls": "broker_service_port_tls",
    "webServicePort": "web_service_port",
    "webServicePortTls": "web_service_port_tls",
}
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


def _merge_tls(
    data: Mapping[str, Any], own: ListenerSettings | None, listener: str | None
) -> TlsSettings:
    """Global tls* values (`data`, by field name) with a listener's own values over them, each
    setting with the key it came from."""
    values: dict[str, Any] = {}
    keys: dict[str, str] = {}
    for setting, key in TLS_KEYS.items():
        field = to_snake(key)
        value = getattr(own, field, None) if own is not None else None
        if value is None:
            value = data.get(field)
        else:
            key = f"{LISTENER_PREFIX}{listener}.{key}"
        values[setting], keys[setting] = value, key
    return TlsSettings(
        certificate_file=values["certificate_file"],
        key_file=values["key_file"],
        key_password=values["key_password"],
        trust_certs_file=values["trust_certs_file"],
        key_store_type=values["key_store_type"] or "PEM",
        key_store=values["key_store"],
        key_store_password=values["key_store_password"],
        require_client_cert=bool(values["require_client_cert"]),
        protocols=tuple(values["protocols"] or ()),
        ciphers=tuple(values["ciphers"] or ()),
        refresh_seconds=int(data.get("tls_cert_refresh_check_duration_sec", 300)),
        keys=keys,
    )


def _client_routes(per_listener: Mapping[str, ListenerSettings]) -> ClientRoutes:
    return ClientRoutes.build(
        {name: own.sni_hostnames or () for name, own in per_listener.items()},
        {name: own.client_cidrs or () for name, own in per_listener.items()},
    )


def _per_listener_hint(listener: str | None) -> str:
    return f", or the same keys as listener.{listener}.<key>" if listener else ""


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
    try:
        config = GatewayConfig.model_validate(values)
    except ValidationError as exc:
        problems += _problems_of(exc, raw)
    if problems or config is None:
        raise ConfigError(problems, warnings)
    return LoadedConfig(config, warnings)


def _did_you_mean(key: str, known: frozenset[str]) -> str:
    near = closest_key(key, known)
    return f"; did you mean `{near}`?" if near else ""


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
            problems += [ConfigProblem(*line.split(": ", 1)) for line in message.split("\n")]
            continue
        if err["type"] == "missing" and key == "metadataStoreUrl":
            message = "required: zk:host:port[,host:port][/chroot] or file:PATH"
        else:
            message = err["msg"].removeprefix("Value error, ")
            if key in raw.values and err["type"] != "value_error":
                message = f"{message} (got '{raw.values[key]}')"
        where = f"{key} ({raw.sources[key]})" if key in raw.sources else key
        problems += [ConfigProblem(where, line) for line in message.split("\n")]
    return problems
