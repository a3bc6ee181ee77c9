"""TLS on the gateway's real sockets: per-listener certificates, the TLS 1.2 floor,
mTLS, hot reload of rotated files, start-up errors naming the file, the expiry metric.

Certificates come from trustme; the gateway reads them from files in the test's directory, as
configured in a broker.conf-style text. Every network wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import socket
import ssl
import subprocess
import warnings
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID
from prometheus_client.parser import text_string_to_metric_families

from pulsar_lookup_gateway.gateway.process import Gateway
from pulsar_lookup_gateway.listeners.config.model import GatewayConfig
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import BaseCommand, FrameDecoder
from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
from pulsar_lookup_gateway.metadata_store.synthetic import FOUR_BUNDLES, cluster
from pulsar_lookup_gateway.tls.devcerts import standalone_tls_env
from pulsar_lookup_gateway.tls.errors import TlsConfigError
from tests import neighbours
from tests.gateways import config_from, running
from tests.processes import EXE
from tests.waiting import eventually

WAIT = 10.0  # bound on one connection attempt
RELOAD_WAIT = 15.0  # bound on a reload being seen (checks run every second)
TOPIC = "persistent://public/default/t1"
EXPIRY = "pulsar_lookup_gateway_tls_certificate_expiry_seconds"
OWNED = {f"{lower}_{upper}": 1 for lower, upper in itertools.pairwise(FOUR_BUNDLES)}
IPS = ("127.0.0.1", "127.0.0.2")

LISTENERS = (
    "advertisedListeners=internal:pulsar+ssl://127.0.0.1:6651,internal:https://127.0.0.1:8443,"
    "external:pulsar+ssl://127.0.0.2:6651,external:https://127.0.0.2:8443\n"
    "bindAddresses=internal:pulsar+ssl://127.0.0.1:0,internal:https://127.0.0.1:0,"
    "external:pulsar+ssl://127.0.0.2:0,external:https://127.0.0.2:0\n"
    "brokerServicePort=\nwebServicePort=\n"
    "tlsCertRefreshCheckDurationSec=1\n"
)


# --- certificates as files ---------------------------------------------------------------------


class Pki:
    """Two CAs and helpers writing leaf certificates the way operators deploy them."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.ca = trustme.CA()
        self.other_ca = trustme.CA()  # nobody configured trusts it
        self.ca_file = self.file("ca.pem", self.ca.cert_pem.bytes())
        self.other_ca_file = self.file("other-ca.pem", self.other_ca.cert_pem.bytes())

    def file(self, name: str, data: bytes) -> Path:
        """Write `name` atomically (a rotation never shows a half-written file)."""
        path = self.dir / name
        scratch = path.with_name(f".{name}.new")
        scratch.write_bytes(data)
        os.replace(scratch, path)
        return path

    def leaf(
        self,
        common_name: str,
        *,
        key_type: trustme.KeyType = trustme.KeyType.ECDSA,
        not_after: datetime | None = None,
        ca: trustme.CA | None = None,
    ) -> trustme.LeafCert:
        return (ca or self.ca).issue_cert(
            *IPS, "localhost", common_name=common_name, key_type=key_type, not_after=not_after
        )

    def pem(self, leaf: trustme.LeafCert, stem: str, password: str | None = None) -> None:
        """`<stem>.crt` (chain) and `<stem>.key` (encrypted with `password` if given)."""
        key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), None)
        encryption: serialization.KeySerializationEncryption = (
            serialization.BestAvailableEncryption(password.encode())
            if password
            else serialization.NoEncryption()
        )
        self.file(
            f"{stem}.key",
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
            ),
        )
        self.file(f"{stem}.crt", b"".join(blob.bytes() for blob in leaf.cert_chain_pems))

    def p12(self, leaf: trustme.LeafCert, name: str, password: str) -> Path:
        key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), None)
        chain = [x509.load_pem_x509_certificate(b.bytes()) for b in leaf.cert_chain_pems]
        data = pkcs12.serialize_key_and_certificates(
            b"gw",
            key,  # type: ignore[arg-type]
            chain[0],
            chain[1:],
            serialization.BestAvailableEncryption(password.encode()),
        )
        return self.file(name, data)

    def path(self, name: str) -> str:
        return str(self.dir / name)


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


@pytest.fixture
def metadata(tmp_path: Path) -> str:
    path = tmp_path / "cluster.json"
    write_snapshot(path, cluster(brokers=1, owned=OWNED))
    return f"file:{path}"


