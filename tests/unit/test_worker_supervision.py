"""gateway.workers, piece by piece: how a worker learns that its supervisor is gone (the
parent-death signal, the lifeline pipe).
The whole of it, with real supervisors killed: tests/reliability/test_supervisor_death.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc and prctl")


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
