"""A real ZooKeeper server as a child process: for `standalone` and for the test suite.

Uses the Debian `zookeeper` package's jar (its manifest names the dependencies) or a
distribution under ZOOKEEPER_HOME. Listens on loopback only; data lives in a temp directory.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

DEBIAN_JAR = Path("/usr/share/java/zookeeper.jar")
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"


class ZooKeeperUnavailable(RuntimeError):
    pass


def zookeeper_classpath() -> str:
    home = os.environ.get("ZOOKEEPER_HOME")
    if home:
        jars = sorted(Path(home).glob("lib/*.jar")) + sorted(Path(home).glob("*.jar"))
        if jars:
            return os.pathsep.join(str(j) for j in jars)
        raise ZooKeeperUnavailable(f"ZOOKEEPER_HOME={home} holds no jars")
    if DEBIAN_JAR.exists():
        return str(DEBIAN_JAR)
    raise ZooKeeperUnavailable(
        "no ZooKeeper server: install the Debian package (apt-get install -y zookeeper, "
        "or `make install`) or set ZOOKEEPER_HOME"
    )


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class EmbeddedZooKeeper:
    """Start with `start()`, stop with `stop()`; `restart()` keeps the data and the port."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, data_dir: Path | None = None):
        self.host = host
        self.port = port or free_port(host)
        self._own_dir = data_dir is None
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix="plg-zk-"))
        self._process: subprocess.Popen[bytes] | None = None
        self._log = self.data_dir / "zookeeper.log"

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, timeout: float = 30.0) -> None:
        config = self.data_dir / "zoo.cfg"
        config.write_text(
            "tickTime=500\n"
            "minSessionTimeout=1000\n"
            "maxSessionTimeout=60000\n"
            f"dataDir={self.data_dir / 'data'}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={self.host}\n"
            "admin.enableServer=false\n"
            "maxClientCnxns=0\n"
            "4lw.commands.whitelist=ruok,srvr,stat,wchs\n"
        )
        command = [
            shutil.which("java") or "java",
            "-Xmx256m",
            "-Dzookeeper.jmx.log4j.disable=true",
            "-cp",
            zookeeper_classpath(),
            MAIN_CLASS,
            str(config),
        ]
        log = self._log.open("ab")
        try:
            self._process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        finally:
            log.close()
        self._wait_until_serving(timeout)

    def _wait_until_serving(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running:
                raise ZooKeeperUnavailable(
                    f"ZooKeeper exited at start-up; see {self._log}:\n{self._tail()}"
                )
            if self._serving():
                return
            time.sleep(0.1)
        self.stop()
        raise ZooKeeperUnavailable(f"ZooKeeper did not answer within {timeout}s:\n{self._tail()}")

    def _serving(self) -> bool:
        # `ruok` answers before the server takes requests; `srvr` says when it does.
        try:
            return "Mode:" in self.four_letter("srvr")
        except OSError:
            return False

    def four_letter(self, command: str) -> str:
        """The answer to a four-letter command (ruok, srvr, stat, wchs)."""
        chunks = []
        with socket.create_connection((self.host, self.port), timeout=5) as sock:
            sock.sendall(command.encode())
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode(errors="replace")

    def watch_count(self) -> int:
        """The server's total of watches set, all sessions together (`wchs`)."""
        answer = self.four_letter("wchs")
        match = re.search(r"Total watches:\s*(\d+)", answer)
        if match is None:
            raise ZooKeeperUnavailable(f"unexpected wchs answer: {answer!r}")
        return int(match.group(1))

    def _tail(self) -> str:
        try:
            return "\n".join(self._log.read_text(errors="replace").splitlines()[-15:])
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        process.send_signal(signal.SIGCONT)  # a paused server cannot act on SIGTERM
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)

    def kill(self) -> None:
        """Stop abruptly, as a crash would."""
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait(10)

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): connections stay open, nothing is answered."""
        if self._process is not None:
            self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self._process is not None:
            self._process.send_signal(signal.SIGCONT)

    def restart(self, timeout: float = 30.0) -> None:
        self.stop()
        self.start(timeout)

    def close(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedZooKeeper:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
