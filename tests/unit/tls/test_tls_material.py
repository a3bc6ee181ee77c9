"""Loading TLS material (PEM, encrypted PEM, PKCS#12), its checks, SSLContext options, and the
development certificates. Files live in the test's temporary directory; no sockets."""

from __future__ import annotations

import os
import ssl
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pulsar_lookup_gateway.tls.context import build_context, check_options, load_material, sealed
from pulsar_lookup_gateway.tls.devcerts import DevCA, certificate_pem, key_pem, write_dev_certs
from pulsar_lookup_gateway.tls.errors import TlsConfigError
from pulsar_lookup_gateway.tls.material import Material, PemFiles, PemTrustFile, Pkcs12Keystore
from pulsar_lookup_gateway.tls.settings import TlsSettings

EXPIRES = datetime(2031, 2, 3, 4, 5, 6, tzinfo=UTC)


@pytest.fixture(scope="module")
def ca() -> DevCA:
    return DevCA.create("unit test CA")


def settings(**overrides: object) -> TlsSettings:
    values: dict[str, object] = {"certificate_file": "server.crt", "key_file": "server.key"}
    values.update(overrides)
    return TlsSettings(**values)  # type: ignore[arg-type]


def write_pem(
    directory: Path,
    ca: DevCA,
    name: str = "server",
    *,
    password: str | None = None,
    not_after: datetime | None = None,
    key_type: str | None = None,
    chain: bool = False,
) -> PemFiles:
    key, cert = ca.issue(name, ["127.0.0.1"], not_after=not_after, key_type=key_type)
    crt, pem_key = directory / f"{name}.crt", directory / f"{name}.key"
    crt.write_bytes(certificate_pem(cert, ca.certificate) if chain else certificate_pem(cert))
    pem_key.write_bytes(key_pem(key, password))
    return PemFiles(crt, pem_key, password)


def write_p12(directory: Path, ca: DevCA, password: str | None, *, with_key: bool = True) -> Path:
    key, cert = ca.issue("p12-server", ["127.0.0.1"], not_after=EXPIRES)
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode())
        if password
        else serialization.NoEncryption()
    )
    data = pkcs12.serialize_key_and_certificates(
        b"gw", key if with_key else None, cert, [ca.certificate], encryption
    )
    path = directory / "server.p12"
    path.write_bytes(data)
    return path


