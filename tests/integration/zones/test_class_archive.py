"""The class-data archive's path rules and its record -> use life cycle (no JVM here: the
integration test runs the real one)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pulsar_lookup_gateway.zones.class_archive import (
    CACHE_FOLDER,
    KEPT_ARCHIVES,
    ClassArchive,
    ClassArchiveError,
    default_archive,
    start_mapping,
)


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


# -- the default archive in the user's cache (zones.class_archive.default_archive) ----------------


def installation(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A JDK and a Spark home as default_archive reads them (no JVM runs), and an environment
    whose cache is under tmp_path: (spark_home, env)."""
    jdk = tmp_path / "jdk"
    (jdk / "bin").mkdir(parents=True)
    (jdk / "bin" / "java").write_text("#!/bin/sh\n")
    (jdk / "bin" / "java").chmod(0o755)
    (jdk / "lib" / "server").mkdir(parents=True)
    (jdk / "lib" / "server" / "libjvm.so").write_bytes(b"jvm")
    (jdk / "release").write_text('JAVA_VERSION="17.0.15"\nJAVA_RUNTIME_VERSION="17.0.15+6"\n')
    spark = tmp_path / "spark"
    (spark / "jars").mkdir(parents=True)
    (spark / "jars" / "spark-core.jar").write_bytes(b"classes")
    return spark, {"JAVA_HOME": str(jdk), "XDG_CACHE_HOME": str(tmp_path / "cache")}


def test_the_default_archive_is_in_the_cache_named_by_java_and_spark(tmp_path: Path) -> None:
    spark, env = installation(tmp_path)
    archive, why = default_archive(spark, "4.3.0", env=env)
    assert archive is not None and why == ""
    assert archive.records and archive.cached
    assert archive.path.parent == tmp_path / "cache" / CACHE_FOLDER
    assert archive.path.name.startswith("spark-4.3.0-java-17.0.15+6-")
    archive.path.write_bytes(b"recorded")
    again, _ = default_archive(spark, "4.3.0", env=env)
    assert again == ClassArchive(archive.path, records=False, cached=True)  # mapped from now on
    # an upgrade in place (a jar, the JDK) is another installation: another archive
    (spark / "jars" / "spark-core.jar").write_bytes(b"other classes")
    upgraded, _ = default_archive(spark, "4.3.0", env=env)
    assert upgraded is not None and upgraded.records and upgraded.path != archive.path
    (tmp_path / "jdk" / "release").write_text('JAVA_VERSION="17.0.16"\n')
    other_java, _ = default_archive(spark, "4.3.0", env=env)
    assert other_java is not None and "java-17.0.16-" in other_java.path.name


def test_a_cache_folder_that_cannot_be_made_means_no_archive(tmp_path: Path) -> None:
    spark, env = installation(tmp_path)
    (tmp_path / "not-a-folder").write_text("")
    archive, why = default_archive(
        spark, "4.3.0", env={**env, "XDG_CACHE_HOME": str(tmp_path / "not-a-folder")}
    )
    assert archive is None
    assert f"{tmp_path / 'not-a-folder' / CACHE_FOLDER}: " in why


def test_a_cache_path_the_jvm_would_split_means_no_archive(tmp_path: Path) -> None:
    spark, env = installation(tmp_path)
    archive, why = default_archive(
        spark, "4.3.0", env={**env, "XDG_CACHE_HOME": str(tmp_path / "my cache")}
    )
    assert archive is None and "without white space" in why


