"""`run --workers N` when its supervisor is killed with SIGKILL: the workers stop with it, and
the metrics directory it could not remove is removed by the next supervisor to start (but never
the directory of a supervisor still running)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from pulsar_lookup_gateway.metadata_store.admin import seed
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper, free_port
from tests.deploy.gateways import GatewayProcess, demo_nodes
from tests.processes import DEMO
from tests.reliability.worker_gateway import STARTED, lookup

PREFIX = "pulsar-lookup-gateway-metrics-"
METRICS_DIR = PREFIX + "*"
STOPPING = re.compile(r"worker \d \S+: stopping: no new connections")
GONE_WITHIN = 20.0  # seconds for both workers to exit once the supervisor is killed


def two_socket_config(path: Path, metadata: str) -> tuple[Path, int, int]:
    """A config with one binary and one HTTP socket on fixed free ports (as `--workers` needs);
    the config, the binary port, the HTTP port."""
    binary, http = free_port(), free_port()
    path.write_text(
        f"metadataStoreUrl={metadata}\n"
        "advertisedListeners=internal:pulsar://127.0.0.1:6650\n"
        f"bindAddresses=internal:pulsar://127.0.0.1:{binary},internal:http://127.0.0.1:{http}\n"
        "brokerServicePort=\nwebServicePort=\n"
    )
    return path, binary, http


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time) from /proc/<pid>/stat (fields 3 and 22); None: no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])


def pid_namespace() -> int:
    return os.stat("/proc/self/ns/pid").st_ino


class Workers:
    """The worker processes a supervisor logged, each known by pid and start time (a pid can be
    reused once its process is gone)."""

    def __init__(self, gateway: GatewayProcess) -> None:
        started = STARTED.search(gateway.text())
        assert started is not None, gateway.text()
        self.starts: dict[int, int] = {}
        for pid in map(int, started.group(2).split()):
            found = proc_stat(pid)
            assert found is not None, f"worker {pid} is not running"
            self.starts[pid] = found[1]

    def running(self) -> list[int]:
        """The workers still running (a zombie is not: it has exited, nobody reaped it yet)."""
        alive = []
        for pid, start in self.starts.items():
            found = proc_stat(pid)
            if found is not None and found[0] not in "ZX" and found[1] == start:
                alive.append(pid)
        return alive

    def kill(self) -> None:
        for pid in self.running():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def supervisor(config: Path, log: Path, env: dict[str, str]) -> Iterator[GatewayProcess]:
    """`run --workers 2`; whatever happens, the supervisor and its workers are gone after."""
    gateway = GatewayProcess(config, log, "--workers", "2", sockets=4, env=env)
    workers = Workers(gateway)
    try:
        yield gateway
    finally:
        try:
            gateway.stop()
        finally:
            workers.kill()


def kill_supervisor(gateway: GatewayProcess) -> Workers:
    """SIGKILL the supervisor and reap it; its workers."""
    workers = Workers(gateway)
    gateway.process.kill()
    gateway.process.wait(10)
    return workers


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: still not so after {timeout:g} s"
        time.sleep(0.1)


def refuses(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            return False
    except ConnectionRefusedError:
        return True


@pytest.mark.zookeeper
def test_workers_stop_when_the_supervisor_is_killed(
    tmp_path: Path, zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk_admin: KazooClient
) -> None:
    seed(zk_admin, demo_nodes())
    metadata = f"zk:{zookeeper.connect_string}{zk_chroot}"
    config, binary, http = two_socket_config(tmp_path / "gateway.conf", metadata)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    log = tmp_path / "gateway.log"
    with supervisor(config, log, env) as gateway:
        assert lookup(http)["brokerUrl"] == "pulsar://10.0.0.1:6650"
        workers = kill_supervisor(gateway)
        killed = time.monotonic()
        try:
            wait_until(lambda: not workers.running(), GONE_WITHIN, "the workers are running")
            gone = time.monotonic() - killed  # reported, not asserted (polled every 0.1 s)
            assert refuses(http), "the HTTP port still accepts connections"
            assert refuses(binary), "the binary port still accepts connections"
            # They stopped the graceful way (as on SIGTERM), each of them.
            assert len(STOPPING.findall(gateway.text())) == 2, gateway.text()
            print(f"\nsupervisor SIGKILLed: both workers gone within {gone:.1f}s, ports refusing")
        finally:
            workers.kill()


def test_the_next_supervisor_removes_what_a_killed_one_left(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    metadata = f"file:{DEMO}"
    configs = [two_socket_config(tmp_path / f"{n}.conf", metadata)[0] for n in range(3)]

    # A supervisor killed with SIGKILL cannot remove its directory.
    with supervisor(configs[0], tmp_path / "killed.log", env) as killed:
        (left,) = scratch.glob(METRICS_DIR)
        kill_supervisor(killed).kill()
    assert left.is_dir()
    # Named the way a supervisor names its directory: one for a supervisor still running (this
    # process stands in for it), one for a process whose pid was reused since (same pid, another
    # start time).
    found = proc_stat(os.getpid())
    assert found is not None
    pid, start, namespace = os.getpid(), found[1], pid_namespace()
    running = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{pid}-{start}-{namespace}-", dir=scratch))
    reused = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{pid}-{start + 1}-{namespace}-", dir=scratch))

    with supervisor(configs[1], tmp_path / "second.log", env) as second:
        assert not left.exists(), "the killed supervisor's directory is still there"
        assert not reused.exists(), "a directory whose owner's pid was reused is still there"
        assert running.is_dir()
        (own,) = set(scratch.glob(METRICS_DIR)) - {running}
        # A third supervisor keeps the second's directory.
        with supervisor(configs[2], tmp_path / "third.log", env) as third:
            assert own.is_dir() and running.is_dir()
            assert len(set(scratch.glob(METRICS_DIR))) == 3
            assert third.stop() == 0
        assert second.stop() == 0, second.text()
    assert set(scratch.glob(METRICS_DIR)) == {running}