def config_of(metadata: str, text: str) -> GatewayConfig:
    return config_from(f"metadataStoreUrl={metadata}\n{text}", "t.conf")


def per_listener_text(pki: Pki) -> str:
    return LISTENERS + (
        f"tlsCertificateFilePath={pki.path('internal.crt')}\n"
        f"tlsKeyFilePath={pki.path('internal.key')}\n"
        f"listener.external.tlsCertificateFilePath={pki.path('external.crt')}\n"
        f"listener.external.tlsKeyFilePath={pki.path('external.key')}\n"
    )


# --- clients -----------------------------------------------------------------------------------


def client_context(
    ca_file: Path,
    *,
    cert: trustme.LeafCert | None = None,
    version: ssl.TLSVersion | None = None,
) -> ssl.SSLContext:
    """Verifies the server against `ca_file`, including its address; `version` pins one."""
    context = ssl.create_default_context(cafile=str(ca_file))
    if cert is not None:
        cert.configure_cert(context)
    if version is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # TLS 1.1 on purpose
            context.minimum_version = context.maximum_version = version
        if version < ssl.TLSVersion.TLSv1_2:
            context.set_ciphers("DEFAULT:@SECLEVEL=0")  # let OpenSSL 3 offer TLS 1.1 at all
    return context


def address(gateway: Gateway, listener: str, scheme: str) -> tuple[str, int]:
    host = "127.0.0.2" if listener == "external" else "127.0.0.1"
    return host, gateway.port_of(listener, scheme)


async def served_certificate(
    host: str, port: int, context: ssl.SSLContext
) -> tuple[str, str | None]:
    """(CN of the certificate the server presented, negotiated TLS version)."""
    _, writer = await asyncio.wait_for(
        asyncio.open_connection(host, port, ssl=context, server_hostname=host), WAIT
    )
    try:
        ssl_object = writer.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True)
        subject = x509.load_der_x509_certificate(der).subject
        return str(
            subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
        ), ssl_object.version()
    finally:
        await close(writer)


async def close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(OSError, ssl.SSLError, TimeoutError):
        await asyncio.wait_for(writer.wait_closed(), WAIT)


async def binary_lookup(host: str, port: int, context: ssl.SSLContext) -> BaseCommand:
    """CONNECT and LOOKUP over pulsar+ssl; the LOOKUP_RESPONSE. Raises if the server refused."""
    answer, _ = await neighbours.binary_lookup(
        host, port, TOPIC, ssl_context=context, server_hostname=host
    )
    return answer


async def refused(host: str, port: int, context: ssl.SSLContext) -> str | None:
    """Why a CONNECT over TLS did not get CONNECTED (None: it did)."""
    try:
        await binary_lookup(host, port, context)
    except (ssl.SSLError, ConnectionError, OSError) as exc:
        return str(exc) or type(exc).__name__
    return None


async def https_get(url: str, context: ssl.SSLContext) -> tuple[int, str]:
    timeout = aiohttp.ClientTimeout(total=WAIT)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(url, ssl=context) as response,
    ):
        return response.status, await response.text()


def expiry(gateway: Gateway, listener: str) -> float | None:
    registry = gateway.service.metrics.registry
    value: float | None = registry.get_sample_value(EXPIRY, {"listener": listener})
    return value


# --- per-listener material ---------------------------------------------------------------------


async def test_each_listener_serves_its_own_certificate(pki: Pki, metadata: str) -> None:
    pki.pem(pki.leaf("internal-gateway"), "internal")
    pki.pem(pki.leaf("external-gateway"), "external")
    config = config_of(metadata, per_listener_text(pki))
    trust = client_context(pki.ca_file)
    async with running(config) as gateway:
        for listener, scheme in itertools.product(
            ("internal", "external"), ("pulsar+ssl", "https")
        ):
            host, port = address(gateway, listener, scheme)
            name, _ = await served_certificate(host, port, trust)
            assert name == f"{listener}-gateway", (listener, scheme)
        # and the protocols work over them, answering for the socket's listener
        answer = await binary_lookup(*address(gateway, "external", "pulsar+ssl"), trust)
        assert answer.lookupTopicResponse.brokerServiceUrlTls == "pulsar+ssl://b1.example.com:6651"
        host, port = address(gateway, "internal", "https")
        url = f"https://{host}:{port}/lookup/v2/topic/persistent/public/default/t1"
        status, body = await https_get(url, trust)
        assert status == 200
        assert json.loads(body)["brokerUrl"] == "pulsar://10.0.0.1:6650"


