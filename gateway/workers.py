"""`run --workers N`: N gateway processes sharing every port through SO_REUSEPORT.

Each worker is a whole gateway (its own event loop, its own ZooKeeper session and cache); the
kernel spreads new connections across them. This process only supervises: it forwards
SIGTERM/SIGINT, restarts a worker that dies unexpectedly (a bounded number of times), and
exits 0 when every worker stopped cleanly.

Metrics: a scrape reaches whichever worker the kernel picks, so the workers share their samples
through prometheus-client's multiprocess mode: this process makes a private directory, passes it
to every worker as PROMETHEUS_MULTIPROC_DIR (read when a worker imports prometheus-client), and
each worker's /metrics merges the files of all. When a worker exits, its live gauges are dropped
(`mark_process_dead`); its counters and histograms stay in the totals. The directory is removed
at exit.

Workers do not outlive the supervisor. A supervisor killed with SIGKILL (or by the OOM killer)
cannot stop its workers, so each worker watches for that itself, two ways:

* On Linux, a worker's first act (`follow_supervisor`, before it reads its config) is to ask
  the kernel for SIGTERM when its parent dies (`prctl(PR_SET_PDEATHSIG)`), then to compare
  `getppid()` with the supervisor's pid from its command line: a supervisor that died before
  the prctl call left the worker with another parent, and the worker exits at once. The signal
  comes when the thread that started the worker ends; the supervisor starts every worker from
  its main thread, which lives as long as the process.
* Everywhere: the supervisor holds the write end of a pipe (the lifeline) that it never writes
  to and that no other process inherits; each worker gets the read end and blocks on it in a
  thread. The kernel closes a dead process's descriptors whatever killed it, so the worker reads
  end-of-file at once when the supervisor is gone, even if that happened before the worker
  started. A pipe rather than polling `getppid()`: no interval to choose, nothing to wake up
  while all is well, and it does not depend on which process adopts an orphan (init or a
  subreaper). Where prctl is missing or failed, the watcher sends the worker SIGTERM itself;
  where it worked, the kernel already did, and the watcher only logs (one SIGTERM either way).

SIGTERM takes the worker's usual way out: it stops accepting, answers the lookups in flight
(within shutdownTimeoutSeconds) and exits.

Stale directories: a supervisor killed with SIGKILL leaves its metrics directory behind. Its
name records its owner: `pulsar-lookup-gateway-metrics-<pid>-<start>-<pidns>-<random>`, with
the supervisor's start time (field 22 of /proc/<pid>/stat, clock ticks after boot) and its PID
namespace (the inode of /proc/self/ns/pid); mkdtemp makes it, so the record exists as soon as
the directory does. A supervisor starting removes every such directory in the temp directory
that belongs to its own uid (lstat: a real directory, not a link) and whose owner is gone: no
process with that pid, a zombie, or a process with that pid but another start time (the pid
was reused). It keeps the directories it cannot judge: another PID namespace (a temp directory
shared between containers), a name in another form (one left by an earlier release), an owner
whose start time is unknown (no /proc) but whose pid exists. Each directory is made with
mode 0700.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from prometheus_client import Counter, values
from prometheus_client.multiprocess import mark_process_dead

from pulsar_lookup_gateway.listeners.config.model import GatewayConfig
from pulsar_lookup_gateway.serving.metrics import WORKER_RESTARTS, WORKER_RESTARTS_HELP

log = logging.getLogger(__name__)

MAX_RESTARTS = 5  # within RESTART_WINDOW seconds; beyond it the supervisor gives up
RESTART_WINDOW = 60.0
POLL_INTERVAL = 0.2
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"  # prometheus-client's multiprocess switch
#: How many workers share the ports, told to each (the watch's stream limits are divided by it).
WORKERS_ENV = "PULSAR_LOOKUP_GATEWAY_WORKERS"
METRICS_PREFIX = "pulsar-lookup-gateway-metrics-"
# <pid>-<start>-<pidns>-<mkdtemp's random part: lower-case letters, digits, underscores>
_OWNED_NAME = re.compile(re.escape(METRICS_PREFIX) + r"(\d+)-(\d+|x)-(\d+|x)-[a-z0-9_]+")
_UNKNOWN = "x"
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class WorkersError(Exception):
    pass


def check_workers(config: GatewayConfig, count: int) -> None:
    if count < 1:
        raise WorkersError("--workers must be at least 1")
    ephemeral = [spec.origin for spec in config.sockets() if spec.endpoint.port == 0]
    if count > 1 and ephemeral:
        raise WorkersError(
            "--workers needs fixed ports (port 0 gives each worker a port of its own): "
            + ", ".join(ephemeral)
        )


@dataclass(frozen=True)
class Owner:
    """The supervisor a metrics directory belongs to, as its name records it. `start`: field 22
    of /proc/<pid>/stat; `pid_namespace`: the inode of /proc/<pid>/ns/pid. None: unknown (no
    /proc), written `x`."""

    pid: int
    start: int | None
    pid_namespace: int | None

    @classmethod
    def current(cls) -> Owner:
        pid = os.getpid()
        try:
            found = proc_stat(pid)
        except (OSError, ValueError):
            found = None
        return cls(pid, found[1] if found else None, pid_namespace())

    @classmethod
    def from_name(cls, name: str) -> Owner | None:
        """The owner recorded in a directory's name; None for a name in another form."""
        match = _OWNED_NAME.fullmatch(name)
        if match is None:
            return None
        pid, start, namespace = match.groups()
        return cls(
            int(pid),
            None if start == _UNKNOWN else int(start),
            None if namespace == _UNKNOWN else int(namespace),
        )

    def prefix(self) -> str:
        """mkdtemp's prefix for a directory of this owner."""
        fields = (self.pid, self.start, self.pid_namespace)
        return METRICS_PREFIX + "".join(
            f"{_UNKNOWN if value is None else value}-" for value in fields
        )

    def may_be_running(self) -> bool:
        """False only when this owner is certainly gone; True when it runs or cannot be told."""
        if self.pid_namespace is not None and self.pid_namespace != pid_namespace():
            return True  # its pid means another process here
        try:
            found = proc_stat(self.pid)
        except (OSError, ValueError):
            return True  # there but unreadable: keep rather than guess
        if found is not None:
            state, start = found
            return state not in "ZX" and (self.start is None or start == self.start)
        if Path("/proc/self/stat").exists():
            return False  # /proc works and has no such process
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time) of a process from /proc/<pid>/stat (fields 3 and 22; the start in
    clock ticks after boot); None when there is no such process or no /proc. OSError or
    ValueError when the file is there but cannot be read or parsed."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # ESRCH: the process exited while read
        return None
    # Field 2 is the command name in parentheses, which may itself hold spaces or parentheses.
    fields = text[text.rindex(")") + 2 :].split()
    if len(fields) < 20:
        raise ValueError(f"/proc/{pid}/stat: {len(fields) + 2} fields")
    return fields[0], int(fields[19])  # fields[0] is field 3


