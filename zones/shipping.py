"""The job ships itself: what Spark's Python workers need of this package, as one archive.

A cluster's executors run a Python that has PySpark's own needs (pyarrow) but seldom this
package. Before the job's first Python function or data source is pickled, `ship` adds one zip
to the SparkContext with `addArchive`: this package's modules and the distributions its Spark
side imports beyond PySpark's (pydantic, which the lookup core parses znodes with, and kazoo,
which a data source reading `zk:` needs), as installed in the driver's environment. Spark
unpacks it beside every executor's files (pydantic's core is a compiled module, which a zip on
`sys.path` could not load), and each Python worker puts it on `sys.path` as it does a `--py-files`
zip. Its compiled modules fit the executors when they run the driver's Python minor version (PySpark
requires that anyway) on the same platform (Linux x86_64 both sides, say).

The archive is built once per process and named by its content, so a job that ships it to a
session that has it already adds nothing.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.metadata
import os
import re
import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PACKAGE = "pulsar_lookup_gateway"
#: The distributions the Spark side imports beyond PySpark's own needs; their requirements
#: (as installed here) go along.
SHIPPED_DISTRIBUTIONS = ("pydantic", "kazoo")
#: What every PySpark worker has already (PySpark's own SQL needs): never shipped.
PYSPARK_NEEDS = frozenset({"pyspark", "py4j", "pyarrow", "numpy", "pandas"})
_REQUIREMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

_built: Path | None = None


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _distribution_closure(names: tuple[str, ...]) -> list[importlib.metadata.Distribution]:
    """The installed distributions `names` and their requirements, recursively: extras and
    requirements not installed here (a marker for another Python) left out."""
    found: dict[str, importlib.metadata.Distribution] = {}
    pending = list(names)
    while pending:
        name = _normalized(pending.pop())
        if name in found or name in PYSPARK_NEEDS:
            continue
        try:
            distribution = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        found[name] = distribution
        for requirement in distribution.requires or ():
            marker = requirement.partition(";")[2]
            if "extra" in marker:
                continue
            match = _REQUIREMENT_NAME.match(requirement)
            if match:
                pending.append(match.group(0))
    return [found[name] for name in sorted(found)]


def _distribution_files(
    distribution: importlib.metadata.Distribution,
) -> Iterator[tuple[Path, str]]:
    """(file, name in the archive) of an installed distribution's modules and metadata."""
    for entry in distribution.files or ():
        parts = entry.parts
        if not parts or parts[0] == ".." or "__pycache__" in parts or entry.suffix == ".pyc":
            continue
        file = Path(str(distribution.locate_file(entry)))
        if file.is_file():
            yield file, "/".join(parts)


def _package_files() -> Iterator[tuple[Path, str]]:
    """This package's modules, the linked floors followed (a checkout links them in)."""
    # This module is <package>/zones/shipping.py as the import system found it (symlinks not
    # followed: a checkout links zones/ in), so the package is two folders up; no import of it.
    root = Path(__file__).parent.parent.resolve()
    for folder, dirs, files in os.walk(root, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
        relative = Path(folder).relative_to(root)
        for name in sorted(files):
            if name.endswith(".py"):
                yield Path(folder) / name, "/".join((PACKAGE, *relative.parts, name))


def archive_entries() -> list[tuple[Path, str]]:
    """Every file the archive holds, with its name there (sorted, each name once)."""
    entries = dict((name, file) for file, name in _package_files())
    for distribution in _distribution_closure(SHIPPED_DISTRIBUTIONS):
        for file, name in _distribution_files(distribution):
            if not name.startswith(f"{PACKAGE}/"):
                entries.setdefault(name, file)
    return [(entries[name], name) for name in sorted(entries)]


def build_archive(directory: Path) -> Path:
    """The archive in `directory`, named by a hash of its content."""
    digest = hashlib.sha256()
    partial = directory / "building.zip"
    # Stored, not deflated: built at every job start, and a few MB cross a cluster's network fast.
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_STORED) as archive:
        for file, name in archive_entries():
            data = file.read_bytes()
            digest.update(name.encode() + b"\0" + data)
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
    target = directory / f"{PACKAGE}-{digest.hexdigest()[:16]}.zip"
    os.replace(partial, target)
    return target


def executor_archive() -> Path:
    """This process's archive, built at the first call (removed when the process exits)."""
    global _built
    if _built is None or not _built.is_file():
        directory = Path(tempfile.mkdtemp(prefix="plg-ship-"))
        atexit.register(shutil.rmtree, directory, True)
        _built = build_archive(directory)
    return _built


def ship(spark: Any) -> str:
    """Makes this package importable in the Python workers of `spark`'s SparkContext (or of
    `spark`, a SparkContext), the
    executors' and those the driver starts for a data source: its archive added and named among
    the context's Python includes (as `--py-files` names a zip; an archive is unpacked where its
    name points). Call it before pickling a function or registering a data source (Spark hands
    each the includes of that moment). Returns the archive's name; a second call adds nothing."""
    context = getattr(spark, "sparkContext", spark)  # a SparkSession, or its SparkContext
    archive = executor_archive()
    includes = context._python_includes  # what Spark's workers put on sys.path
    if archive.name not in includes:
        context.addArchive(str(archive))
        includes.append(archive.name)
    return archive.name
