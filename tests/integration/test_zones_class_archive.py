"""`resolve-zones --class-archive`: the real command line twice in fresh processes (cold JVMs):
the first run records the archive and moves it into place, the second maps it and answers the
same."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.processes import EXE

DEMO = Path(__file__).resolve().parents[2] / "configs" / "demo-cluster.json"
#: JVMs that live seconds: the quick compiler only, one GC thread (every `java` reads it).
SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def resolve_zones(tmp_path: Path, out: str, archive: Path) -> str:
    result = subprocess.run(
        [
            EXE, "resolve-zones",
            "--metadata", f"file:{DEMO}",
            "--topics", str(tmp_path / "topics.txt"),
            "--zones", str(tmp_path / "zones.csv"),
            "--out", str(tmp_path / out),
            "--master", "local[1]",
            "--class-archive", str(archive),
        ],
        capture_output=True, text=True, timeout=240, check=False,
        env={**os.environ, "JDK_JAVA_OPTIONS": SHORT_LIVED_JVM},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.mark.timeout(420)
def test_the_first_run_records_the_archive_and_the_next_uses_it(tmp_path: Path) -> None:
    (tmp_path / "zones.csv").write_text("dc,internal\ninternet,external,true\n")
    (tmp_path / "topics.txt").write_text("orders\nacme/payments/settlements\n")
    archive = tmp_path / "spark.jsa"
    first = resolve_zones(tmp_path, "first", archive)
    assert f"class archive: recorded {archive}" in first
    assert archive.stat().st_size > 1_000_000  # Spark's classes, not a stub
    assert not list(tmp_path.glob("spark.jsa.*.recording"))
    second = resolve_zones(tmp_path, "second", archive)
    assert f"class archive: used {archive}" in second
    summary = (tmp_path / "first" / "summary.csv").read_text()
    assert summary and (tmp_path / "second" / "summary.csv").read_text() == summary
