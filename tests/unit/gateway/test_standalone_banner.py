"""What `standalone` prints about TLS clients of the demo, from the config and the snapshot:
the example names a TLS socket whose listener the brokers advertise a TLS URL on, and every
TLS socket whose listener they do not is explained where it is printed."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from pulsar_lookup_gateway.gateway.cli import main
from pulsar_lookup_gateway.gateway.port_offset import shift_ports
from pulsar_lookup_gateway.gateway.standalone import (
    _standalone_banner,
    tls_client_lines,
    tls_listeners_of_brokers,
)
from pulsar_lookup_gateway.listeners.config.model import load_config
from pulsar_lookup_gateway.metadata_store.snapshot import read_snapshot

CONFIGS = Path(__file__).resolve().parents[3] / "configs"
CA = Path("/certs/ca.crt")


def test_the_demo_brokers_advertise_tls_on_the_external_listener_only() -> None:
    assert tls_listeners_of_brokers(read_snapshot(CONFIGS / "demo-cluster.json")) == {"external"}


def test_the_tls_example_is_a_socket_that_works_and_the_other_is_explained() -> None:
    config = load_config(CONFIGS / "standalone.conf", {}).config
    lines = tls_client_lines(config, CA, read_snapshot(CONFIGS / "demo-cluster.json"))
    assert "pulsar.Client('pulsar+ssl://127.0.0.2:6651'" in lines[0]
    assert "# listener 'external'" in lines[0]
    explained = " ".join(lines[1:])
    assert "TLS on pulsar+ssl://127.0.0.1:6651 (listener 'internal') fails" in explained
    assert "brokerServiceUrlTls ''" in explained and '"Invalid Url, unable to parse"' in explained
    assert "pulsar.ConnectError" in explained


def test_nothing_is_explained_where_every_listener_has_a_tls_url() -> None:
    config = load_config(CONFIGS / "standalone.conf", {}).config
    nodes = copy.deepcopy(read_snapshot(CONFIGS / "demo-cluster.json"))
    for path, data in nodes.items():
        if path.startswith("/loadbalance/brokers/"):
            data["advertisedListeners"]["internal"]["brokerServiceUrlTls"] = "pulsar+ssl://x:6651"
    lines = tls_client_lines(config, CA, nodes)
    assert len(lines) == 1 and "pulsar+ssl://127.0.0.1:6651" in lines[0]  # the first TLS socket


def test_the_banners_explain_line_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """The `explain` line of the banner, with the demo's snapshot as a file in place of its
    ZooKeeper: it names a socket of the config, and explains a Connect answer."""
    config = load_config(CONFIGS / "standalone.conf", {}).config
    nodes = read_snapshot(CONFIGS / "demo-cluster.json")
    banner = _standalone_banner(
        config, "127.0.0.1:2181", CONFIGS / "demo-cluster.json", CA.parent, nodes,
        CONFIGS / "standalone.conf",
    )  # fmt: skip
    [line] = [line for line in banner.splitlines() if " explain " in line]
    argv = line.split("#")[0].split()[1:]  # (after the command)
    argv[argv.index("--metadata") + 1] = f"file:{CONFIGS / 'demo-cluster.json'}"
    assert main([*argv, "--json"]) == 0
    explained = json.loads(capsys.readouterr().out)
    assert explained["socket"]["listener"] == "external"
    assert explained["answer"]["brokerServiceUrlTls"].startswith("pulsar+ssl://broker-1")


def test_the_banners_explain_line_names_the_shifted_ports(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Under `standalone --port-offset 10000` the explain line explains the socket standalone
    serves (pulsar+ssl://127.0.0.2:16651), not the config file's (6651)."""
    config = shift_ports(load_config(CONFIGS / "standalone.conf", {}).config, 10000)
    nodes = read_snapshot(CONFIGS / "demo-cluster.json")
    banner = _standalone_banner(
        config, "127.0.0.1:2181", CONFIGS / "demo-cluster.json", CA.parent, nodes,
        CONFIGS / "standalone.conf", port_offset=10000,
    )  # fmt: skip
    [line] = [line for line in banner.splitlines() if " explain " in line]
    argv = line.split("#")[0].split()[1:]
    argv[argv.index("--metadata") + 1] = f"file:{CONFIGS / 'demo-cluster.json'}"
    assert main([*argv, "--json"]) == 0
    explained = json.loads(capsys.readouterr().out)
    assert explained["socket"]["url"] == "pulsar+ssl://127.0.0.2:16651"
    assert main([*argv, "--socket", "pulsar+ssl://127.0.0.2:16651"]) == 0  # its URL names it
    assert "socket    pulsar+ssl://127.0.0.2:16651 (listener external)" in capsys.readouterr().out


def test_explain_refuses_an_offset_that_moves_a_port_out_of_range(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["explain", "t", "--config", str(CONFIGS / "standalone.conf"), "--port-offset", "60000"]
    assert main(argv) == 2
    assert "--port-offset 60000: would move port" in capsys.readouterr().err
