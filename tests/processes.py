"""The gateway as a child process, the way a user runs it, for the tests that need one."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "configs" / "demo-cluster.json"
EXE = str(Path(sys.executable).with_name("pulsar-lookup-gateway"))
LISTENING = re.compile(r"listening on (\S+) listener=(\S+) tls=(\S+)")


def write_config(path: Path, metadata: str) -> Path:
    """A config with listeners internal (127.0.0.1) and external (127.0.0.2), each with a binary
    and an HTTP socket on a free port."""
    path.write_text(
        f"metadataStoreUrl={metadata}\n"
        "advertisedListeners=internal:pulsar://127.0.0.1:6650,external:pulsar://127.0.0.2:6650\n"
        "bindAddresses=internal:pulsar://127.0.0.1:0,external:pulsar://127.0.0.2:0,"
        "internal:http://127.0.0.1:0,external:http://127.0.0.2:0\n"
        "brokerServicePort=\nwebServicePort=\n"
    )
    return path


class Running:
    """A gateway process; waits (bounded) until every socket logged its address."""

    def __init__(self, *args: str, sockets: int = 4, env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            [EXE, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **env} if env else None,
        )
        self.lines: list[str] = []
        self.urls: dict[tuple[str, str], str] = {}  # (scheme, listener) -> url
        deadline = time.monotonic() + 60
        assert self.process.stdout is not None
        while len(self.urls) < sockets and time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            if match := LISTENING.search(line):
                url, listener = match.group(1), match.group(2)
                self.urls[(url.split("://")[0], listener)] = url
        if len(self.urls) != sockets:  # (no process left behind by a start that failed)
            self.process.kill()
            self.process.wait(timeout=10)
            raise AssertionError("".join(self.lines))

    def get(self, listener: str, path: str) -> Any:
        url = self.urls[("http", listener)] + path
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.loads(response.read())

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.process.send_signal(sig)
        try:
            out, _ = self.process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise
        self.lines.append(out)
        return self.process.returncode
