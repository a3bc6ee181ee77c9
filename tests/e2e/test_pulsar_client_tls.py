"""The real `pulsar-client` wheel against the gateway's TLS sockets.

The gateway runs as a whole (``Gateway`` from a broker.conf-style config) with development
certificates from ``tls.devcerts``; the cluster snapshot advertises, for the ``external``
listener, only a ``pulsar+ssl://`` broker URL: a TLS broker TEST PEER (tests/broker_peer.py) on
127.0.0.2 with its own CA. The client verifies every certificate and host name it meets
(``tls_validate_hostname=True``), so reaching the peer means the gateway's TLS, its answer's TLS
URL and the peer's TLS all checked out. The client is synchronous: it runs in a thread, each
call bounded by its own operation timeout and by a wait_for.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import shutil
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulsar
import pytest
from cryptography import x509

from pulsar_lookup_gateway.gateway.process import Gateway
from pulsar_lookup_gateway.listeners.config.conf_file import parse_properties
from pulsar_lookup_gateway.listeners.config.model import validate_raw
from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
from pulsar_lookup_gateway.metadata_store.synthetic import FOUR_BUNDLES, cluster, topic_in_range
from pulsar_lookup_gateway.tls.devcerts import (
    DevCA,
    DevCerts,
    certificate_pem,
    key_pem,
    write_dev_certs,
)
from tests.broker_peer import BrokerPeer
from tests.e2e import clients
from tests.e2e.clients import in_thread
from tests.waiting import eventually

pytestmark = pytest.mark.e2e

TOPIC = topic_in_range(0x00000000, 0xFFFFFFFF)
OWNED = {f"{lower}_{upper}": 1 for lower, upper in itertools.pairwise(FOUR_BUNDLES)}
RELOAD_WAIT = 15.0


def bundle(path: Path, *certificate_files: Path) -> Path:
    path.write_bytes(b"".join(f.read_bytes() for f in certificate_files))
    return path


@dataclass
class Setup:
    """Gateway certificates (set `a`, later `b`), the peer's own CA, and trust bundles."""

    directory: Path
    a: DevCerts
    b: DevCerts
    peer: DevCerts
    gateway_cert: Path  # the files the gateway is configured with
    gateway_key: Path

    def trust(self, gateway: DevCerts) -> str:
        """A client trust file: `gateway`'s CA and the peer's CA."""
        name = "trust-a.pem" if gateway is self.a else "trust-b.pem"
        return str(bundle(self.directory / name, gateway.ca_cert, self.peer.ca_cert))

    def rotate_to(self, certs: DevCerts) -> None:
        for source, target in (
            (certs.server_key, self.gateway_key),
            (certs.server_cert, self.gateway_cert),
        ):
            scratch = target.with_suffix(".new")
            shutil.copyfile(source, scratch)
            scratch.replace(target)


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    a = write_dev_certs(tmp_path / "a")
    live = tmp_path / "live"
    live.mkdir()
    cert, key = live / "server.crt", live / "server.key"
    shutil.copyfile(a.server_cert, cert)
    shutil.copyfile(a.server_key, key)
    return Setup(
        tmp_path, a, write_dev_certs(tmp_path / "b"), write_dev_certs(tmp_path / "peer"), cert, key
    )


@dataclass
class World:
    gateway: Gateway
    peer: BrokerPeer

    def url(self, scheme: str) -> str:
        return f"{scheme}://127.0.0.1:{self.gateway.port_of('external', scheme)}"


@contextlib.asynccontextmanager
async def world(setup: Setup, tmp_path: Path, extra: str = "") -> AsyncIterator[World]:
    peer_ssl = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    peer_ssl.load_cert_chain(setup.peer.server_cert, setup.peer.server_key)
    async with BrokerPeer("127.0.0.2", name="tls-peer", ssl_context=peer_ssl) as peer:
        nodes = cluster(brokers=1, owned=OWNED)
        tls_only = {"external": {"brokerServiceUrlTls": peer.url}}
        nodes["/loadbalance/brokers/b1:8080"]["advertisedListeners"] = tls_only
        for name in OWNED:
            nodes[f"/namespace/public/default/{name}"]["advertisedListeners"] = tls_only
        snapshot = tmp_path / "cluster.json"
        write_snapshot(snapshot, nodes)
        text = (
            f"metadataStoreUrl=file:{snapshot}\n"
            "advertisedListeners=external:pulsar+ssl://127.0.0.1:6651,"
            "external:https://127.0.0.1:8443\n"
            "bindAddresses=external:pulsar+ssl://127.0.0.1:0,external:https://127.0.0.1:0\n"
            "brokerServicePort=\nwebServicePort=\n"
            f"tlsCertificateFilePath={setup.gateway_cert}\n"
            f"tlsKeyFilePath={setup.gateway_key}\n"
            "tlsCertRefreshCheckDurationSec=1\n"
            f"{extra}"
        )
        gateway = Gateway(validate_raw(parse_properties(text, "e2e-tls.conf")).config)
        await gateway.start()
        try:
            yield World(gateway, peer)
        finally:
            await gateway.stop()


