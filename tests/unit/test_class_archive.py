"""The class-data archive's path rules and its record -> use life cycle (no JVM here: the
integration test runs the real one)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pulsar_lookup_gateway.zones.class_archive import ClassArchive, ClassArchiveError


@pytest.mark.parametrize("name", ["has space.jsa", "quo'te.jsa", 'dq"uote.jsa', "back\\slash", ""])
def test_a_path_the_jvm_would_split_is_refused(tmp_path: Path, name: str) -> None:
    text = str(tmp_path / name) if name else ""
    with pytest.raises(ClassArchiveError, match="without white space, quotes or backslashes"):
        ClassArchive.at(text)


def test_a_relative_path_is_checked_as_the_jvm_gets_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`spark.jsa` run from a folder whose name has a space: the absolute path has one."""
    folder = tmp_path / "My Work"
    folder.mkdir()
    monkeypatch.chdir(folder)
    with pytest.raises(ClassArchiveError, match="My Work"):
        ClassArchive.at("spark.jsa")


def test_a_folder_or_a_missing_parent_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ClassArchiveError, match="not a file"):
        ClassArchive.at(str(tmp_path))
    with pytest.raises(ClassArchiveError, match="does not exist"):
        ClassArchive.at(str(tmp_path / "missing" / "spark.jsa"))


def test_records_when_missing_then_uses_it(tmp_path: Path) -> None:
    archive = ClassArchive.at(str(tmp_path / "spark.jsa"))
    assert archive.records
    options = archive.java_options()
    assert f"-XX:ArchiveClassesAtExit={archive.recording}" in options
    assert str(os.getpid()) in archive.recording.name  # one recording per process
    archive.recording.write_bytes(b"archive bytes")
    assert archive.finish(None)
    assert archive.path.read_bytes() == b"archive bytes" and not archive.recording.exists()
    assert archive.records  # decided when the run began
    later = ClassArchive.at(str(archive.path))
    assert not later.records
    assert later.java_options().startswith(f"-XX:SharedArchiveFile={archive.path} ")


def test_an_archive_another_run_put_in_place_first_is_kept(tmp_path: Path) -> None:
    archive = ClassArchive.at(str(tmp_path / "spark.jsa"))
    archive.path.write_bytes(b"the other run's")
    archive.recording.write_bytes(b"ours")
    assert not archive.finish(None)
    assert archive.path.read_bytes() == b"the other run's" and not archive.recording.exists()


def test_an_empty_or_missing_recording_is_not_put_in_place(tmp_path: Path) -> None:
    archive = ClassArchive.at(str(tmp_path / "spark.jsa"))
    assert not archive.finish(None)
    archive.recording.write_bytes(b"")
    assert not archive.finish(None)
    assert not archive.path.exists() and not archive.recording.exists()


def test_finish_waits_for_the_jvm_to_exit_before_moving_the_archive(tmp_path: Path) -> None:
    """The JVM writes the archive as it exits (after its stdin closes): a stand-in process
    that writes the recording only then."""
    archive = ClassArchive.at(str(tmp_path / "spark.jsa"))
    script = (
        "import sys, time; sys.stdin.read(); time.sleep(0.3); "
        f"open({str(archive.recording)!r}, 'wb').write(b'written at exit')"
    )
    process = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE)
    assert archive.finish(process)
    assert process.returncode == 0
    assert archive.path.read_bytes() == b"written at exit"


def test_a_jvm_that_fails_leaves_no_archive(tmp_path: Path) -> None:
    """A JVM that exits with an error may have written half an archive: it is not used."""
    archive = ClassArchive.at(str(tmp_path / "spark.jsa"))
    script = (
        f"import sys; sys.stdin.read(); open({str(archive.recording)!r}, 'wb').write(b'half'); "
        "sys.exit(1)"
    )
    process = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE)
    assert not archive.finish(process)
    assert not archive.path.exists() and not archive.recording.exists()
