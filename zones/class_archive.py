"""A JVM class-data archive (CDS) for the driver of a local resolve-zones run: Spark's driver
loads many thousands of classes at every start; mapped from an archive they cost less.
The first run that names an archive records it (the JVM writes it when it exits: that run is
slower); every later run uses it. A stale or foreign archive (another JDK or Spark) is ignored
by the JVM, which then loads classes as usual. Nothing here imports Spark.

By default the archive lives in the user's cache, named by the Java and the Spark installation
that record it (`default_archive`), so that a run never hands the JVM an archive of another
installation (the JVM would ignore it, and nothing would record a fitting one).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

#: The JVM's own notes about the archive (thousands of lines while recording) stay off.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
#: How long a recording run waits for its JVM to write the archive and exit.
WRITE_DEADLINE_S = 180.0
T = TypeVar("T")

#: The default archives' folder under the user's cache ($XDG_CACHE_HOME, else ~/.cache).
CACHE_FOLDER = "pulsar-lookup-gateway"
#: Default archives kept there (each ~190 MB, one per Java and Spark installation): recording
#: a new one removes the older ones beyond this.
KEPT_ARCHIVES = 2
#: A recording its JVM did not finish (killed) is removed after this long.
STALE_RECORDING_S = 3600.0
#: After a recording run whose JVM exited well but wrote nothing usable, later runs map and
#: record nothing for this long (a JVM that cannot record would make every run pay for it).
FAILED_PAUSE_S = 86400.0
#: Options that choose the JVM's archive themselves: the default one stays out of their way.
OWN_ARCHIVE_OPTIONS = ("SharedArchiveFile", "ArchiveClassesAtExit", "-Xshare:off")
#: Environment variables every `java` reads its options from, besides the command line.
JAVA_OPTION_VARIABLES = ("JDK_JAVA_OPTIONS", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS")


class ClassArchiveError(ValueError):
    """The archive's path cannot be used (one line for the command line)."""


@dataclass(frozen=True)
class ClassArchive:
    path: Path
    #: This run records the archive (it did not exist when the run began); decided once, so
    #: that another run putting one in place meanwhile changes nothing for this one.
    records: bool
    #: The archive is a default one in the user's cache: its folder is ours to tidy.
    cached: bool = False

    @classmethod
    def at(cls, text: str) -> ClassArchive:
        """The archive at `text`, checked: Spark splits the JVM's options at white space and
        reads quotes and backslashes in them, so the full path may hold none of those."""
        path = Path(text).expanduser().absolute()
        if not text or any(c.isspace() or c in "'\"\\" for c in str(path)):
            raise ClassArchiveError(
                f"{str(path)!r}: a path without white space, quotes or backslashes is needed"
            )
        if path.exists() and not path.is_file():
            raise ClassArchiveError(f"{text}: not a file")
        if not path.parent.is_dir():
            raise ClassArchiveError(f"{text}: the folder {path.parent} does not exist")
        return cls(path, records=not path.is_file())

    @property
    def recording(self) -> Path:
        """Where this process's JVM writes a new archive, moved to `path` once complete (so
        that no run ever maps a half-written one)."""
        return self.path.with_name(f"{self.path.name}.{os.getpid()}.recording")

    def java_options(self) -> str:
        """The driver JVM's options: use the archive, or record one at exit."""
        if self.records:
            return f"-XX:ArchiveClassesAtExit={self.recording} {QUIET}"
        return f"-XX:SharedArchiveFile={self.path} -Xshare:auto {QUIET}"

    def finish(self, jvm: subprocess.Popen[bytes] | None) -> bool:
        """After a recording run's session stopped: wait for its JVM to write the archive and
        exit, then move the archive into place (not over one another run put there first).
        True when it was; a JVM that failed or overran leaves no file behind."""
        recording = self.recording
        if jvm is not None:
            if jvm.stdin is not None:
                jvm.stdin.close()  # Spark's gateway JVM exits when its stdin closes
            try:
                exited_well = jvm.wait(WRITE_DEADLINE_S) == 0
            except subprocess.TimeoutExpired:
                jvm.kill()
                jvm.wait()
                exited_well = False
            if not exited_well:
                recording.unlink(missing_ok=True)
                return False
        if self.path.exists():
            recording.unlink(missing_ok=True)
            return False
        if not recording.is_file() or recording.stat().st_size == 0:
            recording.unlink(missing_ok=True)
            if self.cached:
                _mark_failed(self.path, "the JVM that recorded it exited well but wrote none")
            return False
        os.replace(recording, self.path)
        if self.cached:
            _tidy(self.path)
        return True


