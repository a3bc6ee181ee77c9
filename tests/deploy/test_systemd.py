"""deploy/systemd: the unit runs the gateway with workers, restarts it on failure, gives it the
descriptors it needs and the time to stop; `systemd-analyze verify` accepts it where present."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.deploy.artefacts import CONFIG_PATH, DEPLOY
from tests.processes import EXE, ROOT

UNIT = DEPLOY / "systemd" / "pulsar-lookup-gateway.service"


def unit_entries(text: str) -> dict[str, list[tuple[str, str]]]:
    """Section -> (key, value) in order; a key may repeat (systemd appends or resets)."""
    sections: dict[str, list[tuple[str, str]]] = {}
    section = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            sections.setdefault(section, [])
            continue
        assert section is not None, f"{line!r} before any section"
        key, _, value = line.partition("=")
        sections[section].append((key.strip(), value.strip()))
    return sections


def setting(section: str, key: str) -> str:
    values = [v for k, v in unit_entries(UNIT.read_text())[section] if k == key]
    assert values, f"[{section}] {key}= is not set"
    return values[-1]


def test_it_runs_the_gateway_with_workers_on_the_config() -> None:
    command = shlex.split(setting("Service", "ExecStart"))
    assert Path(command[0]).name == "pulsar-lookup-gateway"
    assert command[1] == "run"
    assert command[command.index("--config") + 1] == CONFIG_PATH
    assert int(command[command.index("--workers") + 1]) >= 2
    assert setting("Service", "Type") in ("exec", "simple")


def test_restarts_descriptors_user_and_stop() -> None:
    assert setting("Service", "Restart") == "on-failure"
    assert int(setting("Service", "LimitNOFILE")) >= 65536
    assert setting("Service", "User") not in ("", "root", "0")
    assert setting("Service", "KillSignal") == "SIGTERM"
    # SIGTERM to the supervisor, which stops the workers; they get shutdownTimeoutSeconds (5 by
    # default) plus the supervisor's 10 s margin before systemd kills what is left.
    assert setting("Service", "KillMode") == "mixed"
    assert int(setting("Service", "TimeoutStopSec").rstrip("s")) > 5 + 10
    assert setting("Service", "NoNewPrivileges") == "yes"
    assert setting("Unit", "After") == "network-online.target"
    assert setting("Install", "WantedBy") == "multi-user.target"
    # `run --workers N` keeps the workers' metric files in a private directory under /tmp.
    assert setting("Service", "PrivateTmp") == "yes"


def test_systemd_analyze_verifies_it(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    # The unit names the installed program (/opt/...); verify checks that it exists, so the copy
    # names the program of this checkout instead.
    text = UNIT.read_text()
    installed = shlex.split(setting("Service", "ExecStart"))[0]
    copy = tmp_path / UNIT.name
    copy.write_text(text.replace(installed, EXE))
    result = subprocess.run(
        [analyze, "verify", "--man=no", str(copy)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert UNIT.name not in result.stderr, result.stderr  # no complaint about our unit