def common_name(material: Material) -> str:
    leaf = x509.load_pem_x509_certificates(material.chain_pem)[0]
    return str(leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


# --- PEM ---------------------------------------------------------------------------------------


def test_pem_files_load_chain_key_and_expiry(tmp_path: Path, ca: DevCA) -> None:
    files = write_pem(tmp_path, ca, not_after=EXPIRES, chain=True)
    material = files.load()
    assert common_name(material) == "server"
    assert len(x509.load_pem_x509_certificates(material.chain_pem)) == 2  # leaf, then the CA
    assert material.key_pem.startswith(b"-----BEGIN PRIVATE KEY-----")
    assert material.not_after == EXPIRES
    assert material.expiry_timestamp == EXPIRES.timestamp()
    assert material.subject == "CN=server"
    assert (
        material.origin == f"tlsCertificateFilePath {files.certificate}, tlsKeyFilePath {files.key}"
    )
    assert "PRIVATE" not in repr(material)


def test_an_encrypted_pem_key_is_decrypted_in_memory(tmp_path: Path, ca: DevCA) -> None:
    files = write_pem(tmp_path, ca, password="pass phrase")
    assert b"ENCRYPTED" in files.key.read_bytes()
    material = files.load()
    key = serialization.load_pem_private_key(material.key_pem, None)  # no password needed now
    leaf = x509.load_pem_x509_certificate(material.chain_pem)
    assert key.public_key() == leaf.public_key()


def test_an_encrypted_key_needs_its_password(tmp_path: Path, ca: DevCA) -> None:
    files = write_pem(tmp_path, ca, password="right")
    with pytest.raises(TlsConfigError) as wrong:
        PemFiles(files.certificate, files.key, "wrong").load()
    assert str(wrong.value) == (
        f"tlsKeyFilePath {files.key}: cannot decrypt the private key: wrong password "
        "(tlsKeyPassword)"
    )
    with pytest.raises(TlsConfigError, match="encrypted and tlsKeyPassword is not set"):
        PemFiles(files.certificate, files.key, None).load()


def test_a_password_for_a_plain_key_is_ignored(tmp_path: Path, ca: DevCA) -> None:
    files = write_pem(tmp_path, ca)
    assert common_name(PemFiles(files.certificate, files.key, "unused").load()) == "server"


def test_a_key_of_another_certificate_is_refused(tmp_path: Path, ca: DevCA) -> None:
    mine = write_pem(tmp_path, ca, "mine")
    theirs = write_pem(tmp_path, ca, "theirs")
    with pytest.raises(TlsConfigError) as caught:
        PemFiles(mine.certificate, theirs.key).load()
    assert str(caught.value) == (
        f"tlsKeyFilePath {theirs.key} and tlsCertificateFilePath {mine.certificate}: "
        "the private key does not match the certificate"
    )


def test_a_key_of_another_type_is_refused(tmp_path: Path, ca: DevCA) -> None:
    ec = write_pem(tmp_path, ca, "ec")
    rsa = write_pem(tmp_path, ca, "rsa", key_type="rsa")
    with pytest.raises(TlsConfigError, match="does not match"):
        PemFiles(ec.certificate, rsa.key).load()


def test_the_server_certificate_must_come_first(tmp_path: Path, ca: DevCA) -> None:
    files = write_pem(tmp_path, ca)
    leaf = files.certificate.read_bytes()
    files.certificate.write_bytes(certificate_pem(ca.certificate) + leaf)
    with pytest.raises(TlsConfigError, match="matches certificate #2 of the file, not the first"):
        files.load()


@pytest.mark.parametrize(
    ("which", "content", "message"),
    [
        ("certificate", None, "cannot read: No such file or directory"),
        ("key", None, "cannot read: No such file or directory"),
        ("certificate", b"hello", "holds no PEM certificate"),
        ("key", b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "holds no PEM"),
    ],
)
def test_unusable_files_are_named_with_their_setting(
    tmp_path: Path, ca: DevCA, which: str, content: bytes | None, message: str
) -> None:
    files = write_pem(tmp_path, ca)
    path = files.certificate if which == "certificate" else files.key
    if content is None:
        path.unlink()
    else:
        path.write_bytes(content)
    renamed = PemFiles(
        files.certificate,
        files.key,
        certificate_setting="listener.x.tlsCertificateFilePath",
        key_setting="listener.x.tlsKeyFilePath",
    )
    with pytest.raises(TlsConfigError) as caught:
        renamed.load()
    setting = "tlsCertificateFilePath" if which == "certificate" else "tlsKeyFilePath"
    assert str(caught.value).startswith(f"listener.x.{setting} {path}: {message}")


def test_fingerprint_follows_file_contents(tmp_path: Path, ca: DevCA) -> None:
    files = write_pem(tmp_path, ca)
    before = files.fingerprint()
    assert files.fingerprint() == before
    os.utime(files.certificate, (0, 0))  # touched, same bytes
    assert files.fingerprint() == before
    write_pem(tmp_path, ca)  # new certificate and key at the same paths
    rotated = files.fingerprint()
    assert rotated != before
    files.key.unlink()
    assert files.fingerprint() not in (before, rotated)  # unreadable is a state, not a crash


# --- PKCS#12 -----------------------------------------------------------------------------------


def test_pkcs12_keystore_loads_with_its_password(tmp_path: Path, ca: DevCA) -> None:
    material = Pkcs12Keystore(write_p12(tmp_path, ca, "p12 pass"), "p12 pass").load()
    assert common_name(material) == "p12-server"
    assert material.not_after == EXPIRES
    assert len(x509.load_pem_x509_certificates(material.chain_pem)) == 2


def test_pkcs12_without_a_password(tmp_path: Path, ca: DevCA) -> None:
    assert common_name(Pkcs12Keystore(write_p12(tmp_path, ca, None)).load()) == "p12-server"


@pytest.mark.parametrize("password", ["wrong", None])
def test_pkcs12_wrong_password_names_the_store(
    tmp_path: Path, ca: DevCA, password: str | None
) -> None:
    path = write_p12(tmp_path, ca, "right")
    store = Pkcs12Keystore(
        path, password, "listener.a.tlsKeyStore", "listener.a.tlsKeyStorePassword"
    )
    with pytest.raises(TlsConfigError) as caught:
        store.load()
    message = str(caught.value)
    assert message.startswith(f"listener.a.tlsKeyStore {path}: cannot open the PKCS#12 keystore")
    assert "wrong password (listener.a.tlsKeyStorePassword" in message


def test_pkcs12_without_a_key_is_refused(tmp_path: Path, ca: DevCA) -> None:
    path = write_p12(tmp_path, ca, "pw", with_key=False)
    with pytest.raises(TlsConfigError, match="holds no private key"):
        Pkcs12Keystore(path, "pw").load()


def test_a_pem_file_is_not_a_keystore(tmp_path: Path, ca: DevCA) -> None:
    files = write_pem(tmp_path, ca)
    with pytest.raises(TlsConfigError, match="not a PKCS#12 file"):
        Pkcs12Keystore(files.certificate, "pw").load()


# --- trust -------------------------------------------------------------------------------------


def test_trust_file_loads_every_ca(tmp_path: Path, ca: DevCA) -> None:
    other = DevCA.create("other CA")
    path = tmp_path / "trust.pem"
    path.write_bytes(certificate_pem(ca.certificate, other.certificate))
    pem = PemTrustFile(path).load()
    assert pem.count("BEGIN CERTIFICATE") == 2
    path.write_text("nothing")
    with pytest.raises(TlsConfigError, match=f"tlsTrustCertsFilePath {path}: holds no PEM"):
        PemTrustFile(path).load()


# --- SSLContext --------------------------------------------------------------------------------


def test_context_defaults_to_tls_1_2_and_no_client_certificates(tmp_path: Path, ca: DevCA) -> None:
    context = build_context(settings(), write_pem(tmp_path, ca).load(), None)
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert context.verify_mode == ssl.CERT_NONE
    assert context.options & ssl.OP_NO_RENEGOTIATION


def test_context_protocols_and_ciphers(tmp_path: Path, ca: DevCA) -> None:
    material = write_pem(tmp_path, ca).load()
    only13 = build_context(settings(protocols=("TLSv1.3",)), material, None)
    assert (only13.minimum_version, only13.maximum_version) == (
        ssl.TLSVersion.TLSv1_3,
        ssl.TLSVersion.TLSv1_3,
    )
    ciphers = ("ECDHE-ECDSA-AES256-GCM-SHA384", "TLS_AES_256_GCM_SHA384")
    context = build_context(settings(ciphers=ciphers), material, None)
    tls12 = {c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert tls12 == {"ECDHE-ECDSA-AES256-GCM-SHA384"}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"protocols": ("TLSv1.1", "TLSv1.2")}, "tlsProtocols: TLSv1.1 not supported"),
        ({"protocols": ("SSLv3",)}, "tlsProtocols: SSLv3 not supported"),
        (
            {"ciphers": ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256")},
            "tlsCiphers: TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256: not an OpenSSL cipher name",
        ),
        (
            {"require_client_cert": True},
            "tlsRequireTrustedClientCertOnConnect=true needs tlsTrustCertsFilePath",
        ),
    ],
)
def test_unusable_options_name_their_setting(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(TlsConfigError) as caught:
        check_options(settings(**overrides))
    assert str(caught.value).startswith(message)


def test_option_errors_name_the_listener_key() -> None:
    keys = {"protocols": "listener.ext.tlsProtocols"}
    with pytest.raises(TlsConfigError, match=r"^listener\.ext\.tlsProtocols: TLSv1 not"):
        check_options(settings(protocols=("TLSv1",), keys=keys))


def test_client_certificates_checked_when_trusted_required_when_asked(
    tmp_path: Path, ca: DevCA
) -> None:
    material = write_pem(tmp_path, ca).load()
    trust = certificate_pem(ca.certificate).decode()
    optional = build_context(settings(trust_certs_file="ca.pem"), material, trust)
    assert optional.verify_mode == ssl.CERT_OPTIONAL
    assert optional.cert_store_stats()["x509_ca"] == 1
    required = build_context(
        settings(trust_certs_file="ca.pem", require_client_cert=True), material, trust
    )
    assert required.verify_mode == ssl.CERT_REQUIRED
    # no session resumption where client certificates are checked (it would skip the check)
    for context in (optional, required):
        assert context.num_tickets == 0
        assert context.options & ssl.OP_NO_TICKET
    plain = build_context(settings(), material, None)
    assert plain.num_tickets > 0
    assert not plain.options & ssl.OP_NO_TICKET


def test_material_is_loaded_without_leaving_a_file(tmp_path: Path, ca: DevCA) -> None:
    """The temporary-file way (where memfd_create is missing): nothing is left behind."""
    material = write_pem(tmp_path, ca, password="pw").load()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    load_material(context, material, scratch_dir=scratch)
    assert list(scratch.iterdir()) == []
    load_material(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), material)  # memfd where available


