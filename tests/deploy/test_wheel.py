"""The wheel installs one top-level package, `pulsar_lookup_gateway`, and works as the zip
that spark-submit ships with --py-files: nothing of ours lands beside a user's own `lookup`."""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.processes import ROOT

IMPORT_NAME = "pulsar_lookup_gateway"
PIP_WHEEL = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # --no-build-isolation: the build backend (setuptools, wheel) comes with the dev extras, so
    # the build needs no package index.
    subprocess.run(
        [*PIP_WHEEL, "--wheel-dir", str(out), str(ROOT)],
        check=True,
        timeout=300,
        cwd=out,
    )
    (built,) = out.glob("pulsar_lookup_gateway-*.whl")
    return built


def dist_info_file(names: list[str], name: str) -> str:
    (path,) = [n for n in names if n.endswith(f".dist-info/{name}")]
    return path


def test_the_wheel_has_one_top_level_package(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        top_level = archive.read(dist_info_file(names, "top_level.txt")).decode().split()
    assert top_level == [IMPORT_NAME]
    outside = {n.split("/")[0] for n in names} - {IMPORT_NAME}
    assert len(outside) == 1 and outside.pop().endswith(".dist-info")
    # Every floor of the repository is inside, with its typing marker and protocol definition.
    for floor in ("gateway", "listeners", "lookup", "http_api", "zones", "metadata_store", "tls"):
        assert f"{IMPORT_NAME}/{floor}/__init__.py" in names
    assert f"{IMPORT_NAME}/py.typed" in names
    assert f"{IMPORT_NAME}/listeners/protocol/pulsar_api.proto" in names


def test_the_command_name_is_unchanged(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        entry_points = archive.read(dist_info_file(names, "entry_points.txt")).decode()
    parser = configparser.ConfigParser()
    parser.read_string(entry_points)
    assert dict(parser["console_scripts"]) == {
        "pulsar-lookup-gateway": f"{IMPORT_NAME}.gateway.cli:main"
    }


def test_the_wheel_imports_as_a_zip_under_its_one_name(wheel: Path, tmp_path: Path) -> None:
    # As spark-submit --py-files does: the archive on sys.path, no checkout in sight.
    probe = (
        "import importlib.util, sys\n"
        "import pulsar_lookup_gateway.serving.service as s\n"
        "import pulsar_lookup_gateway.zones.spark\n"
        "print(s.__file__)\n"
        "print(sorted(n for n in ('lookup', 'zones', 'console', 'gateway', 'listeners', 'tls',"
        " 'http_api', 'metadata_store') if importlib.util.find_spec(n) is not None))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(wheel)
    # The dependencies come from the environment's site-packages; ours must come from the zip
    # (an editable install's finder runs after the zip's entry on sys.path).
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    module_file, bare = done.stdout.splitlines()
    assert module_file.startswith(str(wheel)), module_file
    assert bare == "[]"
