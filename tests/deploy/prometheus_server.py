"""A real Prometheus server (Debian's /usr/bin/prometheus) for the tests, and promtool.

`PrometheusServer` runs deploy/prometheus/prometheus.yml as shipped except for what a test must
change: its targets (static, the gateways under test, instead of the Kubernetes DNS names), the
intervals (1 s) and the path of the rule files. It listens on a free 127.0.0.1 port with its
storage in a temp dir; every wait is bounded, and `stop()` ends the process.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import free_port
from tests.processes import ROOT

PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
SHIPPED_CONFIG = PROMETHEUS_DIR / "prometheus.yml"
JOB = "pulsar-lookup-gateway"


def tool(name: str) -> str:
    """The path of a Prometheus program (`make install` installs Debian's `prometheus`)."""
    path = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else "")
    if not path:
        pytest.fail(f"{name} is not installed (`make install` installs the prometheus package)")
    return path


def promtool(*args: str, stdin: str | None = None, cwd: Path | None = None) -> str:
    """Run promtool; fail the test with its output unless it exits 0. Returns its output."""
    result = subprocess.run(
        [tool("promtool"), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"promtool {' '.join(args)} failed:\n{output}"
    return output


def scrape_config_for(targets: Sequence[str], rule_files: Sequence[Path]) -> dict[str, Any]:
    """The shipped config, scraping `targets` every second."""
    config = yaml.safe_load(SHIPPED_CONFIG.read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(path) for path in rule_files]
    (job,) = [job for job in config["scrape_configs"] if job["job_name"] == JOB]
    for key in [key for key in job if key.endswith("_sd_configs")]:
        del job[key]
    job["static_configs"] = [{"targets": list(targets)}]
    job["scrape_timeout"] = "1s"
    return dict(config)


class PrometheusServer:
    def __init__(self, workdir: Path, targets: Sequence[str]) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        shipped = yaml.safe_load(SHIPPED_CONFIG.read_text())
        rules = [PROMETHEUS_DIR / name for name in shipped["rule_files"]]  # absolute paths
        self.config = workdir / "prometheus.yml"
        self.config.write_text(yaml.safe_dump(scrape_config_for(targets, rules)))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / "prometheus.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> None:
        promtool("check", "config", str(self.config))
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                [
                    tool("prometheus"),
                    f"--config.file={self.config}",
                    f"--storage.tsdb.path={self.workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--storage.tsdb.retention.time=1h",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while not self._ready():
            if self.process.poll() is not None:
                raise AssertionError(f"prometheus exited:\n{self.log.read_text()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"prometheus not ready in {timeout}s:\n{self.log.read_text()}")
            time.sleep(0.1)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as response:
                return bool(response.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path>; the `data` of a successful answer (an error answer fails)."""
        query = urllib.parse.urlencode(params)
        url = f"{self.url}/api/v1/{path}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{path} {params}: {exc.code} {exc.read()!r}") from None
        assert answer["status"] == "success", answer
        return answer["data"]

    def evaluated_rules(self, timeout: float = 30.0) -> dict[str, dict[str, Any]]:
        """Every loaded rule by name, once each has been evaluated at least once."""
        deadline = time.monotonic() + timeout
        while True:
            groups = self.api("rules")["groups"]
            rules = {rule["name"]: rule for group in groups for rule in group["rules"]}
            # A rule never evaluated has health "unknown" and a zero lastEvaluation (year 1).
            if rules and all(rule["health"] != "unknown" for rule in rules.values()):
                return rules
            if time.monotonic() > deadline:
                raise AssertionError(f"rules not evaluated in {timeout}s: {groups}")
            time.sleep(0.2)

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector (a scalar answers one unlabelled entry)."""
        data = self.api("query", query=expr)
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        return list(data["result"])

    def wait_for(
        self,
        expr: str,
        holds: Callable[[list[dict[str, Any]]], bool] = bool,
        *,
        timeout: float = 30.0,
    ) -> list[dict[str, Any]]:
        """Query `expr` until its result satisfies `holds` (default: not empty)."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(expr)
            if holds(result):
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"{expr!r} never held in {timeout}s; last result: {result}")
            time.sleep(0.2)


def sample_value(result: list[dict[str, Any]]) -> float:
    (entry,) = result
    return float(entry["value"][1])