async def test_encrypted_pem_pkcs12_and_legacy_sockets(pki: Pki, metadata: str) -> None:
    """Global material: an encrypted PEM key (legacy and internal sockets); the external
    listener: a PKCS#12 keystore of its own."""
    pki.pem(pki.leaf("global-encrypted"), "global", password="s3cret")
    keystore = pki.p12(pki.leaf("external-p12"), "external.p12", "p12-pass")
    text = LISTENERS.replace("brokerServicePort=\nwebServicePort=\n", "") + (
        "brokerServicePort=\nwebServicePort=\nbrokerServicePortTls=0\nwebServicePortTls=0\n"
        "bindAddress=127.0.0.1\n"
        f"tlsCertificateFilePath={pki.path('global.crt')}\n"
        f"tlsKeyFilePath={pki.path('global.key')}\n"
        "tlsKeyPassword=s3cret\n"
        "listener.external.tlsKeyStoreType=PKCS12\n"
        f"listener.external.tlsKeyStore={keystore}\n"
        "listener.external.tlsKeyStorePassword=p12-pass\n"
    )
    trust = client_context(pki.ca_file)
    async with running(config_of(metadata, text)) as gateway:
        seen = {}
        for listener, scheme in [
            (None, "pulsar+ssl"),
            (None, "https"),
            ("internal", "pulsar+ssl"),
            ("external", "pulsar+ssl"),
            ("external", "https"),
        ]:
            host = "127.0.0.2" if listener == "external" else "127.0.0.1"
            name, _ = await served_certificate(host, gateway.port_of(listener, scheme), trust)
            seen[(listener, scheme)] = name
        assert seen == {
            (None, "pulsar+ssl"): "global-encrypted",
            (None, "https"): "global-encrypted",
            ("internal", "pulsar+ssl"): "global-encrypted",
            ("external", "pulsar+ssl"): "external-p12",
            ("external", "https"): "external-p12",
        }
        assert expiry(gateway, "(none)") is not None


# --- protocol versions -------------------------------------------------------------------------


async def test_tls_1_2_is_the_minimum(pki: Pki, metadata: str) -> None:
    leaf = pki.leaf("gw")
    pki.pem(leaf, "internal")
    pki.pem(leaf, "external")
    tls11 = client_context(pki.ca_file, version=ssl.TLSVersion.TLSv1_1)
    # The client can speak TLS 1.1: a server that allows it accepts it.
    permissive = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    leaf.configure_cert(permissive)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        permissive.minimum_version = ssl.TLSVersion.TLSv1_1
    permissive.set_ciphers("DEFAULT:@SECLEVEL=0")
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=permissive)
    async with server:
        port = server.sockets[0].getsockname()[1]
        assert await served_certificate("127.0.0.1", port, tls11) == ("gw", "TLSv1.1")
    async with running(config_of(metadata, per_listener_text(pki))) as gateway:
        # OpenSSL 3's default security level refuses TLS 1.1 by itself; lower it on the
        # listener's live context so that only the gateway's own floor can refuse it.
        gateway.tls.listeners["internal"].current.set_ciphers("DEFAULT:@SECLEVEL=0")
        for scheme in ("pulsar+ssl", "https"):
            host, port = address(gateway, "internal", scheme)
            with pytest.raises((ssl.SSLError, ConnectionError)):  # an alert, or a reset
                await served_certificate(host, port, tls11)
            tls12 = client_context(pki.ca_file, version=ssl.TLSVersion.TLSv1_2)
            assert await served_certificate(host, port, tls12) == ("gw", "TLSv1.2")
            assert (await served_certificate(host, port, client_context(pki.ca_file)))[1] == (
                "TLSv1.3"
            )


async def test_tls_protocols_can_require_tls_1_3(pki: Pki, metadata: str) -> None:
    pki.pem(pki.leaf("gw"), "internal")
    pki.pem(pki.leaf("gw"), "external")
    text = per_listener_text(pki) + "listener.external.tlsProtocols=TLSv1.3\n"
    tls12 = client_context(pki.ca_file, version=ssl.TLSVersion.TLSv1_2)
    async with running(config_of(metadata, text)) as gateway:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await served_certificate(*address(gateway, "external", "pulsar+ssl"), tls12)
        assert (await served_certificate(*address(gateway, "internal", "pulsar+ssl"), tls12))[
            1
        ] == "TLSv1.2"