def produce(url: str, trust: str, timeout: int = 10, **options: Any) -> str:
    """A producer through a TLS URL, trusting `trust`, with host names verified."""
    options.setdefault("tls_validate_hostname", True)
    return clients.produce(url, TOPIC, timeout=timeout, tls_trust_certs_file_path=trust, **options)


def lookups(gateway: Gateway, protocol: str) -> float:
    value = gateway.service.metrics.registry.get_sample_value(
        "pulsar_broker_lookup_answers_total",
        {"listener": "external", "chosen_by": "socket", "protocol": protocol},
    )
    return value or 0.0


@pytest.mark.parametrize(("scheme", "protocol"), [("pulsar+ssl", "binary"), ("https", "http")])
async def test_the_client_gets_the_listeners_tls_broker_url(
    setup: Setup, tmp_path: Path, scheme: str, protocol: str
) -> None:
    async with world(setup, tmp_path) as w:
        assert await in_thread(produce, w.url(scheme), setup.trust(setup.a)) == TOPIC
        assert TOPIC in w.peer.producer_topics()
        assert lookups(w.gateway, protocol) >= 1


async def test_the_client_refuses_a_gateway_it_does_not_trust(setup: Setup, tmp_path: Path) -> None:
    """The checks above can fail: the same client trusting another CA gets nowhere."""
    async with world(setup, tmp_path) as w:
        with pytest.raises(pulsar.PulsarException):
            await in_thread(produce, w.url("pulsar+ssl"), setup.trust(setup.b), timeout=3)
        assert w.peer.producer_topics() == []
        assert lookups(w.gateway, "binary") == 0


@pytest.mark.parametrize("scheme", ["pulsar+ssl", "https"])
async def test_mtls_accepts_a_trusted_client_certificate_only(
    setup: Setup, tmp_path: Path, scheme: str
) -> None:
    extra = f"tlsTrustCertsFilePath={setup.a.ca_cert}\ntlsRequireTrustedClientCertOnConnect=true\n"
    async with world(setup, tmp_path, extra) as w:
        trust = setup.trust(setup.a)
        with pytest.raises(pulsar.PulsarException):
            await in_thread(produce, w.url(scheme), trust, timeout=3)
        assert w.peer.producer_topics() == []
        assert lookups(w.gateway, "binary") + lookups(w.gateway, "http") == 0
        # a client certificate from another CA is refused as well
        stranger = pulsar.AuthenticationTLS(str(setup.b.client_cert), str(setup.b.client_key))
        with pytest.raises(pulsar.PulsarException):
            await in_thread(produce, w.url(scheme), trust, timeout=3, authentication=stranger)
        assert w.peer.producer_topics() == []
        auth = pulsar.AuthenticationTLS(str(setup.a.client_cert), str(setup.a.client_key))
        assert await in_thread(produce, w.url(scheme), trust, authentication=auth) == TOPIC
        assert TOPIC in w.peer.producer_topics()


async def served_by(port: int, ca: Path) -> bool:
    """Whether the gateway's port now presents a certificate from `ca`."""
    context = ssl.create_default_context(cafile=str(ca))
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=context), 10
        )
    except (ssl.SSLError, OSError):
        return False
    writer.close()
    return True


async def test_a_rotated_certificate_reaches_new_client_connections(
    setup: Setup, tmp_path: Path
) -> None:
    async with world(setup, tmp_path) as w:
        url = w.url("pulsar+ssl")
        assert await in_thread(produce, url, setup.trust(setup.a)) == TOPIC
        setup.rotate_to(setup.b)
        port = w.gateway.port_of("external", "pulsar+ssl")
        await eventually(lambda: served_by(port, setup.b.ca_cert), timeout=RELOAD_WAIT)
        before = len(w.peer.producer_topics())
        assert await in_thread(produce, url, setup.trust(setup.b)) == TOPIC
        assert len(w.peer.producer_topics()) == before + 1
        with pytest.raises(pulsar.PulsarException):  # the old certificate is gone
            await in_thread(produce, url, setup.trust(setup.a), timeout=3)
        served = x509.load_pem_x509_certificate(setup.gateway_cert.read_bytes())
        assert (
            w.gateway.service.metrics.registry.get_sample_value(
                "pulsar_lookup_gateway_tls_certificate_expiry_seconds", {"listener": "external"}
            )
            == served.not_valid_after_utc.timestamp()
        )


async def test_host_names_are_verified(setup: Setup, tmp_path: Path) -> None:
    """A gateway certificate from the trusted CA but for another host name is refused."""
    ca = DevCA.load(setup.a.ca_cert, setup.a.directory / "ca.key")
    key, cert = ca.issue("gw.example.com", ["gw.example.com"])
    setup.gateway_key.write_bytes(key_pem(key))
    setup.gateway_cert.write_bytes(certificate_pem(cert))
    async with world(setup, tmp_path) as w:
        with pytest.raises(pulsar.PulsarException):
            await in_thread(produce, w.url("pulsar+ssl"), setup.trust(setup.a), timeout=3)
        assert lookups(w.gateway, "binary") == 0
        # the same certificate passes without host name verification
        client_options = {"tls_validate_hostname": False}
        assert (
            await in_thread(produce, w.url("pulsar+ssl"), setup.trust(setup.a), **client_options)
            == TOPIC
        )
