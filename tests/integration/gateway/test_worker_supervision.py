"""gateway.workers, piece by piece: which metrics directories a starting supervisor removes, and
how a worker learns that its supervisor is gone (the parent-death signal, the lifeline pipe).
The whole of it, with real supervisors killed: tests/reliability/test_supervisor_death.py."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from pulsar_lookup_gateway.gateway.workers import (
    METRICS_PREFIX,
    Owner,
    pid_namespace,
    proc_stat,
    remove_stale_directories,
)

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc and prctl")


def gone_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    child = subprocess.Popen(["true"])
    child.wait(10)
    return child.pid


def directory(parent: Path, owner: Owner) -> Path:
    return Path(tempfile.mkdtemp(prefix=owner.prefix(), dir=parent))


def me() -> Owner:
    return Owner.current()


@linux
def test_the_name_records_the_owner() -> None:
    owner = me()
    assert owner.pid == os.getpid() and owner.start is not None
    assert owner.pid_namespace == pid_namespace()
    name = Path(tempfile.mkdtemp(prefix=owner.prefix())).name
    try:
        assert Owner.from_name(name) == owner
    finally:
        os.rmdir(Path(tempfile.gettempdir()) / name)
    assert Owner.from_name(f"{METRICS_PREFIX}12-x-x-abc_9") == Owner(12, None, None)
    assert Owner.from_name(f"{METRICS_PREFIX}k2b8x1_q") is None  # an earlier release's name
    assert Owner.from_name(f"{METRICS_PREFIX}12-3-4-a/b") is None


@linux
def test_only_the_directories_of_owners_certainly_gone_are_removed(tmp_path: Path) -> None:
    mine = me()
    assert mine.start is not None
    dead = Owner(gone_pid(), mine.start, mine.pid_namespace)
    stale = {
        "dead": directory(tmp_path, dead),
        "pid reused": directory(tmp_path, Owner(mine.pid, mine.start + 1, mine.pid_namespace)),
        "dead, start unknown": directory(tmp_path, Owner(dead.pid, None, None)),
    }
    (stale["dead"] / "counter_123.db").write_bytes(b"\0" * 16)
    kept = {
        "running": directory(tmp_path, mine),
        "running, start unknown": directory(tmp_path, Owner(mine.pid, None, None)),
        "another pid namespace": directory(
            tmp_path, Owner(dead.pid, dead.start, (mine.pid_namespace or 0) + 1)
        ),
        "an earlier release's": Path(tempfile.mkdtemp(prefix=METRICS_PREFIX, dir=tmp_path)),
    }
    # Named like a dead owner's directory, but not a directory: left alone, and a link is not
    # followed.
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep").write_text("x")
    link = tmp_path / (dead.prefix() + "link")
    link.symlink_to(target)
    plain = tmp_path / (dead.prefix() + "file")
    plain.write_text("x")

    removed = remove_stale_directories(tmp_path)

    assert sorted(removed) == sorted(stale.values())
    assert not [what for what, path in stale.items() if path.exists()]
    assert [what for what, path in kept.items() if not path.is_dir()] == []
    assert link.is_symlink() and (target / "keep").exists() and plain.exists()


@linux
def test_a_zombie_owner_is_gone(tmp_path: Path) -> None:
    child = subprocess.Popen(["true"])
    try:
        deadline = time.monotonic() + 10
        while (found := proc_stat(child.pid)) is not None and found[0] != "Z":
            assert time.monotonic() < deadline, "the child did not exit"
            time.sleep(0.02)
        assert found is not None, "reaped already"
        owner = Owner(child.pid, found[1], pid_namespace())
        assert not owner.may_be_running()
        path = directory(tmp_path, owner)
        assert remove_stale_directories(tmp_path) == [path]
    finally:
        child.wait(10)


@linux
@pytest.mark.skipif(os.geteuid() != 0, reason="making a directory of another user needs root")
def test_a_directory_of_another_user_is_kept(tmp_path: Path) -> None:
    path = directory(tmp_path, Owner(gone_pid(), None, None))
    os.chown(path, 54321, 54321)
    assert remove_stale_directories(tmp_path) == []
    assert path.is_dir()


def run_python(script: str, *args: str, pass_fds: tuple[int, ...] = ()) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        pass_fds=pass_fds,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


# A stand-in worker: SIGTERM prints and exits 0; `watch_lifeline` runs in its main thread.
WATCHER = """
import os, signal, sys, time
from pulsar_lookup_gateway.gateway.workers import watch_lifeline
signal.signal(signal.SIGTERM, lambda *_: (print("SIGTERM", flush=True), os._exit(0)))
print("watching", flush=True)
watch_lifeline(int(sys.argv[1]), os.getppid(), sys.argv[2] == "signal")
print("returned", flush=True)
time.sleep(0.5)  # time for a signal sent to arrive
sys.exit(3)
"""


@pytest.mark.parametrize(
    ("mode", "code", "last"), [("signal", 0, "SIGTERM"), ("log", 3, "returned")]
)
def test_the_lifeline_ends_when_its_write_end_closes(mode: str, code: int, last: str) -> None:
    read_end, write_end = os.pipe()
    child = run_python(WATCHER, str(read_end), mode, pass_fds=(read_end,))
    try:
        os.close(read_end)
        assert child.stdout is not None
        assert child.stdout.readline() == "watching\n"
        os.write(write_end, b"not an end")  # data is not the end
        time.sleep(0.2)
        assert child.poll() is None
        os.close(write_end)
        write_end = -1
        out, _ = child.communicate(timeout=20)
    finally:
        if write_end >= 0:
            os.close(write_end)
        child.kill()
        child.wait(10)
    assert child.returncode == code, out
    assert "the supervisor" in out and "is gone" in out and out.splitlines()[-1] == last


FOLLOWER = """
import ctypes, os, sys
from pulsar_lookup_gateway.gateway.workers import follow_supervisor
ok = follow_supervisor(int(sys.argv[1]) or os.getppid(), None)
signum = ctypes.c_int()
ctypes.CDLL(None).prctl(2, ctypes.byref(signum), 0, 0, 0)  # PR_GET_PDEATHSIG
print(ok, signum.value)
"""


@linux
@pytest.mark.parametrize(("supervisor", "expected"), [(0, "True 15"), (1, "False 15")])
def test_a_worker_asks_for_sigterm_and_checks_its_parent(supervisor: int, expected: str) -> None:
    """0: the parent is the supervisor; 1: another pid, as when the supervisor died before the
    worker asked the kernel (init or a subreaper adopted it): the worker must not start."""
    child = run_python(FOLLOWER, str(supervisor))
    out, _ = child.communicate(timeout=30)
    assert out.splitlines()[-1] == expected, out
