"""The archive resolve-zones ships to the executors (zones.shipping), and zones given as rows."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import pytest

from pulsar_lookup_gateway.zones.pairs import Zone, ZonesError, zones_from_rows
from pulsar_lookup_gateway.zones.shipping import build_archive, executor_archive

DEMO = Path(__file__).resolve().parents[3] / "configs" / "demo-cluster.json"


def test_the_archive_holds_the_package_and_what_pyspark_lacks(tmp_path: Path) -> None:
    archive = executor_archive()
    assert executor_archive() == archive  # built once per process
    names = zipfile.ZipFile(archive).namelist()
    tops = {name.split("/")[0] for name in names}
    assert "pulsar_lookup_gateway/zones/spark.py" in names
    assert "pulsar_lookup_gateway/lookup/resolve.py" in names
    assert {"pydantic", "pydantic_core", "kazoo", "annotated_types"} <= tops
    assert any(n.startswith("pydantic_core/") and n.endswith(".so") for n in names)
    assert not tops & {"pyspark", "pyarrow", "numpy", "pandas", "py4j"}  # the executors' own
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # Named by content: the same files give the same name.
    again = build_archive(tmp_path)
    assert again.name == archive.name


def test_a_python_without_the_package_resolves_from_the_unpacked_archive(tmp_path: Path) -> None:
    """As an executor's Python worker: the base interpreter without any site-packages (no
    pydantic, no kazoo, no package), with the unpacked archive on sys.path."""
    with zipfile.ZipFile(executor_archive()) as archive:
        archive.extractall(tmp_path / "unpacked")
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    bare = [str(base), "-I", "-S", "-c"]  # no site-packages at all
    without = subprocess.run([*bare, "import pydantic"], capture_output=True, timeout=60)
    assert without.returncode != 0  # the executor-like Python lacks pydantic on its own
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(1, {str(tmp_path / "unpacked")!r})
        from pulsar_lookup_gateway.lookup.resolve import ResolvePolicy
        from pulsar_lookup_gateway.lookup.view import ClusterView
        from pulsar_lookup_gateway.zones.pairs import Zone, resolve_pairs
        import kazoo.client
        nodes = json.load(open({str(DEMO)!r}))
        view = ClusterView.from_snapshot(nodes)
        zones = [Zone("dc", "internal")]
        columns = resolve_pairs(["acme/payments/x"], zones, view, ResolvePolicy())
        print(columns["response"][0], columns["broker_id"][0])
        """
    )
    result = subprocess.run([*bare, script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[0] == "connect"


def test_zones_from_rows_are_checked_as_the_zones_file() -> None:
    rows = [("dc", "internal"), ("internet", "external", True), ("lab", "lab", None)]
    assert zones_from_rows(rows, "zones") == [
        Zone("dc", "internal"),
        Zone("internet", "external", True),
        Zone("lab", "lab", False),
    ]
    assert zones_from_rows([("a", "b", "yes")], "zones") == [Zone("a", "b", True)]
    cases: list[tuple[list[tuple[Any, ...]], str]] = [
        ([], "no zones"),
        ([("a/b", "internal")], "zones row 1: zone 'a/b'"),
        ([("a", "internal"), ("a", "external")], "zones row 2: zone 'a' is listed twice"),
        ([("a", "in ternal")], "listener 'in ternal'"),
        ([("a",)], "got 1 fields"),
        ([("a", "internal", "maybe")], "tls 'maybe' is not true or false"),
    ]
    for bad, problem in cases:
        with pytest.raises(ZonesError, match=problem):
            zones_from_rows(bad, "zones")