# --- mTLS --------------------------------------------------------------------------------------


async def test_mtls_requires_a_client_certificate_from_a_trusted_ca(
    pki: Pki, metadata: str
) -> None:
    pki.pem(pki.leaf("internal-gateway"), "internal")
    pki.pem(pki.leaf("external-gateway"), "external")
    text = per_listener_text(pki) + (
        f"listener.external.tlsTrustCertsFilePath={pki.ca_file}\n"
        "listener.external.tlsRequireTrustedClientCertOnConnect=true\n"
    )
    trusted = pki.ca.issue_cert("client@example.com")
    untrusted = pki.other_ca.issue_cert("client@example.com")
    async with running(config_of(metadata, text)) as gateway:
        host, port = address(gateway, "external", "pulsar+ssl")
        assert await refused(host, port, client_context(pki.ca_file, cert=trusted)) is None
        assert await refused(host, port, client_context(pki.ca_file)) is not None
        assert await refused(host, port, client_context(pki.ca_file, cert=untrusted)) is not None
        # the internal listener asks for no client certificate
        assert (
            await refused(*address(gateway, "internal", "pulsar+ssl"), client_context(pki.ca_file))
            is None
        )

        host, port = address(gateway, "external", "https")
        url = f"https://{host}:{port}/ready"
        status, _ = await https_get(url, client_context(pki.ca_file, cert=trusted))
        assert status == 200
        with pytest.raises((aiohttp.ClientError, ssl.SSLError)):
            await https_get(url, client_context(pki.ca_file))


# --- hot reload --------------------------------------------------------------------------------


async def sees(host: str, port: int, context: ssl.SSLContext, name: str) -> bool:
    return (await served_certificate(host, port, context))[0] == name


async def test_a_rotated_certificate_reaches_new_connections(pki: Pki, metadata: str) -> None:
    pki.pem(pki.leaf("internal-gateway"), "internal")
    pki.pem(pki.leaf("first", key_type=trustme.KeyType.RSA), "external")
    trust = client_context(pki.ca_file)
    async with running(config_of(metadata, per_listener_text(pki))) as gateway:
        host, port = address(gateway, "external", "pulsar+ssl")
        https = address(gateway, "external", "https")
        assert await sees(host, port, trust, "first")
        # a connection made before the rotation
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=trust, server_hostname=host), WAIT
        )
        try:
            # rotate to a new certificate with a key of another type (RSA -> ECDSA)
            second = pki.leaf("second", not_after=datetime(2031, 5, 6, tzinfo=UTC))
            pki.pem(second, "external")
            await eventually(lambda: sees(host, port, trust, "second"), timeout=RELOAD_WAIT)
            assert await sees(*https, trust, "second")
            assert await sees(
                *address(gateway, "internal", "pulsar+ssl"), trust, "internal-gateway"
            )
            assert expiry(gateway, "external") == datetime(2031, 5, 6, tzinfo=UTC).timestamp()
            # the older connection still works, with the certificate it got
            writer.write(codec.connect("before-rotation", 21))
            decoder = FrameDecoder()
            decoder.feed(await asyncio.wait_for(reader.read(65536), WAIT))
            connected = decoder.next_command()
            assert isinstance(connected, BaseCommand)
            assert connected.type == BaseCommand.CONNECTED
            old = x509.load_der_x509_certificate(
                writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
            )
            assert "first" in old.subject.rfc4514_string()
        finally:
            await close(writer)
        registry = gateway.service.metrics.registry
        assert (
            registry.get_sample_value(
                "pulsar_lookup_gateway_tls_reloads_total", {"listener": "external", "outcome": "ok"}
            )
            == 1
        )


