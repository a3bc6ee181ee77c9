"""The test tree mirrors the floors, and tests share helpers through helper modules: a newcomer
finds a module's tests by its floor, and a test module can be moved or split alone."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
MIRRORED = ("unit", "integration")


def floors() -> set[str]:
    return {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests", "bench"}


def test_unit_and_integration_folders_are_floors() -> None:
    for kind in MIRRORED:
        folders = {p.name for p in (TESTS / kind).iterdir() if p.is_dir() and p.name[0] != "_"}
        assert folders <= floors(), f"tests/{kind}/ folders that are no floor: {folders - floors()}"
        # Only tests about the whole tree sit beside the floors.
        loose = {p.name for p in (TESTS / kind).glob("test_*.py")}
        assert loose <= {"test_layout.py", "test_test_tree.py", "test_docs.py"}, loose


def test_no_test_module_imports_another() -> None:
    found = []
    for path in TESTS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                last = node.module.rsplit(".", 1)[-1]
                if node.module.startswith("tests.") and last.startswith("test_"):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {node.module}")
    assert found == [], "move what they share into a helper module:\n" + "\n".join(found)
