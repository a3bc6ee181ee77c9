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
    """The PEM certificate chain TLS sockets present."""
    tls_key_file_path: OptionalText = None
    """The PEM private key of `tlsCertificateFilePath`."""
    tls_key_password: OptionalText = None
    """The password of an encrypted PEM key (empty: not encrypted)."""
    tls_trust_certs_file_path: OptionalText = None
    """The CA certificates client certificates must chain to (mTLS)."""
    tls_key_store_type: StoreType = "PEM"
    """`PEM` (the files above) or `PKCS12` (`tlsKeyStore`)."""
    tls_key_store: OptionalText = None
    """A PKCS#12 keystore holding the certificate and key, with `tlsKeyStoreType=PKCS12`."""
    tls_key_store_password: OptionalText = None
    """The password of `tlsKeyStore`."""
    tls_require_trusted_client_cert_on_connect: bool = False
    """Require a client certificate that chains to `tlsTrustCertsFilePath` on every TLS
    connection."""
    tls_protocols: CommaList = ()
    """Allowed TLS versions; empty: TLS 1.2 and newer."""
    tls_ciphers: CommaList = ()
    """Allowed cipher suites; empty: the defaults."""
    tls_cert_refresh_check_duration_sec: int = Field(300, ge=0)
    """How often (seconds) the certificate and key files are checked for changes."""