def start_mapping(
    archive: ClassArchive | None, start: Callable[[ClassArchive | None], T]
) -> tuple[T, ClassArchive | None, str]:
    """`start(archive)` (a JVM that maps or records `archive`), and when that fails,
    `start(None)`: a damaged archive (say, truncated) can crash the JVM as it maps it, a class
    path the JVM cannot archive (a folder that is not empty) stops it as it starts to record,
    and neither may fail the job. (result, the archive used, a note when it was given up: a
    default one is removed so that the next run records it anew, or, when recording failed,
    not tried again for a while). A failure without the archive is raised as it is."""
    if archive is None:
        return start(None), None, ""
    try:
        return start(archive), archive, ""
    except Exception as exc:  # PySpark's "Java gateway process exited", whatever its cause
        failure = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    result = start(None)
    note = f"the JVM did not start with {archive.path} ({failure}): started without it"
    if archive.cached and archive.records:
        _mark_failed(archive.path, f"the JVM did not start to record it ({failure})")
    elif archive.cached:
        with contextlib.suppress(OSError):
            archive.path.unlink()
            note += "; removed it, the next run records it anew"
    return result, None, note


def default_archive(
    spark_home: Path,
    spark_version: str,
    java_options: str = "",
    env: Mapping[str, str] | None = None,
) -> tuple[ClassArchive | None, str]:
    """The default archive of the driver JVM that `spark_home`'s launcher starts, in the user's
    cache, and why there is none ("" when the user's JVM options choose an archive). Never
    raises: a cache folder that cannot be made or written, a Java not found, or a class path
    the JVM cannot archive, means none."""
    env = os.environ if env is None else env
    chosen = " ".join([java_options, *(env.get(name, "") for name in JAVA_OPTION_VARIABLES)])
    if any(option in chosen for option in OWN_ARCHIVE_OPTIONS):
        return None, ""
    for folder in class_path_folders(spark_home, env):
        with contextlib.suppress(OSError):
            if folder.is_dir() and any(folder.iterdir()):
                return None, (
                    f"{folder} is on the driver's class path and not empty: "
                    "Java archives no classes then"
                )
    java = _java(env)
    if java is None:
        return None, "no java found (JAVA_HOME, PATH)"
    folder = Path("~", ".cache", CACHE_FOLDER)
    try:
        cache = env.get("XDG_CACHE_HOME", "")  # a relative one is to be ignored (XDG's rule)
        folder = (Path(cache) if os.path.isabs(cache) else Path.home() / ".cache") / CACHE_FOLDER
        name = f"spark-{_safe(spark_version)}-java-{_safe(_java_version(java))}-"
        name += f"{_installations_digest(java, spark_home, env)}.jsa"
        folder.mkdir(parents=True, exist_ok=True)
        archive = ClassArchive.at(str(folder / name))
        if not archive.records:
            return ClassArchive(archive.path, records=False, cached=True), ""
        if _failed_recently(archive.path):
            marker = _failed_marker(archive.path)
            why = marker.read_text(errors="replace").strip() or "recording it failed lately"
            return None, f"{why}; remove {marker} to try again"
        if not os.access(folder, os.W_OK | os.X_OK):
            return None, f"{folder} is not writable"
        return ClassArchive(archive.path, records=True, cached=True), ""
    except (OSError, RuntimeError, ClassArchiveError) as exc:  # RuntimeError: no home folder
        cause = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        return None, f"{folder}: {cause}"