@pytest.mark.parametrize("breakage", ["garbage certificate", "key of another certificate"])
async def test_a_broken_rotation_keeps_the_old_certificate_and_logs_the_file(
    pki: Pki, metadata: str, caplog: pytest.LogCaptureFixture, breakage: str
) -> None:
    caplog.set_level(logging.INFO, logger="pulsar_lookup_gateway.tls")
    pki.pem(pki.leaf("internal-gateway"), "internal")
    pki.pem(pki.leaf("first"), "external")
    trust = client_context(pki.ca_file)
    async with running(config_of(metadata, per_listener_text(pki))) as gateway:
        host, port = address(gateway, "external", "https")
        assert await sees(host, port, trust, "first")
        registry = gateway.service.metrics.registry
        failed = {"listener": "external", "outcome": "failed"}
        if breakage == "garbage certificate":
            pki.file("external.crt", b"-----BEGIN CERTIFICATE-----\nnot base64\n")
            named = pki.path("external.crt")
        else:
            other = pki.leaf("other")
            pki.file("external.key", other.private_key_pem.bytes())
            named = pki.path("external.key")

        async def refused_logged() -> bool:
            return bool(
                registry.get_sample_value("pulsar_lookup_gateway_tls_reloads_total", failed)
            )

        await eventually(refused_logged, timeout=RELOAD_WAIT)
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1, errors
        assert "listener 'external'" in errors[0]
        assert "listener.external.tls" in errors[0] and named in errors[0]
        assert await sees(host, port, trust, "first")
        assert await sees(*address(gateway, "external", "pulsar+ssl"), trust, "first")
        # fixed files are picked up
        pki.pem(pki.leaf("fixed"), "external")
        await eventually(lambda: sees(host, port, trust, "fixed"), timeout=RELOAD_WAIT)
        assert registry.get_sample_value("pulsar_lookup_gateway_tls_reloads_total", failed) == 1


def connect_blocking(
    host: str, port: int, context: ssl.SSLContext, session: ssl.SSLSession | None = None
) -> tuple[bool, ssl.SSLSession | None, bool]:
    """CONNECT over a blocking TLS socket, offering `session` for resumption:
    (got CONNECTED, the session to resume later, whether this one was resumed)."""
    with socket.create_connection((host, port), timeout=WAIT) as raw:
        try:
            tls = context.wrap_socket(raw, server_hostname=host, session=session)
        except (ssl.SSLError, OSError):
            return False, None, False
        with tls:
            decoder = FrameDecoder()
            try:
                tls.sendall(codec.connect("blocking", 21))
                while (command := decoder.next_command()) is None:
                    data = tls.recv(65536)
                    if not data:
                        break
                    decoder.feed(data)
            except (ssl.SSLError, OSError):
                command = None
            connected = isinstance(command, BaseCommand) and command.type == BaseCommand.CONNECTED
            return connected, tls.session, bool(tls.session_reused)


@pytest.mark.parametrize(
    "version", [ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_2], ids=["TLSv1.3", "TLSv1.2"]
)
async def test_a_rotated_trust_file_changes_who_may_connect(
    pki: Pki, metadata: str, version: ssl.TLSVersion
) -> None:
    pki.pem(pki.leaf("gw"), "internal")
    pki.pem(pki.leaf("gw"), "external")
    trust_file = pki.file("clients-ca.pem", pki.ca.cert_pem.bytes())
    text = per_listener_text(pki) + (
        f"tlsTrustCertsFilePath={trust_file}\ntlsRequireTrustedClientCertOnConnect=true\n"
    )
    first = client_context(pki.ca_file, cert=pki.ca.issue_cert("a@example.com"), version=version)
    second = client_context(pki.ca_file, cert=pki.other_ca.issue_cert("b@example.com"))
    async with running(config_of(metadata, text)) as gateway:
        host, port = address(gateway, "internal", "pulsar+ssl")
        connected, session, _ = await asyncio.to_thread(connect_blocking, host, port, first)
        assert connected
        assert session is not None
        assert await refused(host, port, second) is not None
        pki.file("clients-ca.pem", pki.other_ca.cert_pem.bytes())

        async def swapped() -> bool:
            return await refused(host, port, second) is None

        await eventually(swapped, timeout=RELOAD_WAIT)
        assert await refused(host, port, first) is not None
        # nor can the client get in by resuming the session it had before the rotation
        connected, _, resumed = await asyncio.to_thread(
            connect_blocking, host, port, first, session
        )
        assert (connected, resumed) == (False, False)


# --- start-up errors ---------------------------------------------------------------------------


async def start_error(config: GatewayConfig) -> str:
    gateway = Gateway(config)
    with pytest.raises(TlsConfigError) as caught:
        await gateway.start()
    assert gateway.servers == []  # nothing was left listening
    await gateway.stop()
    return str(caught.value)


