"""TLS key material: where it comes from (keystore providers) and what it is once loaded.

A :class:`KeystoreProvider` turns some source into :class:`Material`: the certificate chain and
the private key as PEM bytes, the key unencrypted and held in memory only, plus what operators
need to know about the certificate (expiry, subject). Two providers read Pulsar's keys:
:class:`PemFiles` (``tlsCertificateFilePath``, ``tlsKeyFilePath``, ``tlsKeyPassword``) and
:class:`Pkcs12Keystore` (``tlsKeyStoreType=PKCS12``, ``tlsKeyStore``, ``tlsKeyStorePassword``).
Another source (a secrets manager, say) only has to implement the protocol.

Every problem raises :class:`~tls.errors.TlsConfigError` naming the setting and the file: an
unreadable file, a file that holds no certificate or no key, a wrong password, a key that does
not belong to the certificate.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Protocol

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.serialization import pkcs12

from pulsar_lookup_gateway.tls.errors import TlsConfigError
from pulsar_lookup_gateway.tls.settings import TLS_KEYS

__all__ = [
    "KeystoreProvider",
    "Material",
    "PemFiles",
    "PemTrustFile",
    "Pkcs12Keystore",
    "TrustProvider",
    "material_of",
]

# Private keys a TLS server certificate can carry (OpenSSL signs handshakes with them).
_SERVER_KEY_TYPES = (
    rsa.RSAPrivateKey,
    ec.EllipticCurvePrivateKey,
    ed25519.Ed25519PrivateKey,
    ed448.Ed448PrivateKey,
)
_TlsKey = (
    rsa.RSAPrivateKey
    | ec.EllipticCurvePrivateKey
    | ed25519.Ed25519PrivateKey
    | ed448.Ed448PrivateKey
)


@dataclass(frozen=True, slots=True)
class Material:
    """A loaded certificate chain (leaf first) and its private key, both PEM.

    ``key_pem`` is PKCS#8 and unencrypted: it lives in this process's memory only and is never
    written to disk as is (see :func:`tls.context.load_material`)."""

    chain_pem: bytes = field(repr=False)
    key_pem: bytes = field(repr=False)
    not_after: datetime  # the leaf certificate's notAfter, timezone-aware UTC
    subject: str  # the leaf's subject, RFC 4514
    sha256: str  # the leaf's SHA-256 fingerprint, hex
    origin: str  # where it came from, e.g. "tlsKeyStore /etc/tls/server.p12"

    @property
    def expiry_timestamp(self) -> float:
        return self.not_after.timestamp()


class KeystoreProvider(Protocol):
    """A source of a server's certificate chain and private key."""

    def describe(self) -> str:
        """Where the material comes from, for logs (settings and files, no secrets)."""
        ...

    def fingerprint(self) -> str:
        """A cheap digest of the source's current state; the reload task loads again when it
        changes. Must not raise: an unreadable source is a state too."""
        ...

    def load(self) -> Material:
        """Read and check the material; raises TlsConfigError naming the setting and file."""
        ...


class TrustProvider(Protocol):
    """A source of the CA certificates that client certificates must chain to (mTLS)."""

    def describe(self) -> str: ...

    def fingerprint(self) -> str: ...

    def load(self) -> str:
        """The CA certificates as PEM text; raises TlsConfigError naming the setting and file."""
        ...


@dataclass(frozen=True, slots=True)
class PemFiles:
    """A PEM certificate chain file and a PEM private key file, the key maybe encrypted."""

    certificate: Path
    key: Path
    password: str | None = field(default=None, repr=False)
    certificate_setting: str = TLS_KEYS["certificate_file"]
    key_setting: str = TLS_KEYS["key_file"]
    password_setting: str = TLS_KEYS["key_password"]

    def describe(self) -> str:
        return f"{self.certificate_setting} {self.certificate}, {self.key_setting} {self.key}"

    def fingerprint(self) -> str:
        return _fingerprint((self.certificate, self.key))

    def load(self) -> Material:
        where_cert = f"{self.certificate_setting} {self.certificate}"
        where_key = f"{self.key_setting} {self.key}"
        chain = _pem_certificates(_read(self.certificate, self.certificate_setting), where_cert)
        key = _pem_private_key(
            _read(self.key, self.key_setting), self.password, where_key, self.password_setting
        )
        return material_of(chain, key, where_cert, where_key)


