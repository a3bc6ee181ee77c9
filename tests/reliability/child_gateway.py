"""A gateway in a child process, for the tests that bound its memory.

In the test process, resident memory holds whatever earlier tests and the test's own clients
allocated, and the allocator keeps freed pages as it likes: a bound measured there moves with
what else ran. The child's memory is the gateway's alone, and its peak is reset right before the
attack (`/proc/PID/clear_refs`), so the figure is what the attack cost.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Self

from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
from tests.processes import Running

MIB = 1024 * 1024
# Large buffers (a 100 KB name, a read of a megabyte) go to their own mappings and back to the
# system when freed, so "resident after" counts what the gateway still holds, not what glibc's
# heap kept after a free.
ALLOCATOR = {"MALLOC_MMAP_THRESHOLD_": "65536"}


class ChildGateway:
    """`run` on one socket serving `nodes` from a file snapshot; its port and memory. The
    socket is binary unless a subclass declares another (LISTENERS, SOCKET)."""

    #: The config lines of the gateway's listeners and its one socket, and that socket's
    #: (scheme, listener). No keep-alive: the test decides when a binary connection goes.
    LISTENERS = (
        "advertisedListeners=internal:pulsar://127.0.0.1:6650\n"
        "bindAddresses=internal:pulsar://127.0.0.1:0\n"
        "internalListenerName=internal\n"
        "keepAliveIntervalSeconds=0\n"
    )
    SOCKET = ("pulsar", "internal")
    #: The child's allocator settings (environment variables).
    ALLOCATOR: ClassVar[dict[str, str]] = ALLOCATOR

    def __init__(self, tmp_path: Path, nodes: dict[str, Any], extra: str = "") -> None:
        write_snapshot(tmp_path / "cluster.json", nodes)
        conf = tmp_path / "gateway.conf"
        conf.write_text(
            f"metadataStoreUrl=file:{tmp_path / 'cluster.json'}\n"
            + self.LISTENERS
            + "brokerServicePort=\nwebServicePort=\n"
            + extra
        )
        self.running = Running("run", "--config", str(conf), sockets=1, env=self.ALLOCATOR)
        self.pid = self.running.process.pid
        self.port = int(self.running.urls[self.SOCKET].rsplit(":", 1)[1])
        # The child logs (throttled) refusals; a pipe nobody reads would stall it once full.
        self._drain = threading.Thread(target=self._read_output, daemon=True)
        self._drain.start()

    def _read_output(self) -> None:
        assert self.running.process.stdout is not None
        for line in self.running.process.stdout:
            self.running.lines.append(line)

    def metric(self, name: str, labels: str = "") -> float:
        """One sample of the gateway's /metrics (0 when absent); `labels` as they are written
        there, e.g. `reason="stalled"`. The socket must be HTTP."""
        url = f"http://127.0.0.1:{self.port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        wanted = name + (f"{{{labels}}}" if labels else "")
        for line in text.splitlines():
            if line.startswith(wanted + " "):
                return float(line.split()[-1])
        return 0.0

    def reset_peak(self) -> None:
        """Start counting the peak anew (Linux: writing 5 to clear_refs resets VmHWM)."""
        with open(f"/proc/{self.pid}/clear_refs", "w") as clear:
            clear.write("5")

    def peak(self) -> int:
        return self._status("VmHWM:")

    def resident(self) -> int:
        return self._status("VmRSS:")

    def _status(self, field: str) -> int:
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
        raise AssertionError(f"no {field} for the gateway")

    def stop(self) -> int:
        process = self.running.process
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        self._drain.join(timeout=10)
        return process.returncode

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()


class HttpGateway(ChildGateway):
    """A child gateway with one HTTP socket of the internal listener (the broker link's)."""

    LISTENERS = (
        "advertisedListeners=internal:pulsar://127.0.0.1:6650,internal:http://127.0.0.1:8080\n"
        "bindAddresses=internal:http://127.0.0.1:0\n"
        "internalListenerName=internal\n"
    )
    SOCKET = ("http", "internal")
