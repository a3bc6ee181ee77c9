"""The value types of the configuration's keys, and the settings one listener may override
(`listener.<name>.<key>=value`)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

LISTENER_PREFIX = "listener."


def blank_is_none(value: Any) -> Any:
    return None if isinstance(value, str) and not value.strip() else value


def comma_list(value: Any) -> Any:
    if isinstance(value, str):
        return tuple(item.strip() for item in value.split(",") if item.strip())
    return value


Port = Annotated[Annotated[int, Field(ge=0, le=65535)] | None, BeforeValidator(blank_is_none)]
OptionalText = Annotated[str | None, BeforeValidator(blank_is_none)]
CommaList = Annotated[tuple[str, ...], BeforeValidator(comma_list)]


def _store_type(value: Any) -> Any:
    if isinstance(value, str) and value.strip():
        if value.strip().upper() not in ("PEM", "PKCS12"):
            raise ValueError(f"'{value}' is not PEM or PKCS12")
        return value.strip().upper()
    return blank_is_none(value)


StoreType = Annotated[str | None, BeforeValidator(_store_type)]
OptionalCommaList = Annotated[tuple[str, ...] | None, BeforeValidator(comma_list)]


class ListenerSettings(BaseModel):
    """Settings one listener may override, written `listener.<name>.<key>=value`.
    A TLS key left unset here falls back to the global key of the same name."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_attribute_docstrings=True,
    )

    # Pulsar's proxy_through_service_url: clients would reconnect to the gateway with
    # CONNECT.proxy_to_broker_url and send their producers and consumers to it, which a lookup
    # service cannot serve. Accepted only as false (a config that spells out the default).
    proxy_through_service_url: bool = False
    """Retired: true is an error (the gateway answers lookups and relays no connections)."""

    tls_certificate_file_path: OptionalText = None
    """This listener's PEM certificate chain (unset: the global key)."""
    tls_key_file_path: OptionalText = None
    """This listener's PEM private key (unset: the global key)."""
    tls_key_password: OptionalText = None
    """The password of this listener's encrypted PEM key (unset: the global key)."""
    tls_trust_certs_file_path: OptionalText = None
    """The CAs this listener's client certificates must chain to (unset: the global key)."""
    tls_key_store_type: StoreType = None
    """`PEM` or `PKCS12` for this listener (unset: the global key)."""
    tls_key_store: OptionalText = None
    """This listener's PKCS#12 keystore (unset: the global key)."""
    tls_key_store_password: OptionalText = None
    """The password of this listener's keystore (unset: the global key)."""
    tls_require_trusted_client_cert_on_connect: bool | None = None
    """Require a trusted client certificate on this listener (unset: the global key)."""
    tls_protocols: OptionalCommaList = None
    """This listener's TLS versions (unset: the global key)."""
    tls_ciphers: OptionalCommaList = None
    """This listener's cipher suites (unset: the global key)."""

    authentication_required: Annotated[bool | None, BeforeValidator(blank_is_none)] = None
    """Whether lookups on this listener must authenticate (unset: `authenticationEnabled`)."""
    allowed_listener_names: OptionalCommaList = None
    """Listener names a client on this listener may ask for (`listenerName`, the header, the
    binary field); unset: any. A name outside the list is refused; the socket's own listener is
    always allowed."""

    # Where a client is (issue: clients behind balancers all arrive from one address).
    sni_hostnames: OptionalCommaList = None
    """TLS server names that choose this listener on any TLS socket: exact names and
    `*.suffix` wildcards, case ignored; the handshake presents this listener's certificate. A
    name under two listeners is an error."""
    client_cidrs: OptionalCommaList = None
    """Client networks (IPv4/IPv6 CIDRs, or bare addresses) that choose this listener on any
    socket; the most specific prefix across listeners wins. One network under two listeners is
    an error, and so are host bits."""
    proxy_protocol: bool = False
    """This listener's sockets (binary and HTTP, plaintext and TLS) require a PROXY protocol v1
    or v2 header before anything else, from a peer in `trustedProxyCidrs`."""

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