@dataclass(frozen=True, slots=True)
class Pkcs12Keystore:
    """A PKCS#12 keystore (.p12/.pfx) holding the key, its certificate and maybe the chain."""

    path: Path
    password: str | None = field(default=None, repr=False)
    path_setting: str = TLS_KEYS["key_store"]
    password_setting: str = TLS_KEYS["key_store_password"]

    def describe(self) -> str:
        return f"{self.path_setting} {self.path}"

    def fingerprint(self) -> str:
        return _fingerprint((self.path,))

    def load(self) -> Material:
        where = f"{self.path_setting} {self.path}"
        data = _read(self.path, self.path_setting)
        password = self.password.encode() if self.password else None
        try:
            key, certificate, extra = pkcs12.load_key_and_certificates(data, password)
        except ValueError:
            raise TlsConfigError(
                f"{where}: cannot open the PKCS#12 keystore: wrong password "
                f"({self.password_setting}{' is not set' if password is None else ''}) "
                "or not a PKCS#12 file"
            ) from None
        except UnsupportedAlgorithm as exc:
            raise TlsConfigError(f"{where}: unsupported PKCS#12 keystore: {exc}") from None
        if key is None:
            raise TlsConfigError(f"{where}: the keystore holds no private key")
        if certificate is None:
            raise TlsConfigError(f"{where}: the keystore holds no certificate for its key")
        if not isinstance(key, _SERVER_KEY_TYPES):
            raise TlsConfigError(f"{where}: a {_key_kind(key)} key cannot serve TLS")
        chain = [certificate, *(c for c in extra if c != certificate)]
        return material_of(chain, key, where, where)


@dataclass(frozen=True, slots=True)
class PemTrustFile:
    """A PEM file of CA certificates (``tlsTrustCertsFilePath``)."""

    path: Path
    setting: str = TLS_KEYS["trust_certs_file"]

    def describe(self) -> str:
        return f"{self.setting} {self.path}"

    def fingerprint(self) -> str:
        return _fingerprint((self.path,))

    def load(self) -> str:
        where = f"{self.setting} {self.path}"
        certificates = _pem_certificates(_read(self.path, self.setting), where)
        return "".join(
            c.public_bytes(serialization.Encoding.PEM).decode("ascii") for c in certificates
        )


def material_of(
    chain: list[x509.Certificate], key: _TlsKey, where_cert: str, where_key: str
) -> Material:
    """Check that `key` belongs to the first certificate of `chain` and package both."""
    if not chain:
        raise TlsConfigError(f"{where_cert}: no certificate")
    wanted = _public_der(key.public_key())
    position = next((i for i, c in enumerate(chain) if _public_der(c.public_key()) == wanted), None)
    if position is None:
        where = where_cert if where_cert == where_key else f"{where_key} and {where_cert}"
        raise TlsConfigError(f"{where}: the private key does not match the certificate")
    if position:
        raise TlsConfigError(
            f"{where_cert}: the private key matches certificate #{position + 1} of the file, "
            "not the first: the server certificate must come first, then its issuers"
        )
    leaf = chain[0]
    return Material(
        chain_pem=b"".join(c.public_bytes(serialization.Encoding.PEM) for c in chain),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
        not_after=leaf.not_valid_after_utc,
        subject=leaf.subject.rfc4514_string(),
        sha256=leaf.fingerprint(hashes.SHA256()).hex(),
        origin=where_cert if where_cert == where_key else f"{where_cert}, {where_key}",
    )


# --- helpers ---------------------------------------------------------------------------------


def _read(path: Path, setting: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TlsConfigError(f"{setting} {path}: cannot read: {exc.strerror or exc}") from None


def _fingerprint(paths: Iterable[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(str(path).encode() + b"\0")
        try:
            digest.update(path.read_bytes())
        except OSError as exc:
            digest.update(f"\0unreadable: {exc.errno}".encode())
        digest.update(b"\0")
    return digest.hexdigest()


def _pem_certificates(data: bytes, where: str) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError:
        raise TlsConfigError(f"{where}: holds no PEM certificate") from None


def _pem_private_key(
    data: bytes, password: str | None, where: str, password_setting: str
) -> _TlsKey:
    secret = password.encode() if password else None
    try:
        key = serialization.load_pem_private_key(data, secret)
    except TypeError:
        if secret is None:
            raise TlsConfigError(
                f"{where}: the private key is encrypted and {password_setting} is not set"
            ) from None
        # A password for a key that is not encrypted: the key is usable as it is (OpenSSL
        # would load it too), e.g. a global tlsKeyPassword and a listener's plain key.
        key = serialization.load_pem_private_key(data, None)
    except ValueError:
        if secret is not None and b"ENCRYPTED" in data:
            raise TlsConfigError(
                f"{where}: cannot decrypt the private key: wrong password ({password_setting})"
            ) from None
        raise TlsConfigError(f"{where}: holds no PEM private key") from None
    except UnsupportedAlgorithm as exc:
        raise TlsConfigError(f"{where}: unsupported private key: {exc}") from None
    if not isinstance(key, _SERVER_KEY_TYPES):
        raise TlsConfigError(f"{where}: a {_key_kind(key)} key cannot serve TLS")
    return key


def _public_der(public_key: object) -> bytes:
    encode = getattr(public_key, "public_bytes", None)
    if encode is None:  # pragma: no cover - every key type cryptography loads has it
        return b""
    der: bytes = encode(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return der


def _key_kind(key: object) -> str:
    return type(key).__name__.removeprefix("_").removesuffix("PrivateKey") or "unknown"
