"""`seed`, `dump` and `lookup --metadata zk:` against a real ZooKeeper."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from pulsar_lookup_gateway.gateway.cli import main
from pulsar_lookup_gateway.metadata_store.admin import connected, dump
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper, free_port
from pulsar_lookup_gateway.metadata_store.snapshot import read_snapshot
from tests.processes import DEMO, EXE

pytestmark = pytest.mark.zookeeper


def test_seed_then_dump_round_trips_the_demo_cluster(
    zookeeper: EmbeddedZooKeeper, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"zk:{zookeeper.connect_string}/seeded-{tmp_path.name}"
    assert main(["seed", "--metadata", url, "--snapshot", str(DEMO)]) == 0
    out = tmp_path / "dump.json"
    assert main(["dump", "--metadata", url, "--out", str(out)]) == 0
    assert read_snapshot(out) == read_snapshot(DEMO)
    assert "wrote 19 znodes" in capsys.readouterr().out


def test_lookup_reads_zookeeper(
    zookeeper: EmbeddedZooKeeper, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"zk:{zookeeper.connect_string}/lookup-{tmp_path.name}"
    assert main(["seed", "--metadata", url, "--snapshot", str(DEMO)]) == 0
    capsys.readouterr()
    assert main(["lookup", "orders-partition-3", "--listener", "external", "--metadata", url]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert (answer["response"], answer["authoritative"]) == ("redirect", False)
    assert answer["brokerServiceUrl"] == "pulsar://broker-1.pulsar.example.com:6650"
    assert main(["lookup", "acme/payments/settlements", "--metadata", url]) == 0
    assert json.loads(capsys.readouterr().out)["partitions"] == 3


def test_seed_and_dump_refuse_file_urls(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dump", "--metadata", f"file:{DEMO}", "--out", str(tmp_path / "x")]) == 2
    assert "need a zk: URL" in capsys.readouterr().err


COMMANDS = [
    ["seed", "--snapshot", str(DEMO)],
    ["dump", "--out", "dump.json"],
    ["lookup", "orders-partition-1"],
    ["resolve-zones", "--topics", "topics.txt", "--zones", "zones.csv", "--out", "out"],
]


@pytest.mark.slow
def test_an_unreachable_zookeeper_fails_soon_with_one_line(tmp_path: Path) -> None:
    """Every command that reads or writes ZooKeeper (run side by side: each waits out its
    connect deadline)."""
    port = free_port()  # nobody listens there
    runs = []
    for command in COMMANDS:
        work = tmp_path / command[0]
        work.mkdir()
        (work / "topics.txt").write_text("persistent://public/default/t\n")
        (work / "zones.csv").write_text("dc,internal\n")
        process = subprocess.Popen(
            [EXE, *command, "--metadata", f"zk:127.0.0.1:{port}/pulsar"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=work,
        )
        runs.append((command[0], work, process))
    for name, work, process in runs:
        stdout, stderr = process.communicate(timeout=60)
        print(f"{name}: {stderr.strip()}")
        assert process.returncode == 1, name
        assert len(stderr.splitlines()) == 1, stderr
        assert f"127.0.0.1:{port}" in stderr
        assert "Traceback" not in stderr
        assert stdout == ""
        assert not (work / "dump.json").exists()
        # the promise is "a few seconds" (the 5 s connect deadline), not kazoo's 15 s and more:
        # said by the line itself, since a loaded machine may take longer to start the commands
        assert re.search(r"(within|after) 5 s$", stderr.strip()), stderr


def test_dump_keeps_persistent_topics_without_their_ledgers(
    zookeeper: EmbeddedZooKeeper, tmp_path: Path
) -> None:
    chroot = f"/ledgers-{tmp_path.name}"
    ledgers = f"{chroot}/managed-ledgers/acme/orders"
    with connected(zookeeper.connect_string) as admin:
        # a managed ledger holds BookKeeper's binary metadata and has cursors below it
        admin.create(f"{ledgers}/persistent/t%201", b"\x08\x01\xff binary", makepath=True)
        admin.create(f"{ledgers}/persistent/t%201/sub-a", b"\x00cursor", makepath=True)
        admin.create(f"{ledgers}/persistent/t2", b"", makepath=True)
        admin.create(f"{ledgers}/non-persistent/ignored", b"", makepath=True)
    with connected(zookeeper.connect_string + chroot) as client:
        nodes = dump(client)
    topics = {path: value for path, value in nodes.items() if path.startswith("/managed-ledgers")}
    assert topics == {
        "/managed-ledgers/acme/orders/persistent/t%201": None,
        "/managed-ledgers/acme/orders/persistent/t2": None,
    }