def class_path_folders(spark_home: Path, env: Mapping[str, str]) -> list[Path]:
    """The folders Spark's launcher puts on the driver's class path (its configuration
    folder, Hadoop's and YARN's when set): a folder that is not empty stops a JVM that
    records an archive ("Cannot have non-empty directory in paths")."""
    folders = [Path(env.get("SPARK_CONF_DIR") or spark_home / "conf")]
    folders += [Path(env[name]) for name in ("HADOOP_CONF_DIR", "YARN_CONF_DIR") if env.get(name)]
    return folders


def _java(env: Mapping[str, str]) -> Path | None:
    """The java Spark's launcher runs (bin/spark-class): $JAVA_HOME/bin/java, else PATH's."""
    home = env.get("JAVA_HOME", "")
    found = f"{home}/bin/java" if home else shutil.which("java", path=env.get("PATH"))
    if not found or not os.path.isfile(found):
        return None
    return Path(os.path.realpath(found))


def _java_version(java: Path) -> str:
    """From the JDK's `release` file (no JVM started): JAVA_RUNTIME_VERSION, else JAVA_VERSION."""
    try:
        release = (java.parent.parent / "release").read_text(errors="replace")
    except OSError:
        return "unknown"
    for key in ("JAVA_RUNTIME_VERSION", "JAVA_VERSION"):
        found = re.search(rf'^{key}="([^"]*)"', release, re.MULTILINE)
        if found:
            return found[1]
    return "unknown"


def _installations_digest(java: Path, spark_home: Path, env: Mapping[str, str]) -> str:
    """A digest of what the archive's validity rests on: the JVM (its path and library) and
    the driver's class path (Spark's jars: names, sizes, times), so that an upgrade in place
    gets an archive of its own."""
    digest = hashlib.sha256()
    home = java.parent.parent
    for path in (java, *sorted(home.glob("lib/server/libjvm.*"))):
        stat = path.stat()
        digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    jars = spark_home / "jars"
    digest.update(f"{os.path.realpath(jars)}\n".encode())
    if jars.is_dir():
        for jar in sorted(jars.iterdir()):
            stat = jar.stat()
            digest.update(f"{jar.name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    for folder in class_path_folders(spark_home, env):  # on the class path, so in the archive
        digest.update(f"{os.path.realpath(folder)}\n".encode())
    digest.update(env.get("PYSPARK_SUBMIT_ARGS", "").encode())
    return digest.hexdigest()[:16]


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]", "_", text)[:40]


def _failed_marker(path: Path) -> Path:
    return path.with_name(f"{path.name}.failed")


def _mark_failed(path: Path, why: str) -> None:
    with contextlib.suppress(OSError):  # the next run tries again
        _failed_marker(path).write_text(f"{why}\n")


def _failed_recently(path: Path) -> bool:
    try:
        return time.time() - _failed_marker(path).stat().st_mtime < FAILED_PAUSE_S
    except OSError:
        return False


def _tidy(kept: Path) -> None:
    """The cache folder bounded: the newest KEPT_ARCHIVES archives (`kept` among them), no
    recording older than STALE_RECORDING_S, no old failure marker. Best effort."""
    folder = kept.parent
    try:
        archives = sorted(
            (p for p in folder.glob("spark-*.jsa") if p != kept),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
        removed = archives[KEPT_ARCHIVES - 1 :]
        now = time.time()
        for pattern, age in (("spark-*.jsa.*.recording", STALE_RECORDING_S),
                             ("spark-*.jsa.failed", FAILED_PAUSE_S)):  # fmt: skip
            removed += [p for p in folder.glob(pattern) if now - p.stat().st_mtime > age]
        for path in removed:
            path.unlink(missing_ok=True)
    except OSError:
        pass
