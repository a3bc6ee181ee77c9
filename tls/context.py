"""Server-side SSLContexts for TLS sockets, from a listener's TLS settings and loaded material.

`build_context` makes one context: TLS 1.2 minimum (``tlsProtocols`` may narrow it to TLS 1.3),
``tlsCiphers``, the trust store for client certificates (``tlsTrustCertsFilePath``; a client
certificate is then checked when presented, and required with
``tlsRequireTrustedClientCertOnConnect``), and the certificate chain and key. Where client
certificates are checked, TLS session resumption is off (no tickets, TLS 1.2 and 1.3, and no server
session cache, TLS 1.2 session IDs: tls.session_cache): a resumed session skips the check, so a
rotated trust file would not reach clients that resume.

Getting in-memory key material into OpenSSL: ``SSLContext.load_cert_chain`` only reads files.
`load_material` therefore

1. re-encrypts the key with a random one-time password (256 bits from ``secrets``) that only
   this process's memory holds, so the bytes it writes are useless without it;
2. writes chain and encrypted key to an anonymous in-memory file (``memfd_create``: no name in
   any file system, readable by this process through ``/proc/self/fd``), or where that does not
   exist to a file created 0600 (O_EXCL) in a fresh 0700 temporary directory;
3. lets OpenSSL load it, then closes (memfd) or deletes (file and directory) it at once, also when
   the load fails.

The unencrypted key is never written anywhere.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import ssl
import tempfile
from collections.abc import Iterator
from pathlib import Path

from cryptography.hazmat.primitives import serialization

from pulsar_lookup_gateway.tls import session_cache
from pulsar_lookup_gateway.tls.errors import TlsConfigError
from pulsar_lookup_gateway.tls.material import Material
from pulsar_lookup_gateway.tls.settings import TlsSettings

__all__ = [
    "TLS13_SUITES",
    "TlsConfigError",
    "build_context",
    "check_options",
    "load_material",
    "no_resumption",
    "sealed",
]

log = logging.getLogger(__name__)
_cache_warned = False  # the session cache warning is logged once

_VERSIONS = {
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
#: TLS 1.3 cipher suites. OpenSSL always enables its defaults for TLS 1.3 and Python's ssl module
#: cannot change them, so these names are accepted in tlsCiphers but restrict nothing.
TLS13_SUITES = frozenset(
    {
        "TLS_AES_128_GCM_SHA256",
        "TLS_AES_256_GCM_SHA384",
        "TLS_CHACHA20_POLY1305_SHA256",
        "TLS_AES_128_CCM_SHA256",
        "TLS_AES_128_CCM_8_SHA256",
    }
)


def check_options(settings: TlsSettings) -> None:
    """Raise TlsConfigError for options no context can be built with (before loading files),
    naming the key each came from (``listener.x.tlsProtocols``)."""
    _context_without_material(settings, warn=True)


def build_context(
    settings: TlsSettings,
    material: Material,
    trust_pem: str | None,
) -> ssl.SSLContext:
    """A new server context serving `material`, trusting `trust_pem` for client certificates."""
    context = _context_without_material(settings)
    if trust_pem is not None:
        try:
            context.load_verify_locations(cadata=trust_pem)
        except ssl.SSLError as exc:
            raise TlsConfigError(
                f"{settings.key('trust_certs_file')} {settings.trust_certs_file}: {exc}"
            ) from None
    elif settings.require_client_cert:  # _context_without_material checked the setting
        raise TlsConfigError(
            f"{settings.key('require_client_cert')}=true but no trusted certificates are loaded"
        )
    load_material(context, material)
    return context


def _context_without_material(settings: TlsSettings, *, warn: bool = False) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.options |= ssl.OP_NO_RENEGOTIATION
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if settings.protocols:
        unknown = [p for p in settings.protocols if p not in _VERSIONS]
        if unknown:
            raise TlsConfigError(
                f"{settings.key('protocols')}: {', '.join(unknown)} not supported; "
                "use TLSv1.2 and/or TLSv1.3 (TLS 1.2 is the minimum)"
            )
        versions = sorted(_VERSIONS[p] for p in settings.protocols)
        context.minimum_version, context.maximum_version = versions[0], versions[-1]
    if settings.ciphers:
        _set_ciphers(context, settings.ciphers, settings.key("ciphers"), warn)
    if settings.require_client_cert and not settings.trust_certs_file:
        raise TlsConfigError(
            f"{settings.key('require_client_cert')}=true needs "
            f"{settings.key('trust_certs_file')} (the CAs client certificates must chain to)"
        )
    if settings.trust_certs_file:
        context.verify_mode = (
            ssl.CERT_REQUIRED if settings.require_client_cert else ssl.CERT_OPTIONAL
        )
        no_resumption(context)
    return context


def no_resumption(context: ssl.SSLContext) -> None:
    """No session resumption on `context`: no tickets (TLS 1.2 and 1.3) and no server session
    cache (TLS 1.2 session IDs). For contexts that check client certificates: a resumed session
    skips the check, so a client could keep coming back with a certificate that a rotated trust
    file no longer accepts (measured: TLS 1.2 and 1.3 both resume otherwise)."""
    context.num_tickets = 0
    context.options |= ssl.OP_NO_TICKET
    why = session_cache.disable(context)
    if why is not None:
        global _cache_warned
        if not _cache_warned:
            _cache_warned = True
            log.warning(
                "cannot turn off the TLS session cache (%s): where client certificates are "
                "checked, a TLS 1.2 client may resume a session made before a trust file "
                "rotation (OpenSSL's session timeout bounds it)",
                why,
            )


def _set_ciphers(context: ssl.SSLContext, ciphers: tuple[str, ...], key: str, warn: bool) -> None:
    tls12 = [c for c in ciphers if c not in TLS13_SUITES]
    unknown = []
    for name in tls12:
        probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            probe.set_ciphers(name)
        except ssl.SSLError:
            unknown.append(name)
    if unknown:
        raise TlsConfigError(
            f"{key}: {', '.join(unknown)}: not an OpenSSL cipher name (OpenSSL spells them "
            "like ECDHE-RSA-AES128-GCM-SHA256)"
        )
    if warn and len(tls12) < len(ciphers):
        log.warning(
            "%s: TLS 1.3 suites (%s) cannot be restricted here; OpenSSL's defaults apply to "
            "TLS 1.3",
            key,
            ", ".join(c for c in ciphers if c in TLS13_SUITES),
        )
    if tls12:
        context.set_ciphers(":".join(tls12))


# --- key material into OpenSSL ---------------------------------------------------------------


def sealed(material: Material) -> tuple[bytes, bytes]:
    """(chain + key re-encrypted with a one-time password, that password)."""
    password = secrets.token_urlsafe(32).encode()  # 256 bits, ASCII (no NUL for C code)
    key = serialization.load_pem_private_key(material.key_pem, None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(password),
    )
    return material.chain_pem + encrypted, password


def load_material(
    context: ssl.SSLContext, material: Material, *, scratch_dir: Path | None = None
) -> None:
    """Load the chain and key into `context` without writing the unencrypted key anywhere.

    `scratch_dir` forces the temporary-file way (in a private directory made inside it)."""
    data, password = sealed(material)
    with _private_file(data, scratch_dir) as path:
        try:
            context.load_cert_chain(path, password=password)
        except ssl.SSLError as exc:
            raise TlsConfigError(
                f"{material.origin}: OpenSSL refused the material: {exc}"
            ) from None


@contextlib.contextmanager
def _private_file(data: bytes, scratch_dir: Path | None) -> Iterator[str]:
    if scratch_dir is None and hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fd = os.memfd_create("pulsar-gateway-tls", os.MFD_CLOEXEC)
        try:
            _write_all(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    directory = tempfile.mkdtemp(prefix="pulsar-gateway-tls-", dir=scratch_dir)  # mode 0700
    path = os.path.join(directory, "material.pem")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        yield path
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
