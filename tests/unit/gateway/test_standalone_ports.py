"""`standalone --port-offset N`: every port of the demo config moves by N, port 0 stays 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from pulsar_lookup_gateway.gateway.port_offset import PortOffsetError, shift_ports
from pulsar_lookup_gateway.listeners.config.model import GatewayConfig, load_config
from tests.processes import ROOT

STANDALONE = ROOT / "configs" / "standalone.conf"


def ports(config: GatewayConfig) -> list[int]:
    found = [b.endpoint.port for b in config.bind_addresses]
    found += [e.port for listener in config.advertised_listeners for e in listener.endpoints]
    found += [config.broker_service_port or 0, config.web_service_port or 0]
    return found


def demo() -> GatewayConfig:
    return load_config(STANDALONE, {}).config


def test_every_port_moves_by_the_offset() -> None:
    config = demo()
    moved = shift_ports(config, 10000)
    assert ports(moved) == [p + 10000 if p else 0 for p in ports(config)]
    assert {s.endpoint.port for s in moved.sockets()} == {16650, 16651, 18080, 18443}
    # the listeners still answer with their own moved addresses
    external = {lst.name: lst for lst in moved.advertised_listeners}["external"]
    assert "pulsar://127.0.0.2:16650" in [e.url for e in external.endpoints]


def test_port_zero_stays_zero(tmp_path: Path) -> None:
    conf = tmp_path / "g.conf"
    conf.write_text(
        "metadataStoreUrl=file:/x\nadvertisedListeners=a:pulsar://127.0.0.1:6650\n"
        "bindAddresses=a:pulsar://127.0.0.1:0,a:http://127.0.0.1:8080\n"
        "brokerServicePort=\nwebServicePort=\n"
    )
    moved = shift_ports(load_config(conf, {}).config, 5)
    assert sorted(b.endpoint.port for b in moved.bind_addresses) == [0, 8085]


@pytest.mark.parametrize("offset", [60000, -7000])
def test_an_offset_leaving_the_port_range_names_the_port(offset: int) -> None:
    with pytest.raises(PortOffsetError, match=r"would move port \d+ .* this config takes offsets"):
        shift_ports(demo(), offset)