async def test_start_up_errors_name_the_setting_and_file(pki: Pki, metadata: str) -> None:
    pki.pem(pki.leaf("internal-gateway"), "internal", password="right")
    pki.pem(pki.leaf("external-gateway"), "external")
    base = per_listener_text(pki)

    missing = base.replace(pki.path("external.key"), pki.path("missing.key"))
    message = await start_error(config_of(metadata, missing))
    assert "listener 'external'" in message
    assert f"listener.external.tlsKeyFilePath {pki.path('missing.key')}: cannot read" in message

    message = await start_error(config_of(metadata, base + "tlsKeyPassword=wrong\n"))
    assert f"tlsKeyFilePath {pki.path('internal.key')}" in message
    assert "wrong password (tlsKeyPassword)" in message

    message = await start_error(config_of(metadata, base))  # no password for an encrypted key
    assert "encrypted and tlsKeyPassword is not set" in message

    pki.pem(pki.leaf("internal-gateway"), "internal")
    pki.file("external.key", pki.leaf("someone-else").private_key_pem.bytes())
    message = await start_error(config_of(metadata, base))
    assert "does not match the certificate" in message
    assert pki.path("external.key") in message and pki.path("external.crt") in message

    keystore = pki.p12(pki.leaf("p12"), "gw.p12", "right")
    pkcs = base + (
        "listener.external.tlsKeyStoreType=PKCS12\n"
        f"listener.external.tlsKeyStore={keystore}\n"
        "listener.external.tlsKeyStorePassword=wrong\n"
    )
    message = await start_error(config_of(metadata, pkcs))
    assert f"listener.external.tlsKeyStore {keystore}" in message
    assert "wrong password (listener.external.tlsKeyStorePassword)" in message

    message = await start_error(
        config_of(metadata, base + "tlsRequireTrustedClientCertOnConnect=true\n")
    )
    assert "tlsRequireTrustedClientCertOnConnect=true needs tlsTrustCertsFilePath" in message


def test_run_with_an_unreadable_certificate_exits_1_naming_it(pki: Pki, metadata: str) -> None:
    pki.pem(pki.leaf("gw"), "internal")
    pki.pem(pki.leaf("gw"), "external")
    conf = pki.dir / "g.conf"
    text = per_listener_text(pki).replace(pki.path("external.crt"), pki.path("nope.crt"))
    conf.write_text(f"metadataStoreUrl={metadata}\n{text}")
    result = subprocess.run(
        [EXE, "run", "--config", str(conf)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1, result.stderr
    assert "cannot start:" in result.stderr
    assert f"listener.external.tlsCertificateFilePath {pki.path('nope.crt')}" in result.stderr


# --- the expiry metric -------------------------------------------------------------------------


async def test_certificate_expiry_is_a_metric_on_the_metrics_page(pki: Pki, metadata: str) -> None:
    internal_expiry = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    external_expiry = datetime.now(UTC).replace(microsecond=0) + timedelta(days=3)
    pki.pem(pki.leaf("internal-gateway", not_after=internal_expiry), "internal")
    pki.pem(pki.leaf("external-gateway", not_after=external_expiry), "external")
    trust = client_context(pki.ca_file)
    async with running(config_of(metadata, per_listener_text(pki))) as gateway:
        assert expiry(gateway, "internal") == internal_expiry.timestamp()
        assert expiry(gateway, "external") == external_expiry.timestamp()
        host, port = address(gateway, "internal", "https")
        status, page = await https_get(f"https://{host}:{port}/metrics", trust)
        assert status == 200
        published = {
            sample.labels["listener"]: sample.value
            for family in text_string_to_metric_families(page)
            for sample in family.samples
            if sample.name == EXPIRY
        }
        assert published == {
            "internal": internal_expiry.timestamp(),
            "external": external_expiry.timestamp(),
        }


# --- standalone's TLS sockets ------------------------------------------------------------------


async def test_standalone_tls_env_serves_development_certificates(
    tmp_path: Path, metadata: str
) -> None:
    env = standalone_tls_env(tmp_path / "dev-certs")
    values = {key.removeprefix("PULSAR_GATEWAY_"): value for key, value in env.items()}
    text = LISTENERS + "".join(f"{key}={value}\n" for key, value in values.items())
    trust = client_context(Path(values["tlsTrustCertsFilePath"]))
    async with running(config_of(metadata, text)) as gateway:
        for listener in ("internal", "external"):
            for scheme in ("pulsar+ssl", "https"):
                host, port = address(gateway, listener, scheme)
                name, _ = await served_certificate(host, port, trust)
                assert name == "127.0.0.1"  # the development server certificate
        # its SANs also cover localhost
        context = client_context(Path(values["tlsTrustCertsFilePath"]))
        _, port = address(gateway, "internal", "https")
        _, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost"),
            WAIT,
        )
        await close(writer)
