"""The executors' Python checked before a job hands Spark a function (zones.executors), on the
tests' local session with another Python for its workers: one without pyarrow, and one that
does not exist. Either is one line naming the setting, not a JVM trace."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pulsar_lookup_gateway.zones.executors import ExecutorPythonError, prepare

pytestmark = [
    pytest.mark.spark,
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
]


def bare_python(where: Path) -> Path:
    """A venv of this interpreter with nothing installed (no pyarrow)."""
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(where)], check=True, timeout=60)
    return where / "bin" / "python3"


def test_workers_python_that_cannot_run_the_job_is_one_line(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    context = spark.sparkContext
    chosen = context.pythonExec
    try:
        bare = bare_python(tmp_path / "bare")
        monkeypatch.setenv("PYSPARK_PYTHON", str(bare))
        with pytest.raises(ExecutorPythonError) as caught:
            prepare(spark)
        said = str(caught.value)
        assert said.startswith(f"the executors' Python ({bare}, Python ")
        assert "cannot import pyarrow" in said and "set spark.pyspark.python" in said
        assert "\n" not in said

        missing = tmp_path / "no-such-python"
        monkeypatch.setenv("PYSPARK_PYTHON", str(missing))
        with pytest.raises(ExecutorPythonError) as caught:
            prepare(spark)
        said = str(caught.value)
        assert said.startswith(f"the executors cannot run Python '{missing}' (")
        assert "set spark.pyspark.python" in said and "\n" not in said
    finally:
        context.pythonExec = chosen
