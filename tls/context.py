"""Server-side SSLContext for a TLS socket, from Pulsar's tls* keys (PEM files)."""

from __future__ import annotations

import ssl
from pathlib import Path

from listeners.config import GatewayConfig

_VERSIONS = {
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}


class TlsConfigError(Exception):
    """TLS material that cannot be used; the message names the file or key."""


def server_context(config: GatewayConfig) -> ssl.SSLContext:
    if config.tls_key_store_type != "PEM":
        raise TlsConfigError("tlsKeyStoreType=PKCS12 is not supported yet; use PEM files")
    cert, key = config.tls_certificate_file_path, config.tls_key_file_path
    if not cert or not key:
        raise TlsConfigError("TLS sockets need tlsCertificateFilePath and tlsKeyFilePath")
    for name, path in (("tlsCertificateFilePath", cert), ("tlsKeyFilePath", key)):
        if not Path(path).is_file():
            raise TlsConfigError(f"{name}: cannot read {path}")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if config.tls_protocols:
        try:
            versions = sorted(_VERSIONS[p] for p in config.tls_protocols)
        except KeyError as exc:
            raise TlsConfigError(f"tlsProtocols: unsupported protocol {exc.args[0]}") from None
        context.minimum_version, context.maximum_version = versions[0], versions[-1]
    if config.tls_ciphers:
        try:
            context.set_ciphers(":".join(config.tls_ciphers))
        except ssl.SSLError as exc:
            raise TlsConfigError(f"tlsCiphers: {exc}") from None
    try:
        context.load_cert_chain(cert, key, password=config.tls_key_password)
    except (ssl.SSLError, OSError) as exc:
        raise TlsConfigError(
            f"{cert} / {key}: cannot load the certificate and key: {exc}"
        ) from None
    trust = config.tls_trust_certs_file_path
    if trust:
        try:
            context.load_verify_locations(trust)
        except (ssl.SSLError, OSError) as exc:
            raise TlsConfigError(f"tlsTrustCertsFilePath: cannot load {trust}: {exc}") from None
        context.verify_mode = (
            ssl.CERT_REQUIRED
            if config.tls_require_trusted_client_cert_on_connect
            else ssl.CERT_OPTIONAL
        )
    elif config.tls_require_trusted_client_cert_on_connect:
        raise TlsConfigError(
            "tlsRequireTrustedClientCertOnConnect=true needs tlsTrustCertsFilePath"
        )
    return context
