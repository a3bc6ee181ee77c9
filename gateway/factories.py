"""What the process builds from its configuration: the settings of each binary and HTTP
socket, the broker link and the authenticator. They live here, on the floor that wires the
process, so that the classes below take plain values and the configuration only validates."""

from __future__ import annotations

import os

from cryptography.hazmat.primitives.asymmetric import ec, rsa
from prometheus_client import CollectorRegistry

from pulsar_lookup_gateway.brokers.settings import LinkSettings
from pulsar_lookup_gateway.gateway.workers import WORKERS_ENV
from pulsar_lookup_gateway.http_api.settings import HttpSettings, ListenerTable, WatchSettings
from pulsar_lookup_gateway.listeners.auth import (
    MIN_SECRET_BYTES,
    AuthConfigError,
    AuthenticationProvider,
    Authenticator,
    TlsAuthenticationProvider,
    TokenAuthenticationProvider,
    load_public_key,
    read_key,
)
from pulsar_lookup_gateway.listeners.binary import BinarySettings
from pulsar_lookup_gateway.listeners.binary.settings import FRAME_PADDING
from pulsar_lookup_gateway.listeners.config.auth_keys import (
    SECRET_KEY_ALGORITHM,
    TLS_PROVIDER,
    TOKEN_PROVIDER,
)
from pulsar_lookup_gateway.listeners.config.model import GatewayConfig
from pulsar_lookup_gateway.serving.held_bytes import HeldBytes


def binary_settings(config: GatewayConfig, listener: str | None) -> BinarySettings:
    """The connection settings of a binary socket tagged with `listener`."""
    return BinarySettings(
        max_frame_size=config.max_message_size + FRAME_PADDING,
        max_connections=config.broker_max_connections,
        max_connections_per_ip=config.max_connections_per_ip,
        keep_alive_interval=float(config.keep_alive_interval_seconds),
        handshake_timeout=config.connection_handshake_timeout_seconds,
        max_message_size=config.max_message_size,
        proxy_protocol=config.settings_for(listener).proxy_protocol,
        trusted_proxies=config.trusted_proxies(),
    )


def http_settings(
    config: GatewayConfig,
    listener: str | None,
    authenticator: Authenticator | None,
    listener_table: ListenerTable,
) -> HttpSettings:
    """The settings of an HTTP socket tagged with `listener` (`listener_table`: the rows of
    every socket, read when asked: filled in once the ports are known)."""
    return HttpSettings(
        listener=listener,
        authenticator=authenticator or Authenticator(),
        super_users=frozenset(config.super_user_roles),
        trusted_proxies=config.trusted_proxies(),
        forwarded_headers=tuple(config.trusted_forwarded_headers),
        authenticate_metrics=config.authenticate_metrics_endpoint,
        watch=watch_settings(config),
        listener_table=listener_table,
    )


def workers() -> int:
    """How many workers share the process's bounds (`run --workers N`; 1 alone)."""
    try:
        return max(1, int(os.environ.get(WORKERS_ENV, "1")))
    except ValueError:
        return 1


def held_bytes(config: GatewayConfig) -> HeldBytes:
    """The one byte budget (the heldBytes* keys). Under `run --workers N` each worker holds
    1/N of the total and of the unread share, so the process never holds more than the
    configured total in all; one client's bound is at most a worker's total (a client
    connects to one worker)."""
    count = workers()
    total = config.held_bytes_max // count
    return HeldBytes(
        total=total,
        per_owner=min(config.held_bytes_max_per_client, total),
        unread=config.held_bytes_max_unread // count,
    )


def watch_settings(config: GatewayConfig) -> WatchSettings:
    """The bounds of the ownership watch's streams (the watch* keys); under `run --workers N`
    each worker enforces its share of the per-address and per-role limits."""
    return WatchSettings(
        workers=workers(),
        max_topics=config.watch_max_topics_per_stream,
        max_streams_per_address=config.watch_max_streams_per_address,
        max_streams_per_role=config.watch_max_streams_per_role,
        max_frame_bytes=config.watch_max_frame_bytes,
        stalled_reader_timeout=config.watch_stalled_reader_timeout_seconds,
    )


def link_settings(config: GatewayConfig) -> LinkSettings:
    """How the gateway reaches brokers for what only a broker can answer."""
    secret = config.broker_client_authentication_parameters
    token = None
    if config.broker_client_authentication_plugin == TOKEN_PROVIDER and secret is not None:
        token = secret.get_secret_value().strip()
    return LinkSettings(
        tls=config.tls_enabled_with_broker,
        trust_certs_file=config.broker_client_trust_certs_file_path,
        verify_hostname=config.tls_hostname_verification_enabled,
        token=token,
        forward_credentials=config.forward_authorization_credentials,
        anonymous_role=config.anonymous_user_role,
        internal_listener=config.internal_listener_name,
    )


def authenticator(
    config: GatewayConfig, *, registry: CollectorRegistry | None = None
) -> Authenticator:
    """Load the providers (reads key files); AuthConfigError names a key that does not
    load. Providers are loaded only when some socket requires authentication."""
    required = {
        name: own
        for name, settings in config.listener_settings.items()
        if (own := settings.authentication_required) is not None
    }
    providers: list[AuthenticationProvider] = []
    if config.authentication_enabled or any(required.values()):
        for name in config.authentication_providers:
            if name == TOKEN_PROVIDER:
                providers.append(token_provider(config))
            elif name == TLS_PROVIDER:
                providers.append(TlsAuthenticationProvider())
    allowed = {
        name: names
        for name, settings in config.listener_settings.items()
        if (names := settings.allowed_listener_names) is not None
    }
    certified = [
        name
        for name, tls in config.tls_settings().items()
        if name is not None and tls.require_client_cert
    ]
    return Authenticator(
        providers,
        enabled=config.authentication_enabled,
        required=required,
        allowed_names=allowed,
        certificate_required=certified,
        registry=registry,
    )


def token_provider(config: GatewayConfig) -> TokenAuthenticationProvider:
    """The JWT provider of tokenSecretKey (HS256) or tokenPublicKey."""
    if config.token_secret_key is not None:
        secret = read_key("tokenSecretKey", config.token_secret_key)
        if len(secret) < MIN_SECRET_BYTES:
            raise AuthConfigError(
                f"tokenSecretKey: an HS256 secret needs at least {MIN_SECRET_BYTES} bytes, "
                f"this has {len(secret)}"
            )
        key: bytes | rsa.RSAPublicKey | ec.EllipticCurvePublicKey = secret
        algorithm = SECRET_KEY_ALGORITHM
    elif config.token_public_key is not None:
        algorithm = config.token_public_alg
        key = load_public_key(
            read_key("tokenPublicKey", config.token_public_key), algorithm, "tokenPublicKey"
        )
    else:
        raise AuthConfigError(
            "tokenSecretKey: the token provider needs tokenSecretKey or tokenPublicKey"
        )
    return TokenAuthenticationProvider(
        key,
        algorithm,
        role_claim=config.token_auth_claim,
        audience_claim=config.token_audience_claim,
        audience=config.token_audience,
    )