def test_what_is_written_for_openssl_holds_only_an_encrypted_key(tmp_path: Path, ca: DevCA) -> None:
    material = write_pem(tmp_path, ca).load()
    data, password = sealed(material)
    assert b"-----BEGIN ENCRYPTED PRIVATE KEY-----" in data
    assert b"-----BEGIN PRIVATE KEY-----" not in data
    assert data.startswith(material.chain_pem)
    assert len(password) >= 32
    assert sealed(material)[1] != password  # a new password every time
    key = serialization.load_pem_private_key(data[len(material.chain_pem) :], password)
    assert key.public_key() == x509.load_pem_x509_certificate(material.chain_pem).public_key()


# --- development certificates ------------------------------------------------------------------


def test_dev_certs_are_a_working_set(tmp_path: Path) -> None:
    certs = write_dev_certs(tmp_path / "out", ["gw.example.com", "10.1.2.3"], client_cn="spark")
    ca_cert = x509.load_pem_x509_certificate(certs.ca_cert.read_bytes())
    server = x509.load_pem_x509_certificate(certs.server_cert.read_bytes())
    client = x509.load_pem_x509_certificate(certs.client_cert.read_bytes())
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(name.value) for name in sans] == [
        "gw.example.com",
        "10.1.2.3",
        "127.0.0.1",
        "127.0.0.2",
        "localhost",
    ]
    assert client.subject.rfc4514_string() == "CN=spark"
    for leaf in (server, client):
        leaf.verify_directly_issued_by(ca_cert)
    usage = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    for name in ("ca.key", "server.key", "client.key", "server.p12"):
        assert stat.S_IMODE((certs.directory / name).stat().st_mode) == 0o600
    # the server files load as gateway material, PEM and PKCS#12 alike
    pem = PemFiles(certs.server_cert, certs.server_key).load()
    p12 = Pkcs12Keystore(certs.server_p12, certs.p12_password).load()
    assert pem.sha256 == p12.sha256
    assert pem.not_after - datetime.now(UTC) > timedelta(days=360)
    assert PemFiles(certs.client_cert, certs.client_key).load().subject == "CN=spark"


def test_dev_certs_do_not_overwrite_unless_told(tmp_path: Path) -> None:
    first = write_dev_certs(tmp_path, p12_password="fixed")
    before = first.server_cert.read_bytes()
    with pytest.raises(FileExistsError, match="already exist"):
        write_dev_certs(tmp_path)
    assert first.server_cert.read_bytes() == before
    write_dev_certs(tmp_path, overwrite=True, key_type="rsa")
    assert first.server_cert.read_bytes() != before
    key = serialization.load_pem_private_key(first.server_key.read_bytes(), None)
    assert isinstance(key, rsa.RSAPrivateKey)
