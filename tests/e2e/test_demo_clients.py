"""What `standalone` tells a newcomer about the demo's clients holds for the real `pulsar-client`:
the gateway answers the lookup, and the producer then fails at the fictional broker, with
pulsar.Timeout on the internal listener (10.0.0.x, retried until the operation timeout) and
pulsar.ConnectError on the external one (names that do not resolve)."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pulsar
import pytest

from pulsar_lookup_gateway.gateway.process import Gateway
from pulsar_lookup_gateway.gateway.standalone import DEMO_CLIENTS, tls_client_lines
from pulsar_lookup_gateway.listeners.config.conf_file import parse_properties
from pulsar_lookup_gateway.listeners.config.model import validate_raw
from pulsar_lookup_gateway.metadata_store.snapshot import read_snapshot
from pulsar_lookup_gateway.tls.devcerts import write_dev_certs
from tests.e2e.clients import QUIET, in_thread, produce
from tests.neighbours import binary_lookup
from tests.processes import DEMO

pytestmark = pytest.mark.e2e

TOPIC = "persistent://public/default/orders-partition-1"  # owned by broker-1 in the demo
OPERATION_TIMEOUT = 3  # seconds: the client gives up on the fictional internal broker then


@pytest.fixture
async def demo() -> AsyncIterator[Gateway]:
    """The demo cluster's snapshot behind the listeners of configs/standalone.conf."""
    raw = parse_properties(
        f"metadataStoreUrl=file:{DEMO}\n"
        "advertisedListeners=internal:pulsar://127.0.0.1:6650,external:pulsar://127.0.0.2:6650\n"
        "bindAddresses=internal:pulsar://127.0.0.1:0,external:pulsar://127.0.0.2:0\n"
        "brokerServicePort=\nwebServicePort=\n",
        "demo.conf",
    )
    gateway = Gateway(validate_raw(raw).config)
    await gateway.start()
    try:
        yield gateway
    finally:
        await gateway.stop()


def answered(gateway: Gateway, listener: str) -> float:
    labels = {"listener": listener, "chosen_by": "socket", "protocol": "binary"}
    registry = gateway.service.metrics.registry
    return registry.get_sample_value("pulsar_broker_lookup_answers_total", labels) or 0.0


@pytest.mark.parametrize(
    ("listener", "host", "error"),
    [("internal", "127.0.0.1", pulsar.Timeout), ("external", "127.0.0.2", pulsar.ConnectError)],
)
async def test_a_demo_producer_fails_at_the_fictional_broker_as_the_banner_says(
    demo: Gateway, listener: str, host: str, error: type[Exception]
) -> None:
    url = f"pulsar://{host}:{demo.port_of(listener, 'pulsar')}"
    with pytest.raises(error):
        await in_thread(produce, url, TOPIC, timeout=OPERATION_TIMEOUT)
    assert answered(demo, listener) >= 1  # the lookup itself was answered
    banner = " ".join(DEMO_CLIENTS)
    assert f"pulsar.{error.__name__}" in banner and "pip install pulsar-client" in banner


def _tls_produce(url: str, ca: Path) -> None:
    client = pulsar.Client(
        url,
        tls_trust_certs_file_path=str(ca),
        operation_timeout_seconds=OPERATION_TIMEOUT,
        connection_timeout_ms=3000,
        logger=QUIET,
    )
    try:
        client.create_producer(TOPIC)
    finally:
        client.close()


async def test_the_demo_tls_clients_fail_as_the_banner_says(tmp_path: Path) -> None:
    """configs/standalone.conf's TLS sockets on the demo snapshot: the one the banner gives as
    the example reaches the lookup and fails at the fictional broker's name; the other gets
    brokerServiceUrlTls '' (the client logs "Invalid Url"), as the banner explains."""
    certs = write_dev_certs(tmp_path / "certs")
    raw = parse_properties(
        f"metadataStoreUrl=file:{DEMO}\n"
        "advertisedListeners=internal:pulsar+ssl://127.0.0.1:6651,"
        "external:pulsar+ssl://127.0.0.2:6651\n"
        "bindAddresses=internal:pulsar+ssl://127.0.0.1:0,external:pulsar+ssl://127.0.0.2:0\n"
        f"brokerServicePort=\nwebServicePort=\ntlsCertificateFilePath={certs.server_cert}\n"
        f"tlsKeyFilePath={certs.server_key}\n",
        "demo-tls.conf",
    )
    config = validate_raw(raw).config
    banner = tls_client_lines(config, certs.ca_cert, read_snapshot(DEMO))
    gateway = Gateway(config)
    await gateway.start()
    context = ssl.create_default_context(cafile=str(certs.ca_cert))
    try:
        for listener, host in (("external", "127.0.0.2"), ("internal", "127.0.0.1")):
            port = gateway.port_of(listener, "pulsar+ssl")
            answer, _ = await binary_lookup(host, port, TOPIC, ssl_context=context)
            tls_url = answer.lookupTopicResponse.brokerServiceUrlTls
            # The real client: a name that does not resolve, or an empty URL ("Invalid Url").
            with pytest.raises(pulsar.ConnectError):
                await in_thread(_tls_produce, f"pulsar+ssl://{host}:{port}", certs.ca_cert)
            example = f"pulsar+ssl://{host}:0" in banner[0]  # (the bind address)
            explained = [line for line in banner if f"(listener '{listener}') fails" in line]
            assert (bool(tls_url), example, bool(explained)) == (
                (True, True, False) if listener == "external" else (False, False, True)
            ), (listener, tls_url, banner)
    finally:
        await gateway.stop()
