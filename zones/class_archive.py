"""A JVM class-data archive (CDS) for the driver of a local resolve-zones run: Spark's driver
loads many thousands of classes at every start; mapped from an archive they cost less.
The first run that names an archive records it (the JVM writes it when it exits: that run is
slower); every later run uses it. A stale or foreign archive (another JDK or Spark) is ignored
by the JVM, which then loads classes as usual. Nothing here imports Spark.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

#: The JVM's own notes about the archive (thousands of lines while recording) stay off.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
#: How long a recording run waits for its JVM to write the archive and exit.
WRITE_DEADLINE_S = 180.0


class ClassArchiveError(ValueError):
    """The archive's path cannot be used (one line for the command line)."""


@dataclass(frozen=True)
class ClassArchive:
    path: Path
    #: This run records the archive (it did not exist when the run began); decided once, so
    #: that another run putting one in place meanwhile changes nothing for this one.
    records: bool

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
        if not recording.is_file() or recording.stat().st_size == 0 or self.path.exists():
            recording.unlink(missing_ok=True)
            return False
        os.replace(recording, self.path)
        return True
