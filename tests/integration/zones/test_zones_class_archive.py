"""`resolve-zones`' class-data archive: the real command line twice in fresh processes (cold
JVMs), with the default archive in the user's cache: the first run records it and moves it
into place, the second maps it and answers the same."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from pulsar_lookup_gateway.zones.class_archive import CACHE_FOLDER
from tests.processes import EXE

DEMO = Path(__file__).resolve().parents[3] / "configs" / "demo-cluster.json"
#: JVMs that live seconds: the quick compiler only, one GC thread (every `java` reads it).
SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def resolve_zones(tmp_path: Path, out: str) -> str:
    result = subprocess.run(
        [
            EXE, "resolve-zones",
            "--metadata", f"file:{DEMO}",
            "--topics", str(tmp_path / "topics.txt"),
            "--zones", str(tmp_path / "zones.csv"),
            "--out", str(tmp_path / out),
            "--master", "local[1]",
        ],
        capture_output=True, text=True, timeout=240, check=False,
        env={
            **os.environ,
            "JDK_JAVA_OPTIONS": SHORT_LIVED_JVM,
            "XDG_CACHE_HOME": str(tmp_path / "cache"),
        },
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.mark.slow
@pytest.mark.timeout(420)
@pytest.mark.spark
def test_the_first_run_records_the_default_archive_and_the_next_uses_it(tmp_path: Path) -> None:
    (tmp_path / "zones.csv").write_text("dc,internal\ninternet,external,true\n")
    (tmp_path / "topics.txt").write_text("orders\nacme/payments/settlements\n")
    first = resolve_zones(tmp_path, "first")
    # said as it starts: what, where, what it costs, how to skip it
    announced = re.search(r"^class archive: recording .* into (\S+) \(.*\)$", first, re.MULTILINE)
    assert announced and "--no-class-archive skips it" in announced[0], first
    assert first.index(announced[0]) < first.index("class archive: recorded")
    recorded = re.search(
        r"^class archive: recorded (\S+) \(stopping and writing it took \d+ s\)$",
        first,
        re.MULTILINE,
    )
    assert recorded, first
    archive = Path(recorded[1])
    assert archive.parent == tmp_path / "cache" / CACHE_FOLDER
    assert archive.stat().st_size > 1_000_000  # Spark's classes, not a stub
    assert list(archive.parent.iterdir()) == [archive]  # no recording left behind
    second = resolve_zones(tmp_path, "second")
    assert f"class archive: used {archive}" in second
    assert announced[1] == str(archive) and "recording" not in second
    summary = (tmp_path / "first" / "summary.csv").read_text()
    assert summary and (tmp_path / "second" / "summary.csv").read_text() == summary
