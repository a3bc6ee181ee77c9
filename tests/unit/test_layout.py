"""The house rules, read from the sources with `ast`: the project is imported by its one name,
every import between the project's folders runs downward (docs/architecture.md), no modules
import each other in a circle, and the pure core stays free of I/O libraries."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The one top-level name the distribution installs; the floors are its subpackages.
IMPORT_NAME = "pulsar_lookup_gateway"

#: Each floor and the floors it may import, top to bottom.
MAY_IMPORT: dict[str, frozenset[str]] = {
    "gateway": frozenset(
        {
            "zones",
            "http_api",
            "brokers",
            "listeners",
            "serving",
            "metadata_store",
            "lookup",
            "tls",
            "console",
        }
    ),
    "zones": frozenset({"metadata_store", "lookup", "console"}),
    "http_api": frozenset({"brokers", "listeners", "serving", "lookup", "tls"}),
    "brokers": frozenset({"listeners", "serving", "lookup", "tls"}),
    "listeners": frozenset({"serving", "metadata_store", "lookup", "tls"}),
    "serving": frozenset({"metadata_store", "lookup"}),
    "metadata_store": frozenset({"lookup"}),
    "lookup": frozenset(),
    "tls": frozenset(),
    "console": frozenset(),
}
#: Where a floor may reach into `listeners`, by subpackage or module: the HTTP app takes the
#: network face (authentication, endpoints and client location, the routing decision), the
#: broker link the wire format, endpoints and who a request is made for (auth); neither takes
#: the binary server or the config.
LISTENERS_FACE: dict[str, tuple[str, ...]] = {
    "http_api": ("auth", "endpoints", "routing", "explain"),  # explain: the routing, told
    "brokers": ("protocol", "endpoints", "auth"),
}
#: Libraries that do I/O or need a runtime of their own, kept out of pure modules.
IMPURE = frozenset({"kazoo", "aiohttp", "pyspark", "pyarrow", "matplotlib", "pandas"})
#: What the pure core holds none of: besides I/O libraries, no event loop, threads, sockets,
#: process-wide switches (gc), logging or metrics registries: those are the service floor's.
RUNTIME = IMPURE | frozenset(
    {
        "asyncio",
        "gc",
        "threading",
        "socket",
        "ssl",
        "selectors",
        "subprocess",
        "logging",
        "prometheus_client",
        "uvloop",
    }
)
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


def imported_modules(path: Path) -> Iterator[tuple[int, str]]:
    """(line, dotted module) of every import in the file, at any depth of the code."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: relative import"
            yield node.lineno, node.module or ""


def imported_names(path: Path) -> Iterator[str]:
    """Every dotted name an import of the file may load: the module, and for `from M import N`
    also `M.N` (N may be a submodule)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def module_graph() -> dict[str, set[str]]:
    """Each module of the package (dotted, under the import name) and the project's modules it
    imports, TYPE_CHECKING and function-level imports included."""
    paths = {
        ".".join((IMPORT_NAME, *path.relative_to(ROOT).with_suffix("").parts)).removesuffix(
            ".__init__"
        ): path
        for floor in MAY_IMPORT
        for path in sources(floor)
    }
    return {
        name: {imported for imported in imported_names(path) if imported in paths} - {name}
        for name, path in paths.items()
    }


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def imported(path: Path) -> Iterator[tuple[int, str]]:
    """(line, floor or outside package) of every import: `pulsar_lookup_gateway.lookup.x` is
    the floor `lookup`; anything else is named by its top-level package."""
    for line, module in imported_modules(path):
        top, _, rest = module.partition(".")
        yield line, rest.partition(".")[0] if top == IMPORT_NAME and rest else top


def test_every_floor_of_the_house_is_listed() -> None:
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests", "bench", IMPORT_NAME}
    assert packages == set(MAY_IMPORT)


def test_the_import_name_holds_every_floor() -> None:
    """Each floor is reachable as `pulsar_lookup_gateway.<floor>`, and as nothing else."""
    package = ROOT / IMPORT_NAME
    assert {p.name for p in package.iterdir() if (p / "__init__.py").exists()} == set(MAY_IMPORT)
    for floor in MAY_IMPORT:
        assert (package / floor).resolve() == (ROOT / floor).resolve()


@pytest.mark.parametrize("place", [*sorted(MAY_IMPORT), "tests", "bench"])
def test_the_project_is_imported_by_its_one_name(place: str) -> None:
    """A bare `import lookup` would load a second copy of the module, or another project's."""
    bare = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sources(place)
        for line, module in imported_modules(path)
        if module.partition(".")[0] in MAY_IMPORT
    ]
    assert bare == []


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


def test_no_modules_import_each_other_in_a_circle() -> None:
    """Within a floor too: a circle (even one only a type checker follows) means two modules
    that cannot be read, tested or moved apart."""
    graph = module_graph()
    assert f"{IMPORT_NAME}.listeners.binary.connection" in graph  # (the walk found the package)
    assert circles(graph) == []


def test_the_circle_finder_finds_circles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    assert sorted(circles(graph)) == [["a", "b", "c"], ["d", "e"]]
    assert circles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("place", PURE)
def test_pure_modules_import_no_io_library(place: str) -> None:
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {package}"
        for path in sources(place)
        for line, package in imported(path)
        if package in IMPURE
    ]
    assert wrong == []


def test_the_pure_core_holds_no_runtime() -> None:
    """lookup/ is what the service and the Spark job share: no loop, thread, logger or
    metric in it, so it runs the same in a Spark executor as in the gateway."""
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {package}"
        for path in sources("lookup")
        for line, package in imported(path)
        if package in RUNTIME
    ]
    assert wrong == []


@pytest.mark.parametrize("floor", sorted(LISTENERS_FACE))
def test_floors_reach_into_listeners_only_through_its_face(floor: str) -> None:
    """Checked module by module: `http_api` and `brokers` import only the parts of
    `listeners` named in LISTENERS_FACE."""
    listeners = f"{IMPORT_NAME}.listeners"
    face = tuple(f"{listeners}.{part}" for part in LISTENERS_FACE[floor])
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sources(floor)
        for line, module in imported_modules(path)
        if (module == listeners or module.startswith(f"{listeners}."))
        and not any(module == part or module.startswith(f"{part}.") for part in face)
    ]
    assert wrong == []


def test_http_api_reads_no_broker_protobuf() -> None:
    """The broker link hands the HTTP app plain values (brokers.answers); the wire
    format stays below it."""
    wire = f"{IMPORT_NAME}.listeners.protocol"
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sources("http_api")
        for line, module in imported_modules(path)
        if module == wire or module.startswith(f"{wire}.") or module.startswith("google.protobuf")
    ]
    assert wrong == []


def test_the_rules_catch_a_forbidden_import(tmp_path: Path) -> None:
    """The walker sees imports inside functions too, where a lazy import would hide."""
    module = tmp_path / "m.py"
    module.write_text(
        "def f():\n    from kazoo.client import KazooClient\n"
        "    import pulsar_lookup_gateway.gateway.cli\n    import lookup\n"
    )
    assert [package for _line, package in imported(module)] == ["kazoo", "gateway", "lookup"]