def test_a_relative_xdg_cache_home_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spark, env = installation(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    archive, _ = default_archive(spark, "4.3.0", env={**env, "XDG_CACHE_HOME": "cache"})
    assert archive is not None
    assert archive.path.parent == tmp_path / "home" / ".cache" / CACHE_FOLDER


@pytest.mark.parametrize(
    ("options", "variable"),
    [
        ("-Xmx1g -XX:SharedArchiveFile=/opt/spark.jsa", ""),
        ("-XX:ArchiveClassesAtExit=/tmp/x.jsa", ""),
        ("", "-Xshare:off"),
    ],
)
def test_options_that_choose_an_archive_keep_the_default_out(
    tmp_path: Path, options: str, variable: str
) -> None:
    spark, env = installation(tmp_path)
    archive, why = default_archive(spark, "4.3.0", options, {**env, "JDK_JAVA_OPTIONS": variable})
    assert archive is None and why == ""
    assert not (tmp_path / "cache").exists()


def test_without_a_java_there_is_no_archive(tmp_path: Path) -> None:
    spark, _env = installation(tmp_path)
    archive, why = default_archive(spark, "4.3.0", env={"PATH": str(tmp_path / "empty")})
    assert archive is None and "no java" in why


def test_a_recording_that_wrote_nothing_pauses_the_default(tmp_path: Path) -> None:
    """A JVM that exits well but cannot record (say, no base archive) would make every run
    pay for recording: after one such run the default is off for a while."""
    spark, env = installation(tmp_path)
    archive, _ = default_archive(spark, "4.3.0", env=env)
    assert archive is not None
    assert not archive.finish(None)
    again, why = default_archive(spark, "4.3.0", env=env)
    assert again is None
    assert why == (
        f"the JVM that recorded it exited well but wrote none; remove {archive.path}.failed "
        "to try again"
    )


def test_recording_keeps_the_cache_folder_bounded(tmp_path: Path) -> None:
    spark, env = installation(tmp_path)
    archive, _ = default_archive(spark, "4.3.0", env=env)
    assert archive is not None
    folder = archive.path.parent
    old = [folder / f"spark-4.2.{i}-java-17-0.jsa" for i in range(3)]
    for age, path in enumerate(old):
        path.write_bytes(b"old")
        os.utime(path, (1_000_000 - age, 1_000_000 - age))  # old[0] the newest of them
    stale = folder / "spark-4.2.0-java-17-0.jsa.99.recording"
    stale.write_bytes(b"killed while writing")
    os.utime(stale, (1_000_000, 1_000_000))
    fresh = folder / "spark-4.2.1-java-17-0.jsa.98.recording"  # another run writing now
    fresh.write_bytes(b"")
    mine = folder / "notes.txt"
    mine.write_text("not an archive")
    archive.recording.write_bytes(b"archive bytes")
    assert archive.finish(None)
    assert sorted(folder.iterdir()) == sorted([archive.path, old[0], fresh, mine])
    assert len(list(folder.glob("*.jsa"))) == KEPT_ARCHIVES


class JvmWontStart(RuntimeError):
    """What PySpark raises when the JVM exits before it answers (a damaged archive's crash)."""


def starts_only_without_an_archive(archive: ClassArchive | None) -> str:
    if archive is not None:
        raise JvmWontStart("Java gateway process exited before sending its port number.\nmore")
    return "session"


@pytest.mark.parametrize("cached", [True, False])
def test_a_jvm_that_will_not_start_with_the_archive_starts_without_it(
    tmp_path: Path, cached: bool
) -> None:
    """A truncated archive crashes Java 17 as it maps it (SIGBUS): the job goes on without
    it, and a default one is removed so that the next run records it anew."""
    path = tmp_path / "spark.jsa"
    path.write_bytes(b"damaged")
    archive = ClassArchive(path, records=False, cached=cached)
    result, used, note = start_mapping(archive, starts_only_without_an_archive)
    assert (result, used) == ("session", None)
    assert f"the JVM did not start with {path} (Java gateway process exited" in note
    assert "more" not in note  # one line
    assert path.exists() is not cached
    assert ("removed it" in note) is cached


def test_a_jvm_that_will_not_start_at_all_fails_as_it_is(tmp_path: Path) -> None:
    def never(archive: ClassArchive | None) -> str:
        raise JvmWontStart("with" if archive else "without")

    path = tmp_path / "spark.jsa"
    path.write_bytes(b"fine")
    for records in (False, True):
        with pytest.raises(JvmWontStart, match="without"):
            start_mapping(ClassArchive(path, records=records, cached=True), never)
    assert path.read_bytes() == b"fine"  # not the archive's fault: kept
    assert not (tmp_path / "spark.jsa.failed").exists()
    assert start_mapping(None, starts_only_without_an_archive) == ("session", None, "")


def test_a_jvm_that_will_not_start_to_record_pauses_the_default(tmp_path: Path) -> None:
    """Java 17 will not record with a folder that is not empty on the class path ("Cannot have
    non-empty directory in paths"): the job runs without, and later runs do not try again."""
    spark, env = installation(tmp_path)
    archive, _ = default_archive(spark, "4.3.0", env=env)
    assert archive is not None and archive.records
    result, used, note = start_mapping(archive, starts_only_without_an_archive)
    assert (result, used) == ("session", None)
    assert "the JVM did not start with" in note
    again, why = default_archive(spark, "4.3.0", env=env)
    assert again is None
    assert why.startswith("the JVM did not start to record it (Java gateway process exited")


@pytest.mark.parametrize("variable", ["SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR"])
def test_a_folder_on_the_class_path_that_is_not_empty_means_no_archive(
    tmp_path: Path, variable: str
) -> None:
    spark, env = installation(tmp_path)
    conf = tmp_path / "conf"
    conf.mkdir()
    archive, _ = default_archive(spark, "4.3.0", env={**env, variable: str(conf)})
    assert archive is not None  # an empty one is fine
    (conf / "spark-defaults.conf").write_text("spark.eventLog.enabled true\n")
    archive, why = default_archive(spark, "4.3.0", env={**env, variable: str(conf)})
    assert archive is None
    assert (
        why == f"{conf} is on the driver's class path and not empty: Java archives no classes then"
    )
