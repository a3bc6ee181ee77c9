"""The gateway as a user runs it: `run` and `standalone` as processes, signals, exit codes."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import free_port
from tests.processes import DEMO, EXE, Running, write_config

TOPIC = "persistent/public/default/orders-partition-1"


def test_run_serves_each_listener_and_stops_on_sigterm(tmp_path: Path) -> None:
    conf = write_config(tmp_path / "g.conf", f"file:{DEMO}")
    gateway = Running("run", "--config", str(conf))
    try:
        internal = gateway.get("internal", f"/lookup/v2/topic/{TOPIC}")
        external = gateway.get("external", f"/lookup/v2/topic/{TOPIC}")
        assert internal["brokerUrl"] == "pulsar://10.0.0.1:6650"
        assert external["brokerUrl"] == "pulsar://broker-1.pulsar.example.com:6650"
        table = gateway.get("internal", "/admin/v2/gateway/listeners")
        assert {row["listener"] for row in table} == {"internal", "external"}
    finally:
        code = gateway.stop()
    assert code == 0, "".join(gateway.lines)
    assert "finishing lookups in flight" in "".join(gateway.lines)


def test_run_stops_on_sigint_too(tmp_path: Path) -> None:
    gateway = Running("run", "--config", str(write_config(tmp_path / "g.conf", f"file:{DEMO}")))
    assert gateway.stop(signal.SIGINT) == 0


def test_run_refuses_a_bad_config_with_exit_2(tmp_path: Path) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text("metadataStoreUrl=file:/x\nbindAddresses=nope:pulsar://127.0.0.1:0\n")
    result = subprocess.run(
        [EXE, "run", "--config", str(conf)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "listener 'nope' is not declared" in result.stderr


def test_run_refuses_a_config_that_would_listen_nowhere(tmp_path: Path) -> None:
    conf = tmp_path / "typo.conf"
    conf.write_text(
        f"metadataStoreUrl=file:{DEMO}\nadvertisedListeners=internal:pulsar://127.0.0.1:6650\n"
        "bindAdresses=internal:pulsar://127.0.0.1:0\nbrokerServicePort=\nwebServicePort=\n"
    )
    result = subprocess.run(
        [EXE, "run", "--config", str(conf)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2, result.stderr
    assert "bindAddresses: no socket would open" in result.stderr
    assert "did you mean 'bindAddresses'?" in result.stderr
    assert "listening on" not in result.stderr


def test_run_refuses_what_check_config_calls_an_error(tmp_path: Path) -> None:
    """A key one edit from a gateway key: the sockets would open (untagged, on the defaults),
    so only the one set of rules check-config uses stops it."""
    conf = tmp_path / "typo.conf"
    conf.write_text(
        f"metadataStoreUrl=file:{DEMO}\nadvertisedListener=internal:pulsar://127.0.0.1:6650\n"
        f"brokerServicePort={free_port()}\nwebServicePort=\n"
    )
    check = subprocess.run(
        [EXE, "check-config", "--config", str(conf), "--no-host-checks"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    result = subprocess.run(
        [EXE, "run", "--config", str(conf)], capture_output=True, text=True, timeout=60
    )
    assert (check.returncode, result.returncode) == (2, 2), result.stderr
    for err in (check.stderr, result.stderr):
        assert "did you mean 'advertisedListeners'?" in err
    assert "listening on" not in result.stderr


def test_run_strict_refuses_what_check_config_strict_refuses_with_its_report(
    tmp_path: Path,
) -> None:
    """A broker.conf key the gateway does not use: a warning, and the gateway serves; under
    --strict an error, and run exits 2 before listening, with check-config --strict's report."""
    conf = write_config(tmp_path / "g.conf", f"file:{DEMO}")
    conf.write_text(conf.read_text() + "managedLedgerDefaultEnsembleSize=2\n")
    lenient = Running("run", "--config", str(conf))
    assert lenient.stop() == 0
    assert "warning: managedLedgerDefaultEnsembleSize" in "".join(lenient.lines)
    check = subprocess.run(
        [EXE, "check-config", "--config", str(conf), "--strict"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    result = subprocess.run(
        [EXE, "run", "--config", str(conf), "--strict"], capture_output=True, text=True, timeout=60
    )
    assert (check.returncode, result.returncode) == (2, 2), result.stderr
    unused = f"managedLedgerDefaultEnsembleSize ({conf}:6): not a key the gateway uses"
    assert unused in result.stderr
    assert result.stderr == check.stderr
    assert "listening on" not in result.stdout + result.stderr


def test_run_with_a_missing_snapshot_exits_1(tmp_path: Path) -> None:
    conf = write_config(tmp_path / "g.conf", f"file:{tmp_path / 'missing.json'}")
    result = subprocess.run(
        [EXE, "run", "--config", str(conf)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert "cannot read snapshot" in result.stderr


@pytest.mark.zookeeper
def test_standalone_starts_zookeeper_seeds_the_demo_and_cleans_up(tmp_path: Path) -> None:
    conf = write_config(tmp_path / "s.conf", "zk:127.0.0.1:2181")  # standalone replaces it
    zk_port = free_port()
    gateway = Running("standalone", "--config", str(conf), "--zookeeper-port", str(zk_port))
    try:
        banner = "".join(gateway.lines)
        assert f"ZooKeeper at 127.0.0.1:{zk_port}" in banner
        external = gateway.get("external", f"/lookup/v2/topic/{TOPIC}")
        assert external["brokerUrlTls"] == "pulsar+ssl://broker-1.pulsar.example.com:6651"
        assert gateway.get("internal", "/ready")["ready"] is True
    finally:
        code = gateway.stop()
    assert code == 0, "".join(gateway.lines)
    with pytest.raises(OSError):  # the embedded ZooKeeper is gone with the gateway
        import socket

        socket.create_connection(("127.0.0.1", zk_port), timeout=2).close()


def test_run_requires_tokens_on_the_listener_that_asks_for_them(tmp_path: Path) -> None:
    import base64
    import urllib.error

    import jwt

    secret = b"a-test-secret-of-at-least-32-bytes!!"
    conf = write_config(tmp_path / "auth.conf", f"file:{DEMO}")
    conf.write_text(
        conf.read_text()
        + "authenticationEnabled=true\n"
        + "authenticationProviders=token\n"
        + f"tokenSecretKey=data:;base64,{base64.b64encode(secret).decode()}\n"
        + "listener.internal.authenticationRequired=false\n"
    )
    gateway = Running("run", "--config", str(conf))
    try:
        assert gateway.get("internal", f"/lookup/v2/topic/{TOPIC}")["brokerUrl"]  # no token
        with pytest.raises(urllib.error.HTTPError) as refused:
            gateway.get("external", f"/lookup/v2/topic/{TOPIC}")
        assert refused.value.code == 401
        token = jwt.encode({"sub": "app"}, secret, algorithm="HS256")
        request = urllib.request.Request(
            gateway.urls[("http", "external")] + f"/lookup/v2/topic/{TOPIC}",
            headers={"Authorization": f"Bearer {token}"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            answer = json.loads(response.read())
        assert answer["brokerUrl"] == "pulsar://broker-1.pulsar.example.com:6650"
    finally:
        assert gateway.stop() == 0
