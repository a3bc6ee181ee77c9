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
    authentication_required: Annotated[bool | None, BeforeValidator(blank_is_none)] = None
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
