"""The TLS keys: the gateway's own certificate and key (PEM or PKCS#12), the certificates it
trusts, and what its TLS sockets accept (each listener may override them)."""

from __future__ import annotations

from pydantic import Field

from pulsar_lookup_gateway.listeners.config.key_group import KeyGroup
from pulsar_lookup_gateway.listeners.config.listener_settings import (
    CommaList,
    OptionalText,
    StoreType,
)


class TlsKeys(KeyGroup):
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
