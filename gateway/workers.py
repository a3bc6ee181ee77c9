"""`run --workers N`: N gateway processes sharing every port through SO_REUSEPORT.

Each worker is a whole gateway (its own event loop, its own ZooKeeper session and cache); the
kernel spreads new connections across them. This process only supervises: it forwards
SIGTERM/SIGINT, restarts a worker that dies unexpectedly (a bounded number of times), and
exits 0 when every worker stopped cleanly.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from listeners.config import GatewayConfig

log = logging.getLogger(__name__)

MAX_RESTARTS = 5  # within RESTART_WINDOW seconds; beyond it the supervisor gives up
RESTART_WINDOW = 60.0
POLL_INTERVAL = 0.2


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


def supervise(config_path: Path, config: GatewayConfig, count: int) -> int:
    check_workers(config, count)
    stopping = False

    def spawn(index: int) -> subprocess.Popen[bytes]:
        command = [sys.executable, "-m", "gateway.cli", "run", "--config", str(config_path)]
        return subprocess.Popen([*command, "--worker", str(index)])

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
