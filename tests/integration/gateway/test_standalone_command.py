"""`run` and `standalone` as processes: a bad --port-offset and a taken port are refused, naming
the entry, before anything starts."""

from __future__ import annotations

import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.processes import EXE, ROOT


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
