"""The command line imports only what the chosen command needs: `--help` lists every command
from gateway.cli's table without importing their modules. Read from `python -X importtime`'s
module names in a child process (this test process has imported everything already)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from pulsar_lookup_gateway.gateway.cli import COMMANDS
from tests.processes import ROOT

#: What the servers, ZooKeeper's client, TLS, tokens, metrics, config validation and the Spark
#: job load; none is needed to list the commands.
HEAVY = frozenset(
    {
        "aiohttp",
        "kazoo",
        "pyspark",
        "pyarrow",
        "matplotlib",
        "pydantic",
        "cryptography",
        "jwt",
        "prometheus_client",
    }
)
COMMAND_MODULES = {f"pulsar_lookup_gateway.gateway.{module}" for module, _ in COMMANDS.values()}


def imports_of(*args: str) -> tuple[set[str], str]:
    """The modules `python -m pulsar_lookup_gateway ARGS` imports, and what it printed."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "pulsar_lookup_gateway", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200"},  # (one help line per command)
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    modules = {
        line.rsplit("|", 1)[1].strip()
        for line in result.stderr.splitlines()
        if line.startswith("import time:") and not line.endswith("imported package")
    }
    assert "pulsar_lookup_gateway.gateway.cli" in modules  # (the output was read right)
    return modules, result.stdout


def test_help_lists_every_command_without_importing_any() -> None:
    modules, out = imports_of("--help")
    for name, (_module, help_text) in COMMANDS.items():
        assert re.search(rf"^ +{re.escape(name)}\s+{re.escape(help_text)}$", out, re.M), name
    assert modules & HEAVY == set()
    assert modules & COMMAND_MODULES == set()


@pytest.mark.parametrize(
    ("command", "needed", "not_needed"),
    [
        ("certs", {"cryptography"}, {"aiohttp", "kazoo", "pyspark", "pydantic", "jwt"}),
        ("seed", {"kazoo"}, {"aiohttp", "pyspark", "cryptography", "jwt"}),
        ("lookup", {"kazoo"}, {"aiohttp", "pyspark", "pyarrow", "matplotlib"}),
        ("check-config", {"pydantic"}, {"aiohttp", "kazoo", "pyspark"}),
        ("run", {"pydantic"}, {"aiohttp", "kazoo", "pyspark"}),
        # The Spark job loads pyspark when it runs, not to parse its arguments.
        ("resolve-zones", set(), {"aiohttp", "kazoo", "pyspark", "pyarrow", "matplotlib"}),
        ("watch", {"aiohttp"}, {"kazoo", "pyspark"}),
    ],
)
def test_a_command_imports_its_own_module_and_what_it_needs_only(
    command: str, needed: set[str], not_needed: set[str]
) -> None:
    modules, out = imports_of(command, "--help")
    assert f"pulsar-lookup-gateway {command}" in out
    own = f"pulsar_lookup_gateway.gateway.{COMMANDS[command][0]}"
    assert modules & COMMAND_MODULES <= {own, *_imported_by(own)}
    assert own in modules
    assert needed <= modules
    assert modules & not_needed == set()


def _imported_by(module: str) -> set[str]:
    """The command modules a command's module itself uses (run's --strict help is
    check-config's; dump's zk: URL check is seed's)."""
    shared = {
        "pulsar_lookup_gateway.gateway.run_command": {
            "pulsar_lookup_gateway.gateway.check_config_command"
        },
        "pulsar_lookup_gateway.gateway.dump_command": {
            "pulsar_lookup_gateway.gateway.seed_command"
        },
    }
    return shared.get(module, set())
