"""What an operator reads: --version, --log-level and --log-format on every command, the lookup
log lines (refused at INFO, answered at DEBUG) and aiohttp's access log, from real processes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest

from pulsar_lookup_gateway.gateway.version import gateway_version
from tests.processes import DEMO, EXE, Running, write_config

OWNED = "persistent/public/default/orders-partition-1"
MISSING_NAMESPACE = "persistent/public/no-such-ns/t"
COMMANDS = ("check-config", "run", "standalone", "lookup", "seed", "dump", "certs")


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [EXE, *args], capture_output=True, text=True, timeout=60, env=env or dict(os.environ)
    )


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_version_names_the_installed_distribution() -> None:
    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"pulsar-lookup-gateway {gateway_version()}"
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", gateway_version())


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_takes_the_log_options(command: str) -> None:
    result = run_cli(command, "--help")
    assert result.returncode == 0
    assert "--log-level" in result.stdout and "--log-format" in result.stdout


def test_a_bad_level_is_a_usage_error_naming_its_source(tmp_path: Path) -> None:
    conf = write_config(tmp_path / "g.conf", f"file:{DEMO}")
    flag = run_cli("check-config", "--config", str(conf), "--log-level", "loud")
    assert flag.returncode == 2 and "invalid choice: 'LOUD'" in flag.stderr
    env = {**os.environ, "PULSAR_GATEWAY_LOG_LEVEL": "loud"}
    from_env = run_cli("check-config", "--config", str(conf), env=env)
    assert from_env.returncode == 2
    assert "PULSAR_GATEWAY_LOG_LEVEL: unknown level 'loud'" in from_env.stderr


def test_the_level_variable_is_not_taken_for_a_config_key(tmp_path: Path) -> None:
    conf = write_config(tmp_path / "g.conf", f"file:{DEMO}")
    env = {**os.environ, "PULSAR_GATEWAY_LOG_LEVEL": "debug"}
    result = run_cli("check-config", "--config", str(conf), env=env)
    assert result.returncode == 0, result.stderr
    assert "LOG_LEVEL" not in result.stdout + result.stderr


def test_json_lines_and_the_refused_lookup_line(tmp_path: Path) -> None:
    conf = write_config(tmp_path / "g.conf", f"file:{DEMO}")
    gateway = Running("run", "--config", str(conf), "--log-format", "json")
    try:
        base = gateway.urls[("http", "external")]
        assert status_of(f"{base}/lookup/v2/topic/{MISSING_NAMESPACE}") == 404
        assert status_of(f"{base}/lookup/v2/topic/{OWNED}") == 200
        # refused before the lookup service is asked: a name that does not parse
        assert status_of(f"{base}/lookup/v2/topic/persistent/public/default/%2E%2E") == 400
    finally:
        assert gateway.stop() == 0
    records = [json.loads(line) for line in "".join(gateway.lines).splitlines() if line.strip()]
    assert records, "no log lines"
    for record in records:
        assert {"ts", "level", "logger", "message"} <= record.keys()
        stamp = datetime.fromisoformat(record["ts"].replace("Z", "+00:00"))
        assert record["ts"].endswith("Z") and stamp.utcoffset() is not None
    refused = [r for r in records if r["message"].startswith("lookup ")]
    # one INFO line for each refused lookup; the answered one is DEBUG, below this level
    assert len(refused) == 2, refused
    invalid = refused[1]
    assert invalid["level"] == "INFO" and invalid["message"].startswith("lookup InvalidTopicName")
    assert "protocol=http" in invalid["message"] and "listener=-" in invalid["message"]
    line = refused[0]
    assert line["level"] == "INFO"
    message = line["message"]
    assert re.search(r"client=127\.0\.0\.\d+:\d+ on ", message), message  # the socket's peer
    for part in (
        "protocol=http",
        f"on {base}",  # the listener socket it reached
        "listener=external",
        "chosen_by=socket",
        "topic=persistent://public/no-such-ns/t",
    ):
        assert part in message, message


def test_debug_logs_answered_lookups_and_access_log_is_opt_in(tmp_path: Path) -> None:
    conf = write_config(tmp_path / "g.conf", f"file:{DEMO}")
    quiet = Running("run", "--config", str(conf))
    try:
        assert status_of(quiet.urls[("http", "internal")] + f"/lookup/v2/topic/{OWNED}") == 200
    finally:
        assert quiet.stop() == 0
    assert "GET /lookup/v2/topic" not in "".join(quiet.lines)
    assert "lookup connect" not in "".join(quiet.lines)

    loud = Running(
        "run", "--config", str(conf), "--log-level", "debug", "--access-log"
    )  # fmt: skip
    try:
        assert status_of(loud.urls[("http", "internal")] + f"/lookup/v2/topic/{OWNED}") == 200
    finally:
        assert loud.stop() == 0
    text = "".join(loud.lines)
    answered = [line for line in text.splitlines() if "lookup connect:" in line]
    assert len(answered) == 1 and "DEBUG" in answered[0], answered
    assert "chosen_by=socket" in answered[0] and "listener=internal" in answered[0]
    access = [line for line in text.splitlines() if "aiohttp.access" in line]
    assert any(f'"GET /lookup/v2/topic/{OWNED} HTTP/1.1" 200' in line for line in access), access