def pid_namespace() -> int | None:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def remove_stale_directories(parent: Path | None = None) -> list[Path]:
    """Remove the metrics directories in `parent` (the temp directory) left by supervisors that
    are gone (see the module's docstring for which); the ones removed."""
    parent = Path(tempfile.gettempdir()) if parent is None else parent
    uid = os.getuid()
    removed = []
    try:
        entries = list(os.scandir(parent))
    except OSError as exc:
        log.warning("cannot look for stale metrics directories in %s: %s", parent, exc)
        return []
    for entry in entries:
        owner = Owner.from_name(entry.name)
        if owner is None:
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue  # removed meanwhile
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid or owner.may_be_running():
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        if not os.path.lexists(entry.path):
            log.info("removed %s: its supervisor (pid %d) is gone", entry.path, owner.pid)
            removed.append(Path(entry.path))
        else:
            log.warning("cannot remove the stale metrics directory %s", entry.path)
    return removed


@contextmanager
def shared_metrics_directory() -> Iterator[Path]:
    """A new, empty directory only this user can read (0700), for the workers' metric files,
    named after this process; removed with whatever is in it when the supervisor exits. Those
    that supervisors killed earlier left behind are removed first."""
    remove_stale_directories()
    directory = Path(tempfile.mkdtemp(prefix=Owner.current().prefix()))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def restart_counter(directory: Path) -> Counter:
    """`pulsar_lookup_gateway_worker_restarts_total`, written to the workers' shared directory.
    This process imported prometheus-client before it knew it would supervise, so its value
    class is the single-process one: this counter alone is made with the multiprocess one
    (`values.MultiProcessValue()`, the hook prometheus-client offers for choosing it in code),
    which reads the directory from the environment as it opens its file. Both are restored."""
    saved_class, saved_dir = values.ValueClass, os.environ.get(MULTIPROC_ENV)
    values.ValueClass = values.MultiProcessValue()  # type: ignore[no-untyped-call]
    os.environ[MULTIPROC_ENV] = str(directory)
    try:
        return Counter(WORKER_RESTARTS, WORKER_RESTARTS_HELP, registry=None)
    finally:
        values.ValueClass = saved_class
        if saved_dir is None:
            del os.environ[MULTIPROC_ENV]
        else:
            os.environ[MULTIPROC_ENV] = saved_dir


