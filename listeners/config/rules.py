"""The configuration's rules that tie keys together (a bind address's listener must be declared,
a TLS socket needs material, a required authentication needs a provider, ...).

They run once every key has validated on its own, on the validated values, so no rule depends on
the order keys are declared or validated in. Each problem names the key it is reported at."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

from pydantic import SecretStr
from pydantic.alias_generators import to_snake

from pulsar_lookup_gateway.listeners.config.auth_keys import KEY_FORMATS, TOKEN_PROVIDER
from pulsar_lookup_gateway.listeners.config.listener_settings import (
    LISTENER_PREFIX,
    ListenerSettings,
)
from pulsar_lookup_gateway.listeners.endpoints.addresses import AdvertisedListener, BindAddress
from pulsar_lookup_gateway.listeners.endpoints.socket_table import (
    SocketSpec,
    plan_sockets,
    socket_conflicts,
)
from pulsar_lookup_gateway.lookup.selection import ClientRoutes
from pulsar_lookup_gateway.tls.settings import TLS_KEYS, TlsSettings

#: The legacy socket keys: the port keys of broker.conf, by key and field name.
LEGACY_FIELDS = {
    "brokerServicePort": "broker_service_port",
    "brokerServicePortTls": "broker_service_port_tls",
    "webServicePort": "web_service_port",
    "webServicePortTls": "web_service_port_tls",
}

#: (field name, message): a problem, reported at that field's key.
Problem = tuple[str, str]


def listener_problems(
    listeners: Sequence[AdvertisedListener],
    internal: str | None,
    per_listener: Mapping[str, ListenerSettings],
) -> list[Problem]:
    """Names that must be declared in advertisedListeners."""
    declared = [listener.name for listener in listeners]
    problems: list[Problem] = []
    if internal is not None and internal not in declared:
        listed = ", ".join(declared) or "none"
        problems.append(
            (
                "internal_listener_name",
                f"'{internal}' is not declared in advertisedListeners ({listed})",
            )
        )
    problems += [
        (
            "listener_settings",
            f"{LISTENER_PREFIX}{name}.*: listener is not declared in advertisedListeners",
        )
        for name in per_listener
        if name not in declared
    ]
    problems += [
        (
            "listener_settings",
            f"{LISTENER_PREFIX}{name}.allowedListenerNames: '{allowed}' is not declared in "
            f"advertisedListeners ({', '.join(declared) or 'none'})",
        )
        for name, settings in per_listener.items()
        for allowed in settings.allowed_listener_names or ()
        if allowed not in declared
    ]
    return problems


def protocol_listener_problems(
    listeners: Sequence[AdvertisedListener], maps: Mapping[str, Any]
) -> list[Problem]:
    """The listeners of kafkaListenerMap, mqttListenerMap and grpcListenerMap (by field name:
    pairs of listener and handler name, or None) must be declared."""
    declared = [listener.name for listener in listeners]
    return [
        (
            field,
            f"entry '{listener}:{name}': listener '{listener}' is not declared in "
            f"advertisedListeners ({', '.join(declared) or 'none'})",
        )
        for field, pairs in maps.items()
        for listener, name in pairs or ()
        if listener not in declared
    ]


def socket_problems(
    values: Mapping[str, Any],
    listeners: Sequence[AdvertisedListener],
    binds: Sequence[BindAddress],
    per_listener: Mapping[str, ListenerSettings],
) -> list[Problem]:
    """bindAddresses: declared listeners, at least one socket, no two on one port, TLS material
    for every TLS socket. `values`: the validated fields, by name."""
    declared = {listener.name for listener in listeners}
    problems = [
        f"entry '{b.listener}:{b.endpoint.url}': listener '{b.listener}' is not "
        "declared in advertisedListeners"
        for b in binds
        if b.listener not in declared
    ]
    specs = sockets(values, binds)
    if not specs:
        problems.append(
            "no socket would open: bindAddresses is empty and "
            f"{', '.join(LEGACY_FIELDS)} are all unset; set bindAddresses="
            "name:scheme://host:port,... or one of those ports"
        )
    problems += socket_conflicts(specs)
    problems += [
        f"{spec.origin} is a TLS socket but no TLS material is configured "
        "(tlsCertificateFilePath and tlsKeyFilePath, or tlsKeyStoreType=PKCS12 "
        f"and tlsKeyStore{_per_listener_hint(spec.listener)})"
        for spec in specs
        if spec.tls
        and not merge_tls(values, per_listener.get(spec.listener or ""), spec.listener).has_material
    ]
    return [("bind_addresses", problem) for problem in problems]


def auth_problems(
    values: Mapping[str, Any], per_listener: Mapping[str, ListenerSettings]
) -> list[Problem]:
    """Authentication and authorization keys that need each other."""
    required = required_anywhere(values["authentication_enabled"], per_listener)
    providers: tuple[str, ...] = values["authentication_providers"]
    secret, public = values["token_secret_key"], values["token_public_key"]
    problems: list[Problem] = []
    if required and not providers:
        problems.append(
            (
                "authentication_providers",
                f"{' and '.join(required)} needs at least one provider (token, tls)",
            )
        )
    if public is not None and secret is not None:
        problems.append(
            ("token_public_key", "set tokenSecretKey (HS256) or tokenPublicKey, not both")
        )
    elif public is None and secret is None and TOKEN_PROVIDER in providers and required:
        problems.append(
            (
                "token_public_key",
                "the token provider needs a key: tokenSecretKey (HS256) or tokenPublicKey "
                f"(with tokenPublicAlg), as {KEY_FORMATS}",
            )
        )
    if values["authorization_enabled"] and not required:
        problems.append(
            (
                "authorization_enabled",
                "authorization checks the authenticated role: set authenticationEnabled=true "
                f"or {LISTENER_PREFIX}<name>.authenticationRequired=true",
            )
        )
    return problems


def proxy_problems(
    trusted_proxy_cidrs: Sequence[str], per_listener: Mapping[str, ListenerSettings]
) -> list[Problem]:
    """A listener behind balancers that write PROXY headers needs to know the balancers."""
    if trusted_proxy_cidrs:
        return []
    return [
        (
            "trusted_proxy_cidrs",
            f"{LISTENER_PREFIX}{name}.proxyProtocol=true needs the balancers' addresses "
            "here: a PROXY header is believed only from them",
        )
        for name, own in per_listener.items()
        if own.proxy_protocol
    ]


def broker_link_problems(plugin: str | None, parameters: SecretStr | None) -> list[Problem]:
    """The broker link's token, which its plugin needs (never echoed: it is a credential)."""
    if plugin != TOKEN_PROVIDER:
        return []
    key = "broker_client_authentication_parameters"
    if parameters is None:
        return [
            (
                key,
                "brokerClientAuthenticationPlugin=AuthenticationToken needs the token: "
                "token:<jwt> or file:///path/to/token",
            )
        ]
    text = parameters.get_secret_value().strip()
    if text.startswith("file:"):
        if not _file_url_path(text).startswith("/"):
            return [(key, "a file: token must name an absolute path (file:///path)")]
    elif not text.removeprefix("token:").strip():
        return [(key, "the token is empty")]
    return []


