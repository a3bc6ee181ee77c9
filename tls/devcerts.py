"""Development certificates: a CA, a server and a client certificate, written with cryptography.

``pulsar-lookup-gateway certs --out DIR --host NAME [--host NAME ...]`` writes

- ``ca.crt``, ``ca.key``: a development CA (trust ``ca.crt`` in clients; keep ``ca.key`` private);
- ``server.crt``, ``server.key``: the gateway's certificate, SANs = the hosts given plus
  127.0.0.1, 127.0.0.2 and localhost (an IP literal becomes an IP SAN);
- ``server.p12``: the same key and certificate (and the CA) as a PKCS#12 keystore, encrypted with
  a random password that the command prints (``tlsKeyStoreType=PKCS12``);
- ``client.crt``, ``client.key``: a client certificate (CN ``client``, or ``--client-cn``) for
  mTLS, e.g. ``pulsar.AuthenticationTLS("client.crt", "client.key")``.

Keys are written 0600. For development and tests only: anyone with ``ca.key`` can mint
certificates these clients trust.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "DEFAULT_HOSTS",
    "DevCA",
    "DevCerts",
    "standalone_tls_env",
    "write_dev_certs",
]

#: Always in the server certificate's SANs (the standalone sockets and local tests use them).
DEFAULT_HOSTS = ("127.0.0.1", "127.0.0.2", "localhost")
FILES = ("ca.crt", "ca.key", "server.crt", "server.key", "server.p12", "client.crt", "client.key")

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


def new_key(key_type: str = "ec") -> PrivateKey:
    """A new private key: "ec" (P-256, the default: fast handshakes) or "rsa" (2048 bits)."""
    if key_type == "ec":
        return ec.generate_private_key(ec.SECP256R1())
    if key_type == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    raise ValueError(f"key type {key_type!r}: use 'ec' or 'rsa'")


def subject_alt_names(hosts: Sequence[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(h.strip() for h in hosts if h.strip()):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


@dataclass
class DevCA:
    """A development certificate authority that issues server and client certificates."""

    key: PrivateKey
    certificate: x509.Certificate
    key_type: str = "ec"

    @classmethod
    def create(
        cls, name: str = "pulsar-lookup-gateway development CA", *, key_type: str = "ec"
    ) -> DevCA:
        key = new_key(key_type)
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.now(UTC)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(hours=1))
            .not_valid_after(now + timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .sign(key, hashes.SHA256())
        )
        return cls(key, certificate, key_type)

    @classmethod
    def load(cls, certificate: Path, key: Path) -> DevCA:
        """A CA written before (``ca.crt``, ``ca.key``), to issue more certificates."""
        private = serialization.load_pem_private_key(key.read_bytes(), None)
        if not isinstance(private, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
            raise ValueError(f"{key}: not an EC or RSA key")
        key_type = "rsa" if isinstance(private, rsa.RSAPrivateKey) else "ec"
        return cls(private, x509.load_pem_x509_certificate(certificate.read_bytes()), key_type)

    def issue(
        self,
        common_name: str,
        hosts: Sequence[str] = (),
        *,
        client: bool = False,
        days: int = 365,
        not_after: datetime | None = None,
        key_type: str | None = None,
    ) -> tuple[PrivateKey, x509.Certificate]:
        """A new key and a certificate for it: a server certificate with `hosts` as SANs, or a
        client certificate (`client=True`)."""
        key = new_key(key_type or self.key_type)
        now = datetime.now(UTC)
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(hours=1))
            .not_valid_after(not_after or now + timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=isinstance(key, rsa.RSAPrivateKey),
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), False
            )
        )
        names = subject_alt_names(hosts)
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return key, builder.sign(self.key, hashes.SHA256())


def certificate_pem(*certificates: x509.Certificate) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certificates)


def key_pem(key: PrivateKey, password: str | None = None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode())
        if password
        else serialization.NoEncryption()
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )


def pkcs12_bytes(
    key: PrivateKey, certificate: x509.Certificate, cas: Sequence[x509.Certificate], password: str
) -> bytes:
    return pkcs12.serialize_key_and_certificates(
        b"server",
        key,
        certificate,
        list(cas),
        serialization.BestAvailableEncryption(password.encode()),
    )


def write_private(path: Path, data: bytes) -> None:
    """Write `data` to a new file only its owner can read (replacing an older file)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


@dataclass(frozen=True)
class DevCerts:
    directory: Path
    hosts: tuple[str, ...]
    p12_password: str = field(repr=False)

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def server_cert(self) -> Path:
        return self.directory / "server.crt"

    @property
    def server_key(self) -> Path:
        return self.directory / "server.key"

    @property
    def server_p12(self) -> Path:
        return self.directory / "server.p12"

    @property
    def client_cert(self) -> Path:
        return self.directory / "client.crt"

    @property
    def client_key(self) -> Path:
        return self.directory / "client.key"


def write_dev_certs(
    out: Path,
    hosts: Sequence[str] = (),
    *,
    client_cn: str = "client",
    p12_password: str | None = None,
    days: int = 365,
    key_type: str = "ec",
    overwrite: bool = False,
) -> DevCerts:
    """Write the development CA, server and client files into `out` (created if needed).
    Refuses to replace existing files unless `overwrite`."""
    out.mkdir(parents=True, exist_ok=True)
    existing = [name for name in FILES if (out / name).exists()]
    if existing and not overwrite:
        raise FileExistsError(f"{out}: {', '.join(existing)} already exist (use --force)")
    all_hosts = tuple(dict.fromkeys([*hosts, *DEFAULT_HOSTS]))
    password = p12_password or secrets.token_urlsafe(12)
    ca = DevCA.create(key_type=key_type)
    server_key, server_cert = ca.issue(all_hosts[0], all_hosts, days=days)
    client_key, client_cert = ca.issue(client_cn, client=True, days=days)
    (out / "ca.crt").write_bytes(certificate_pem(ca.certificate))
    write_private(out / "ca.key", key_pem(ca.key))
    (out / "server.crt").write_bytes(certificate_pem(server_cert))
    write_private(out / "server.key", key_pem(server_key))
    write_private(
        out / "server.p12", pkcs12_bytes(server_key, server_cert, [ca.certificate], password)
    )
    (out / "client.crt").write_bytes(certificate_pem(client_cert))
    write_private(out / "client.key", key_pem(client_key))
    return DevCerts(out, all_hosts, password)


def standalone_tls_env(directory: Path) -> dict[str, str]:
    """For `standalone`: write development certificates into `directory` and return the
    environment overrides pointing the global TLS keys at them."""
    certs = write_dev_certs(directory, overwrite=True)
    return {
        "PULSAR_GATEWAY_tlsCertificateFilePath": str(certs.server_cert),
        "PULSAR_GATEWAY_tlsKeyFilePath": str(certs.server_key),
        "PULSAR_GATEWAY_tlsTrustCertsFilePath": str(certs.ca_cert),
    }