def supervise(
    config_path: Path, config: GatewayConfig, count: int, worker_args: Sequence[str] = ()
) -> int:
    """Run `count` workers until a signal; `worker_args`: more options for each worker's
    command line (the logging flags)."""
    check_workers(config, count)
    with shared_metrics_directory() as directory, lifeline() as read_end:
        return _supervise(config_path, config, count, list(worker_args), directory, read_end)


@contextmanager
def lifeline() -> Iterator[int]:
    """A pipe whose write end only this process holds (os.pipe's descriptors are not
    inheritable, and Popen passes only the read end); the read end, for the workers. Closed
    after the workers exited: end-of-file on it tells a worker that the supervisor is gone."""
    read_end, write_end = os.pipe()
    try:
        yield read_end
    finally:
        os.close(read_end)
        os.close(write_end)


def _supervise(
    config_path: Path,
    config: GatewayConfig,
    count: int,
    worker_args: list[str],
    metrics: Path,
    read_end: int,
) -> int:
    stopping = False
    restarted = restart_counter(metrics)
    # (WORKERS_ENV: a worker divides the limits that count clients across workers by it)
    env = {**os.environ, MULTIPROC_ENV: str(metrics), WORKERS_ENV: str(count)}
    command = [sys.executable, "-m", "pulsar_lookup_gateway", "run", "--config", str(config_path)]
    supervisor = ["--supervisor-pid", str(os.getpid()), "--supervisor-fd", str(read_end)]

    def spawn(index: int) -> subprocess.Popen[bytes]:
        # Started from this (the main) thread: see PR_SET_PDEATHSIG in the module's docstring.
        return subprocess.Popen(
            [*command, "--worker", str(index), *supervisor, *worker_args],
            env=env,
            pass_fds=(read_end,),
        )

    def stop(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for child in workers.values():
            if child.poll() is None:
                child.send_signal(signum)

    workers = {index: spawn(index) for index in range(count)}
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    log.info("started %d workers: %s", count, " ".join(str(w.pid) for w in workers.values()))
    restarts: list[float] = []
    try:
        while not stopping:
            time.sleep(POLL_INTERVAL)
            for index, child in list(workers.items()):
                code = child.poll()
                if code is None or stopping:
                    continue
                mark_process_dead(child.pid, str(metrics))  # type: ignore[no-untyped-call]
                now = time.monotonic()
                restarts = [t for t in restarts if now - t < RESTART_WINDOW] + [now]
                if len(restarts) > MAX_RESTARTS:
                    log.error("workers keep dying (%d restarts in %.0fs); stopping", MAX_RESTARTS,
                              RESTART_WINDOW)  # fmt: skip
                    stop(signal.SIGTERM, None)
                    break
                log.error(
                    "worker %d (pid %d) exited with %s; restarting it", index, child.pid, code
                )
                workers[index] = spawn(index)
                restarted.inc()
        deadline = time.monotonic() + config.shutdown_timeout_seconds + 10
        codes = []
        for child in workers.values():
            try:
                codes.append(child.wait(max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                child.kill()
                codes.append(child.wait())
        return 0 if all(code == 0 for code in codes) else 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def follow_supervisor(supervisor_pid: int, read_end: int | None) -> bool:
    """A worker's first act: arrange to get SIGTERM when the supervisor dies (see the module's
    docstring). False if the supervisor is already gone: the worker should exit."""
    signalled = set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != supervisor_pid:
        log.error("the supervisor (pid %d) is gone: exiting", supervisor_pid)
        return False
    if read_end is not None:
        threading.Thread(
            target=watch_lifeline,
            args=(read_end, supervisor_pid, not signalled),
            name="supervisor-lifeline",
            daemon=True,
        ).start()
    return True


def set_parent_death_signal(signum: int) -> bool:
    """Linux: have the kernel send `signum` to this process when its parent dies. False where
    that cannot be arranged."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError) as exc:
        log.warning("no prctl: the lifeline pipe alone stops this worker: %s", exc)
        return False
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    if prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
        reason = os.strerror(ctypes.get_errno())
        log.warning("prctl(PR_SET_PDEATHSIG) failed: the lifeline pipe alone stops this worker: "
                    "%s", reason)  # fmt: skip
        return False
    return True


def watch_lifeline(read_end: int, supervisor_pid: int, send_sigterm: bool) -> None:
    """Block on the lifeline until end-of-file (the supervisor is gone); then send this process
    SIGTERM if `send_sigterm` (the kernel does when the parent-death signal is set)."""
    try:
        while os.read(read_end, 512):
            pass  # the supervisor never writes; read on if something did
    except OSError as exc:
        log.error("cannot watch the supervisor's lifeline (fd %d): %s", read_end, exc)
        return
    log.warning("the supervisor (pid %d) is gone: stopping", supervisor_pid)
    if send_sigterm:
        os.kill(os.getpid(), signal.SIGTERM)
