"""resolve-zones' checks of its local inputs and outputs, made before Spark starts.

Each check raises ZonesError with one line naming the path (and the line or file inside it) at
fault, so that a typo costs a second, not a JVM start and a Spark stack trace. Only local paths
are checked; a Hadoop path (hdfs://, s3a://, ...) or a glob pattern is left to Spark. Parquet
footers are read with pyarrow (no Spark); everything else with the standard library.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from pulsar_lookup_gateway.zones.pairs import ZonesError

#: Compressed text Spark reads transparently and the standard library can open.
_OPENERS: dict[str, Callable[..., Any]] = {".gz": gzip.open, ".bz2": bz2.open}
#: Compressed text this module cannot look into (Spark can): only its presence is checked.
_OPAQUE = (".deflate", ".snappy", ".lz4", ".zst", ".zstd", ".lzo", ".br")
_GLOB = frozenset("*?[{")
#: What a `partitionBy("zone")` Parquet output directory holds (entries starting "_" or "."
#: are Spark's markers and checksums).
_ANSWER_ENTRY = "zone="


def local_path(path: str) -> Path | None:
    """The local file a Spark path names (plain or file:), or None for another filesystem."""
    if path.startswith("file:"):
        return Path(path[len("file:") :].removeprefix("//"))
    if "://" in path:
        return None
    return Path(path)


def _hidden(name: str) -> bool:
    return name.startswith((".", "_"))  # Spark skips these when it reads a directory


def data_files(directory: Path) -> list[Path]:
    """The files Spark would read from a directory: hidden names and _markers skipped, at any
    depth (a partitioned layout nests its files)."""
    found: list[Path] = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not _hidden(d))
        found += [Path(root) / f for f in sorted(files) if not _hidden(f)]
    return found


def check_topics(path: str, topics_format: str) -> None:
    """The topics input exists, can be read, holds at least one topic and, for Parquet and
    CSV, a `topic` column. ZonesError (one line) otherwise."""
    local = local_path(path)
    if local is None or _GLOB & set(path):
        return
    if not local.exists():
        raise ZonesError(f"{path} does not exist")
    if local.is_dir():
        files = data_files(local)
        if not files:
            raise ZonesError(f"{path} is a directory without data files")
    else:
        files = [local]
    for file in files:
        _check_readable(file)
    if topics_format == "parquet":
        _check_parquet(path, files)
    elif topics_format == "csv":
        _check_csv(path, files)
    elif not any(_has_text_line(file) for file in files):
        raise ZonesError(f"{path}: no topics (the input is empty or has only blank lines)")


def _check_readable(file: Path) -> None:
    try:
        with file.open("rb") as handle:
            handle.read(1)
    except OSError as exc:
        raise ZonesError(f"cannot read {file}: {exc.strerror or exc}") from None


def _open_text(file: Path) -> IO[str] | None:
    """The file as text (decompressed where the standard library can), or None when it cannot
    be looked into."""
    suffix = file.suffix.lower()
    if suffix in _OPAQUE:
        return None
    opener = _OPENERS.get(suffix)
    if opener is not None:
        binary: IO[bytes] = opener(file, "rb")
        return io.TextIOWrapper(binary, encoding="utf-8", errors="replace", newline="")
    return file.open(encoding="utf-8", errors="replace", newline="")


def _lines(file: Path) -> Iterator[str] | None:
    try:
        handle = _open_text(file)
    except OSError as exc:
        raise ZonesError(f"cannot read {file}: {exc.strerror or exc}") from None
    if handle is None:
        return None
    return _read_lines(file, handle)


def _read_lines(file: Path, handle: IO[str]) -> Iterator[str]:
    with handle:
        try:
            yield from handle
        except (OSError, EOFError) as exc:  # a truncated or corrupt .gz/.bz2
            raise ZonesError(f"cannot read {file}: {exc}") from None


def _has_text_line(file: Path) -> bool:
    lines = _lines(file)
    if lines is None:
        return True  # compressed in a way only Spark reads: assume it holds topics
    return any(line.strip() for line in lines)


def _check_csv(path: str, files: list[Path]) -> None:
    """Spark reads CSV with header=true: each file's first line names the columns."""
    for file in files:
        lines = _lines(file)
        if lines is None:
            return  # compressed in a way only Spark reads
        reader = csv.reader(lines)
        header = next(reader, None)
        if header is None:
            continue
        if "topic" not in header:
            columns = ", ".join(header) or "none"
            raise ZonesError(f"{file}: no 'topic' column (columns: {columns})")
        if any(any(cell.strip() for cell in row) for row in reader):
            return
    raise ZonesError(f"{path}: no topics (no CSV rows below the header line)")


def _check_parquet(path: str, files: list[Path]) -> None:
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    rows = 0
    columns: list[str] = []
    with_topic = False
    for file in files:  # footers only; stops at the first file that shows what is needed
        try:
            parquet = pq.ParquetFile(file)
        except Exception as exc:  # pyarrow's ArrowInvalid, OSError: not a Parquet file
            raise ZonesError(f"{file}: not a Parquet file ({exc})") from None
        names = list(parquet.schema_arrow.names)
        columns = columns or names
        with_topic = with_topic or "topic" in names
        rows += parquet.metadata.num_rows
        if with_topic and rows:
            return
    if not with_topic:
        raise ZonesError(f"{path}: no 'topic' column (columns: {', '.join(columns) or 'none'})")
    raise ZonesError(f"{path}: no topics (the Parquet input has no rows)")


def check_outputs(out: Path, answers: str) -> None:
    """`out` can be created or written, its summary.csv and share.png are not directories, and
    the answers path (written with Spark's overwrite mode, which deletes what is there) is new,
    empty, or the answers of an earlier run. ZonesError (one line, naming the option) otherwise."""
    _check_writable_dir(out, "--out")
    for name in ("summary.csv", "share.png"):
        target = out / name
        if target.is_dir():
            raise ZonesError(f"--out: {target} is a directory; it would be overwritten as a file")
    local = local_path(answers)
    if local is None:
        return
    option = "--out" if local == out / "answers" else "--answers"
    if local.exists() and not local.is_dir():
        raise ZonesError(f"{option}: {local} exists and is not a directory")
    if local.is_dir():
        foreign = sorted(
            e.name
            for e in local.iterdir()
            if not (_hidden(e.name) or e.name.startswith(_ANSWER_ENTRY))
        )
        if foreign:
            shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
            raise ZonesError(
                f"{option}: {local} holds other files than answers of an earlier run ({shown}); "
                "refusing to overwrite it (choose a new or empty directory)"
            )
        if not os.access(local, os.W_OK | os.X_OK):
            raise ZonesError(f"{option}: {local} is not writable")
    else:
        _check_writable_dir(local, option)


def _check_writable_dir(directory: Path, option: str) -> None:
    """`directory` is a writable directory, or can be created (its nearest existing ancestor
    is a writable directory)."""
    if directory.exists():
        if not directory.is_dir():
            raise ZonesError(f"{option}: {directory} exists and is not a directory")
        if not os.access(directory, os.W_OK | os.X_OK):
            raise ZonesError(f"{option}: {directory} is not writable")
        return
    ancestor = directory.absolute().parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ZonesError(f"{option}: cannot create {directory}: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ZonesError(f"{option}: cannot create {directory}: {ancestor} is not writable")