def held_bytes_problems(total: int, unread: int, per_client: int) -> list[Problem]:
    """The byte budget's shares: the unread share is a part of the total (the rest is the
    watch's), and one client holds no more than the total."""
    problems: list[Problem] = []
    if unread >= total:
        problems.append(
            (
                "held_bytes_max_unread",
                f"must be less than heldBytesMax ({total}): the rest is what watch streams hold",
            )
        )
    if per_client > total:
        problems.append(("held_bytes_max_per_client", f"must be at most heldBytesMax ({total})"))
    return problems


def _file_url_path(text: str) -> str:
    return unquote(urlsplit(text).path)


#: Each rule with the fields it cannot do without: where one of them failed on its own, the rule
#: is not run (its problem would be a consequence of that failure).
RULES: tuple[tuple[frozenset[str], Callable[[Mapping[str, Any]], list[Problem]]], ...] = (
    (
        frozenset({"advertised_listeners", "internal_listener_name", "listener_settings"}),
        lambda v: listener_problems(
            v["advertised_listeners"], v["internal_listener_name"], v["listener_settings"]
        ),
    ),
    (
        frozenset({"advertised_listeners", "bind_addresses", "listener_settings", "bind_address"}),
        lambda v: socket_problems(
            v, v["advertised_listeners"], v["bind_addresses"], v["listener_settings"]
        ),
    ),
    (
        frozenset(
            {"advertised_listeners", *(f"{p}_listener_map" for p in ("kafka", "mqtt", "grpc"))}
        ),
        lambda v: protocol_listener_problems(
            v["advertised_listeners"],
            {f"{p}_listener_map": v[f"{p}_listener_map"] for p in ("kafka", "mqtt", "grpc")},
        ),
    ),
    (
        frozenset({"trusted_proxy_cidrs", "listener_settings"}),
        lambda v: proxy_problems(v["trusted_proxy_cidrs"], v["listener_settings"]),
    ),
    (
        frozenset(
            {
                "authentication_enabled",
                "authentication_providers",
                "token_secret_key",
                "token_public_key",
                "authorization_enabled",
                "listener_settings",
            }
        ),
        lambda v: auth_problems(v, v["listener_settings"]),
    ),
    (
        frozenset(
            {"broker_client_authentication_plugin", "broker_client_authentication_parameters"}
        ),
        lambda v: broker_link_problems(
            v["broker_client_authentication_plugin"],
            v["broker_client_authentication_parameters"],
        ),
    ),
    (
        frozenset({"held_bytes_max", "held_bytes_max_unread", "held_bytes_max_per_client"}),
        lambda v: held_bytes_problems(
            v["held_bytes_max"], v["held_bytes_max_unread"], v["held_bytes_max_per_client"]
        ),
    ),
)


def problems_of(values: Mapping[str, Any], failed: frozenset[str] = frozenset()) -> list[Problem]:
    """The problems of every rule whose fields all validated (`failed`: those that did not)."""
    return [problem for inputs, rule in RULES if not inputs & failed for problem in rule(values)]


def required_anywhere(enabled: bool, per_listener: Mapping[str, ListenerSettings]) -> list[str]:
    """The keys that make some socket require authentication (empty: none does)."""
    keys = ["authenticationEnabled=true"] if enabled else []
    keys += [
        f"{LISTENER_PREFIX}{name}.authenticationRequired=true"
        for name, settings in per_listener.items()
        if settings.authentication_required
    ]
    return keys


def merge_tls(
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


def client_routes(per_listener: Mapping[str, ListenerSettings]) -> ClientRoutes:
    return ClientRoutes.build(
        {name: own.sni_hostnames or () for name, own in per_listener.items()},
        {name: own.client_cidrs or () for name, own in per_listener.items()},
    )


def sockets(values: Mapping[str, Any], binds: Sequence[BindAddress]) -> list[SocketSpec]:
    legacy = {key: values[field] for key, field in LEGACY_FIELDS.items()}
    return plan_sockets(values["bind_address"], legacy, binds)


def _per_listener_hint(listener: str | None) -> str:
    return f", or the same keys as listener.{listener}.<key>" if listener else ""
