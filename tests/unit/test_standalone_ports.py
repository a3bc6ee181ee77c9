"""`standalone --port-offset N`: every port of the demo config moves by N, port 0 stays 0."""

from __future__ import annotations

import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pulsar_lookup_gateway.gateway.standalone import PortOffsetError, shift_ports
from pulsar_lookup_gateway.listeners.config.model import GatewayConfig, load_config
from tests.processes import EXE, ROOT

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


def test_the_command_refuses_a_bad_offset_before_starting_anything() -> None:
    result = subprocess.run(
        [EXE, "standalone", "--port-offset", "60000"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "--port-offset 60000: would move port" in result.stderr
    assert "ZooKeeper at" not in result.stdout


@pytest.fixture
def occupied() -> Iterator[int]:
    """A loopback port another server (this test) listens on, low enough that every port of
    the demo config moved by the same offset stays below 65536."""
    for _ in range(20):
        with socket.create_server(("127.0.0.1", 0)) as sock:
            port = int(sock.getsockname()[1])
            if port + (8443 - 6650) <= 65535:
                yield port
                return
    pytest.fail("no free loopback port low enough")


def test_run_names_the_entry_whose_port_is_in_use(tmp_path: Path, occupied: int) -> None:
    conf = tmp_path / "g.conf"
    entry = f"internal:pulsar://127.0.0.1:{occupied}"
    conf.write_text(
        f"metadataStoreUrl=file:{ROOT / 'configs' / 'demo-cluster.json'}\n"
        "advertisedListeners=internal:pulsar://127.0.0.1:6650\n"
        f"bindAddresses=internal:http://127.0.0.1:0,{entry}\n"
        "brokerServicePort=\nwebServicePort=\n"
    )
    result = subprocess.run(
        [EXE, "run", "--config", str(conf)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1, result.stderr
    assert (
        f"cannot start: bindAddresses: entry '{entry}': cannot bind 127.0.0.1:{occupied}: "
        "Address already in use"
    ) in result.stderr
    assert "Errno" not in result.stderr


def test_standalone_names_the_taken_port_and_a_free_offset_before_starting(
    occupied: int,
) -> None:
    """A local Pulsar on the demo's ports: standalone says which socket, and which
    --port-offset would do, before it starts ZooKeeper or prints its banner."""
    offset = occupied - 6650  # the demo's 127.0.0.1:6650 lands on the taken port
    result = subprocess.run(
        [EXE, "standalone", "--port-offset", str(offset)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert (
        f"bindAddresses: entry 'internal:pulsar://127.0.0.1:{occupied}': cannot bind "
        f"127.0.0.1:{occupied}: Address already in use"
    ) in result.stderr
    hint = re.search(r"standalone --port-offset (\d+)` \(free now\)", result.stderr)
    assert hint is not None, result.stderr
    assert int(hint[1]) != offset
    assert "ZooKeeper at" not in result.stdout
