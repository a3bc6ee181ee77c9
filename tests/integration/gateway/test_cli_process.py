"""The installed command as a user runs it, and check-config's host checks (files, sockets)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from pulsar_lookup_gateway.gateway.cli import main
from tests.processes import DEMO, EXE


def test_check_config_reports_what_would_stop_run_with_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "g.conf"
    conf.write_text(
        f"metadataStoreUrl=file:{tmp_path / 'missing.json'}\n"
        "brokerServicePort=0\nwebServicePort=\nbrokerServicePortTls=0\n"
        f"tlsCertificateFilePath={tmp_path / 'c.pem'}\ntlsKeyFilePath={tmp_path / 'k.pem'}\n"
    )
    assert main(["check-config", "--config", str(conf)]) == 1
    out, err = capsys.readouterr()
    assert "pulsar+ssl" in out  # the table is printed all the same
    assert "2 problem(s) on this host would stop `run`" in err
    assert f"legacy TLS sockets: tlsCertificateFilePath {tmp_path / 'c.pem'}: cannot read" in err
    assert "metadataStoreUrl: cannot read snapshot" in err


def test_console_script_is_installed() -> None:
    result = subprocess.run(
        [EXE, "lookup", "orders-partition-0", "--metadata", f"file:{DEMO}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["bundle"] == "0x40000000_0x80000000"
