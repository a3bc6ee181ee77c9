"""`run --workers N`: processes sharing every port with SO_REUSEPORT."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import free_port
from tests.processes import DEMO, EXE
from tests.reliability.worker_gateway import STARTED, lookup

WORKER_LISTENING = re.compile(r"INFO worker (\d+) \S+: listening on (\S+)")


def fixed_port_config(path: Path, binary: int, http: int) -> Path:
    path.write_text(
        f"metadataStoreUrl=file:{DEMO}\n"
        "advertisedListeners=internal:pulsar://127.0.0.1:6650\n"
        f"bindAddresses=internal:pulsar://127.0.0.1:{binary},internal:http://127.0.0.1:{http}\n"
        "brokerServicePort=\nwebServicePort=\n"
    )
    return path


def read_until(process: subprocess.Popen[str], pattern: re.Pattern[str], count: int) -> list[str]:
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 60
    while sum(1 for line in lines if pattern.search(line)) < count:
        assert time.monotonic() < deadline, "".join(lines)
        line = process.stdout.readline()
        assert line, "".join(lines)
        lines.append(line)
    return lines


def test_two_workers_share_the_ports_restart_and_stop_cleanly(tmp_path: Path) -> None:
    binary, http = free_port(), free_port()
    conf = fixed_port_config(tmp_path / "w.conf", binary, http)
    process = subprocess.Popen(
        [EXE, "run", "--config", str(conf), "--workers", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines = read_until(process, WORKER_LISTENING, 4)  # 2 workers x 2 sockets
        workers = {m.group(1) for line in lines if (m := WORKER_LISTENING.search(line))}
        assert workers == {"0", "1"}
        started = STARTED.search("".join(lines))
        assert started is not None
        pids = [int(p) for p in started.group(2).split()]
        assert len(pids) == 2
        for _ in range(20):
            assert lookup(http)["brokerUrl"] == "pulsar://10.0.0.1:6650"

        os.kill(pids[0], signal.SIGKILL)  # a worker dies: the supervisor replaces it
        lines += read_until(process, re.compile(r"restarting it"), 1)
        lines += read_until(process, WORKER_LISTENING, 2)
        for _ in range(20):  # served throughout by whichever workers are up
            assert lookup(http)["brokerUrl"] == "pulsar://10.0.0.1:6650"
    finally:
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=30)
    assert process.returncode == 0, out


def test_workers_need_fixed_ports(tmp_path: Path) -> None:
    conf = fixed_port_config(tmp_path / "w.conf", 0, 0)
    result = subprocess.run(
        [EXE, "run", "--config", str(conf), "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--workers needs fixed ports" in result.stderr
