"""`run --workers N`: N gateway processes sharing every port through SO_REUSEPORT.

Each worker is a whole gateway (its own event loop, its own ZooKeeper session and cache); the
kernel spreads new connections across them. This process only supervises: it forwards
SIGTERM/SIGINT, restarts a worker that dies unexpectedly (a bounded number of times), and
exits 0 when every worker stopped cleanly.

Metrics: a scrape reaches whichever worker the kernel picks, so the workers share their samples
through prometheus-client's multiprocess mode: this process makes a private directory, passes it
to every worker as PROMETHEUS_MULTIPROC_DIR (read when a worker imports prometheus-client), and
each worker's /metrics merges the files of all. When a worker exits, its live gauges are dropped
(`mark_process_dead`); its counters and histograms stay in the totals. The directory is removed
at exit.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from prometheus_client import Counter, values
from prometheus_client.multiprocess import mark_process_dead

from pulsar_lookup_gateway.listeners.config import GatewayConfig
from pulsar_lookup_gateway.lookup.metrics import WORKER_RESTARTS, WORKER_RESTARTS_HELP

log = logging.getLogger(__name__)

MAX_RESTARTS = 5  # within RESTART_WINDOW seconds; beyond it the supervisor gives up
RESTART_WINDOW = 60.0
POLL_INTERVAL = 0.2
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"  # prometheus-client's multiprocess switch


class WorkersError(Exception):
    pass


def check_workers(config: GatewayConfig, count: int) -> None:
    if count < 1:
        raise WorkersError("--workers must be at least 1")
    ephemeral = [spec.origin for spec in config.sockets() if spec.endpoint.port == 0]
    if count > 1 and ephemeral:
        raise WorkersError(
            "--workers needs fixed ports (port 0 gives each worker a port of its own): "
            + ", ".join(ephemeral)
        )


@contextmanager
def shared_metrics_directory() -> Iterator[Path]:
    """A new, empty directory only this user can read, for the workers' metric files; removed
    with whatever is in it when the supervisor exits."""
    directory = Path(tempfile.mkdtemp(prefix="pulsar-lookup-gateway-metrics-"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def restart_counter(directory: Path) -> Counter:
    """`pulsar_lookup_gateway_worker_restarts_total`, written to the workers' shared directory.
    This process imported prometheus-client before it knew it would supervise, so its value
    class is the single-process one: this counter alone is made with the multiprocess one
    (`values.MultiProcessValue()`, the hook prometheus-client offers for choosing it in code),
    which reads the directory from the environment as it opens its file. Both are restored."""
    saved_class, saved_dir = values.ValueClass, os.environ.get(MULTIPROC_ENV)
    values.ValueClass = values.MultiProcessValue()  # type: ignore[no-untyped-call]
    os.environ[MULTIPROC_ENV] = str(directory)
    try:
        return Counter(WORKER_RESTARTS, WORKER_RESTARTS_HELP, registry=None)
    finally:
        values.ValueClass = saved_class
        if saved_dir is None:
            del os.environ[MULTIPROC_ENV]
        else:
            os.environ[MULTIPROC_ENV] = saved_dir


def supervise(
    config_path: Path, config: GatewayConfig, count: int, worker_args: Sequence[str] = ()
) -> int:
    """Run `count` workers until a signal; `worker_args`: more options for each worker's
    command line (the logging flags)."""
    check_workers(config, count)
    with shared_metrics_directory() as directory:
        return _supervise(config_path, config, count, list(worker_args), directory)


def _supervise(
    config_path: Path, config: GatewayConfig, count: int, worker_args: list[str], metrics: Path
) -> int:
    stopping = False
    restarted = restart_counter(metrics)
    env = {**os.environ, MULTIPROC_ENV: str(metrics)}

    def spawn(index: int) -> subprocess.Popen[bytes]:
        command = [
            sys.executable,
            "-m",
            "pulsar_lookup_gateway",
            "run",
            "--config",
            str(config_path),
        ]
        return subprocess.Popen([*command, "--worker", str(index), *worker_args], env=env)

    def stop(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for child in workers.values():
            if child.poll() is None:
                child.send_signal(signum)

    workers = {index: spawn(index) for index in range(count)}
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    log.info("started %d workers: %s", count, " ".join(str(w.pid) for w in workers.values()))
    restarts: list[float] = []
    try:
        while not stopping:
            time.sleep(POLL_INTERVAL)
            for index, child in list(workers.items()):
                code = child.poll()
                if code is None or stopping:
                    continue
                mark_process_dead(child.pid, str(metrics))  # type: ignore[no-untyped-call]
                now = time.monotonic()
                restarts = [t for t in restarts if now - t < RESTART_WINDOW] + [now]
                if len(restarts) > MAX_RESTARTS:
                    log.error("workers keep dying (%d restarts in %.0fs); stopping", MAX_RESTARTS,
                              RESTART_WINDOW)  # fmt: skip
                    stop(signal.SIGTERM, None)
                    break
                log.error(
                    "worker %d (pid %d) exited with %s; restarting it", index, child.pid, code
                )
                workers[index] = spawn(index)
                restarted.inc()
        deadline = time.monotonic() + config.shutdown_timeout_seconds + 10
        codes = []
        for child in workers.values():
            try:
                codes.append(child.wait(max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                child.kill()
                codes.append(child.wait())
        return 0 if all(code == 0 for code in codes) else 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
