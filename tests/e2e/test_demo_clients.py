"""What `standalone` tells a newcomer about the demo's clients holds for the real `pulsar-client`:
the gateway answers the lookup, and the producer then fails at the fictional broker, with
pulsar.Timeout on the internal listener (10.0.0.x, retried until the operation timeout) and
pulsar.ConnectError on the external one (names that do not resolve)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pulsar
import pytest

from pulsar_lookup_gateway.gateway.process import Gateway
from pulsar_lookup_gateway.gateway.standalone import DEMO_CLIENTS
from pulsar_lookup_gateway.listeners.config.conf_file import parse_properties
from pulsar_lookup_gateway.listeners.config.model import validate_raw
from tests.e2e.clients import in_thread, produce
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
