"""The house rules, read from the sources with `ast`: every import between the project's
folders runs downward (README: Architecture), and the pure core stays free of I/O libraries."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Each floor and the floors it may import, top to bottom.
MAY_IMPORT: dict[str, frozenset[str]] = {
    "gateway": frozenset(
        {"zones", "http_api", "listeners", "metadata_store", "lookup", "tls", "console"}
    ),
    "zones": frozenset({"metadata_store", "lookup", "console"}),
    "http_api": frozenset({"listeners", "lookup", "tls"}),
    "listeners": frozenset({"metadata_store", "lookup", "tls"}),
    "metadata_store": frozenset({"lookup"}),
    "lookup": frozenset(),
    "tls": frozenset(),
    "console": frozenset(),
}
#: Libraries that do I/O or need a runtime of their own, kept out of pure modules.
IMPURE = frozenset({"kazoo", "aiohttp", "pyspark", "pyarrow", "matplotlib", "pandas"})
#: Folders and single modules that must stay pure, wherever they stand.
PURE = (
    "lookup",
    "console",
    "zones/pairs.py",
    "zones/answer_table.py",
    "listeners/protocol/wire.py",
    "tls/settings.py",
)


def sources(place: str) -> Iterator[Path]:
    path = ROOT / place
    yield from [path] if path.suffix == ".py" else sorted(path.rglob("*.py"))


def imported(path: Path) -> Iterator[tuple[int, str]]:
    """(line, top-level package) of every import in the file, at any depth of the code."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.partition(".")[0]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: relative import"
            yield node.lineno, (node.module or "").partition(".")[0]


def test_every_floor_of_the_house_is_listed() -> None:
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests", "bench"}
    assert packages == set(MAY_IMPORT)


@pytest.mark.parametrize("floor", sorted(MAY_IMPORT))
def test_imports_only_run_downward(floor: str) -> None:
    allowed = MAY_IMPORT[floor] | {floor}
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {package}"
        for path in sources(floor)
        for line, package in imported(path)
        if package in MAY_IMPORT and package not in allowed
    ]
    assert wrong == []


@pytest.mark.parametrize("place", PURE)
def test_pure_modules_import_no_io_library(place: str) -> None:
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {package}"
        for path in sources(place)
        for line, package in imported(path)
        if package in IMPURE
    ]
    assert wrong == []


def test_the_rules_catch_a_forbidden_import(tmp_path: Path) -> None:
    """The walker sees imports inside functions too, where a lazy import would hide."""
    module = tmp_path / "m.py"
    module.write_text(
        "def f():\n    from kazoo.client import KazooClient\n    import gateway.cli\n"
    )
    assert [package for _line, package in imported(module)] == ["kazoo", "gateway"]
