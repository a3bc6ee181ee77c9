"""resolve-zones on a real Spark standalone cluster whose executors' Python lacks this package.

One cluster for the module: a master and one worker started with PySpark's own launcher
(`bin/spark-class`), on 127.0.0.1, stopped however the tests end; the three jobs run at once,
each with one core and a 512 MB executor. The
executors run a Python made here (a venv of the same interpreter holding only PySpark's own
needs, pyarrow and numpy: not this package, not pydantic, not kazoo). Against it: the
`resolve-zones --master spark://...` command, the docs' spark-submit recipe as written, and
a user's script calling `resolve_zones` and reading the `pulsar-ownership` data source; each
result equals the local[2] result on the same input.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from pulsar_lookup_gateway.zones.pairs import COLUMNS
from tests.processes import DEMO, EXE, ROOT

#: A line of Spark's own log4j output (date, time, level).
SPARK_LOG = re.compile(r"\d\d/\d\d/\d\d \d\d:\d\d:\d\d (TRACE|DEBUG|INFO|WARN|ERROR) ")

pytestmark = [
    pytest.mark.spark,
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
]

#: How long a daemon may take to come up, and a client job to finish (a loaded 2-core machine).
START_DEADLINE_S = 120.0
JOB_TIMEOUT_S = 300.0
#: PySpark's own needs: all the executors' Python gets.
EXECUTOR_MODULES = ("pyarrow", "numpy", "numpy.libs", "pyarrow.libs")
#: JVMs that live seconds: the quick compiler only, one GC thread (2 shared cores).
SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
ZONES = [("dc", "internal", False), ("internet", "external", True), ("lab", "lab", False)]
LISTENER = "external"

# The spark-submit recipe of docs/spark/index.md, as written there; the test replaces only the
# placeholders (the master's address and the executors' Python), in a folder holding the
# checkout's .venv and configs and the example's topics.txt and zones.csv.
RECIPE = """\
export SPARK_HOME="$(.venv/bin/python .venv/bin/find_spark_home.py)"
printf 'import sys\\nfrom pulsar_lookup_gateway.zones.cli import main\\nsys.exit(main())\\n' \\
    > resolve_zones.py
.venv/bin/spark-submit --master spark://spark-master:7077 \\
    --conf spark.pyspark.driver.python=.venv/bin/python \\
    --conf spark.pyspark.python=/opt/python3.11/bin/python3 \\
    resolve_zones.py --metadata file:configs/demo-cluster.json \\
    --topics topics.txt --zones zones.csv --out zones-out
"""


def test_the_recipe_run_is_the_docs_as_written() -> None:
    """The recipe the cluster test runs is the docs', line for line (its shell prompts
    aside): a docs edit that breaks the recipe fails here, not on a user's cluster."""
    page = (ROOT / "docs" / "spark" / "index.md").read_text()
    commands = "\n".join(line.removeprefix("$ ") for line in page.splitlines())
    assert RECIPE in commands


USER_SCRIPT = """\
import sys

from pyspark.sql import SparkSession

from pulsar_lookup_gateway.zones import OwnershipDataSource, resolve_zones

master, topics_path, metadata, out = sys.argv[1:]
spark = SparkSession.builder.master(master).appName("a user's job").getOrCreate()
topics = spark.read.text(topics_path).withColumnRenamed("value", "topic")
zones = [("dc", "internal", False), ("internet", "external", True), ("lab", "lab", False)]
answers = resolve_zones(topics, zones, metadata=metadata)
answers.write.parquet(out + "/answers")
spark.dataSource.register(OwnershipDataSource)
owners = (spark.read.format("pulsar-ownership")
          .option("metadata", metadata).option("listener", "external").load())
owners.write.parquet(out + "/owners")
spark.stop()
"""


@dataclass
class Cluster:
    master: str  # spark://127.0.0.1:<port>
    python: Path  # the executors' Python
    env: dict[str, str]  # a client's environment: the cluster's Spark settings, loopback
    bare: Path  # a Python with nothing installed (no PySpark, no pyarrow)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def bare_python(where: Path) -> Path:
    """A venv of this interpreter with nothing installed: a `python3` without PySpark or
    pyarrow, as a plain shell's PATH may hold."""
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(where)], check=True, timeout=60)
    python = where / "bin" / "python3"
    check = subprocess.run(
        [str(python), "-c", "import importlib.util as u; print(u.find_spec('pyarrow'))"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert check.stdout.strip() == "None", (check.stdout, check.stderr)
    return python


def plain_shell(env: dict[str, str], python3: Path) -> dict[str, str]:
    """`env` as a plain shell has it: no venv on the PATH and none active, no SPARK_HOME or
    PYSPARK_PYTHON, and a `python3` on the PATH that has no PySpark (nor pyarrow)."""
    drop = ("SPARK_HOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")
    plain = {k: v for k, v in env.items() if k not in drop}
    plain["PATH"] = f"{python3.parent}:/usr/local/bin:/usr/bin:/bin"
    return plain


def executor_python(where: Path) -> Path:
    """A venv of this interpreter with only PySpark's needs linked in."""
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(where)], check=True, timeout=60)
    ours = Path(pa.__file__).resolve().parents[1]
    site = where / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    for name in EXECUTOR_MODULES:
        if (ours / name).exists():
            (site / name).symlink_to(ours / name)
    python = where / "bin" / "python"
    probe = "import pyarrow\ntry:\n import pydantic\nexcept ImportError:\n print('clean')\n"
    check = subprocess.run(
        [str(python), "-c", probe + "import importlib.util as u\n"
         "assert u.find_spec('pulsar_lookup_gateway') is None\n"],
        capture_output=True, text=True, timeout=60, check=False, cwd=where,
    )  # fmt: skip
    assert check.returncode == 0 and check.stdout.strip() == "clean", check.stderr
    return python


def _start(
    command: list[str], log: Path, env: dict[str, str], ready: str
) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        if ready in log.read_text(errors="replace"):
            return process
        if process.poll() is not None:
            break
        time.sleep(0.25)
    _stop(process)
    raise AssertionError(f"{command[1]} did not start:\n{log.read_text(errors='replace')[-3000:]}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    import pyspark

    work = tmp_path_factory.mktemp("spark-cluster")
    home = Path(pyspark.__file__).parent
    conf = work / "conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(
        "spark.executor.memory 512m\n"
        "spark.driver.memory 512m\n"
        "spark.ui.enabled false\n"
        "spark.ui.showConsoleProgress false\n"
        "spark.sql.shuffle.partitions 4\n"
        "spark.cores.max 1\n"  # three jobs at once, one core each
        f"spark.driver.extraJavaOptions {SHORT_LIVED_JVM}\n"
        f"spark.executor.extraJavaOptions {SHORT_LIVED_JVM}\n"
    )
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_CONF_DIR": str(conf),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_DAEMON_JAVA_OPTS": SHORT_LIVED_JVM,
        # no REST submission server (a fixed port), no web UIs
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false -Dspark.ui.enabled=false",
        "SPARK_WORKER_OPTS": "-Dspark.ui.enabled=false",
    }
    for key in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYSPARK_SUBMIT_ARGS"):
        env.pop(key, None)
    python = executor_python(work / "executor-python")
    port = free_port()
    master = f"spark://127.0.0.1:{port}"
    spark_class = str(home / "bin" / "spark-class")
    started: list[subprocess.Popen[bytes]] = []
    try:
        started.append(
            _start(
                [spark_class, "org.apache.spark.deploy.master.Master",
                 "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(free_port())],
                work / "master.log", env, "I have been elected leader",
            )
        )  # fmt: skip
        (work / "worker").mkdir()
        started.append(
            _start(
                [spark_class, "org.apache.spark.deploy.worker.Worker",
                 "--host", "127.0.0.1", "--cores", "4", "--memory", "2048m",
                 "--webui-port", str(free_port()), "--work-dir", str(work / "worker"), master],
                work / "worker.log", env, "Successfully registered with master",
            )
        )  # fmt: skip
        bare = bare_python(work / "bare-python")
        yield Cluster(master, python, {**env, "PYSPARK_PYTHON": str(python)}, bare)
    finally:
        for process in reversed(started):
            _stop(process)


# -- the input, and the local[2] answers ----------------------------------------------------------


def topic_texts() -> list[str]:
    """Names the answer table answers, and names only the per-pair path answers (run in the
    executors' Python workers): invalid, in a namespace that does not exist, unusual."""
    return [
        *(f"persistent://public/default/t{i}" for i in range(150)),
        *(f"acme/payments/p{i}" for i in range(150)),
        *(f"non-persistent://public/default/n{i}" for i in range(20)),
        "orders", "acme/payments/settlements", "orders-partition-1",
        "bad//name", "acme/nope/t", "persistent://ghost/ns/g", "foo://x/y/z", "with space",
    ]  # fmt: skip


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("cluster-inputs")
    (where / "topics.txt").write_text("\n".join(topic_texts()) + "\n")
    lines = ["zone,listener,tls", *(f"{z},{li},{str(t).lower()}" for z, li, t in ZONES)]
    (where / "zones.csv").write_text("\n".join(lines) + "\n")
    return where


def rows_of(table: Any, columns: tuple[str, ...]) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(row[c] for c in columns) for row in table.to_pylist())


def parquet_rows(path: Path, columns: tuple[str, ...]) -> Counter[tuple[Any, ...]]:
    table = pq.read_table(path, partitioning="hive")
    if "zone" in table.column_names:
        index = table.schema.get_field_index("zone")
        table = table.set_column(index, "zone", table.column("zone").cast(pa.string()))
    return rows_of(table, columns)


@pytest.fixture(scope="module")
def local_answers(spark: Any, inputs: Path) -> Counter[tuple[Any, ...]]:
    """resolve_zones on local[2] (the tests' session) for the same input."""
    from pulsar_lookup_gateway.zones import resolve_zones

    topics = spark.read.text(str(inputs / "topics.txt")).withColumnRenamed("value", "topic")
    answers = resolve_zones(topics, ZONES, metadata=f"file:{DEMO}")
    return rows_of(answers.toArrow(), COLUMNS)


@dataclass
class Job:
    """A client process against the cluster (started with the others: they run at once)."""

    process: subprocess.Popen[str]
    out: Path  # where its outputs go

    def printed(self) -> str:
        """Its stdout, once it ended well (bounded wait)."""
        try:
            stdout, stderr = self.process.communicate(timeout=JOB_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.communicate()
            raise
        assert self.process.returncode == 0, (stdout[-2000:], stderr[-4000:])
        return stdout


def _job(command: list[str], env: dict[str, str], cwd: Path, out: Path) -> Job:
    process = subprocess.Popen(
        command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    return Job(process, out)


@pytest.fixture(scope="module")
def jobs(
    cluster: Cluster, inputs: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Job]]:
    """The command, the docs' recipe and a user's script, started together (each takes one
    of the worker's cores; most of a small job's time is JVM starts and waits)."""
    command_dir, recipe_dir, script_dir = (
        tmp_path_factory.mktemp(name) for name in ("command", "recipe", "script")
    )
    for name in (".venv", "configs"):
        (recipe_dir / name).symlink_to(ROOT / name)
    for name in ("topics.txt", "zones.csv"):
        (recipe_dir / name).write_bytes((inputs / name).read_bytes())
    recipe = RECIPE.replace("spark://spark-master:7077", cluster.master).replace(
        "/opt/python3.11/bin/python3", str(cluster.python)
    )
    (script_dir / "job.py").write_text(USER_SCRIPT)
    # the recipe sets what it needs itself (SPARK_HOME, the executors' Python)
    shell = plain_shell(cluster.env, cluster.bare)
    started: dict[str, Job] = {}
    try:
        started["command"] = _job(
            [EXE, "resolve-zones", "--metadata", f"file:{DEMO}",
             "--topics", str(inputs / "topics.txt"), "--zones", str(inputs / "zones.csv"),
             "--out", str(command_dir / "out"), "--master", cluster.master],
            cluster.env, command_dir, command_dir / "out",
        )  # fmt: skip
        started["recipe"] = _job(  # the recipe names the executors' Python itself
            ["/bin/bash", "-euo", "pipefail", "-c", recipe], shell, recipe_dir,
            recipe_dir / "zones-out",
        )  # fmt: skip
        started["script"] = _job(
            [sys.executable, "job.py", cluster.master, str(inputs / "topics.txt"),
             f"file:{DEMO}", str(script_dir / "out")],
            cluster.env, script_dir, script_dir / "out",
        )  # fmt: skip
        # The script on a local master, run with this venv's Python from a plain shell: its
        # executors' Python is the driver's, not the PATH's python3 (which lacks pyarrow).
        started["local"] = _job(
            [sys.executable, "job.py", "local[1]", str(inputs / "topics.txt"),
             f"file:{DEMO}", str(script_dir / "local-out")],
            shell, script_dir, script_dir / "local-out",
        )  # fmt: skip
        # The script on the cluster whose executors' Python lacks pyarrow: one line, no JVM trace.
        started["no-pyarrow"] = _job(
            [sys.executable, "job.py", cluster.master, str(inputs / "topics.txt"),
             f"file:{DEMO}", str(script_dir / "no-pyarrow-out")],
            {**cluster.env, "PYSPARK_PYTHON": str(cluster.bare)}, script_dir,
            script_dir / "no-pyarrow-out",
        )  # fmt: skip
        yield started
    finally:
        for job in started.values():
            if job.process.poll() is None:
                job.process.kill()
                job.process.communicate()


# -- the tests ------------------------------------------------------------------------------------

JOBS_TIMEOUT = int(JOB_TIMEOUT_S + 2 * START_DEADLINE_S)


@pytest.mark.timeout(JOBS_TIMEOUT)
def test_resolve_zones_command_on_the_cluster_ships_itself(
    jobs: dict[str, Job], local_answers: Counter[tuple[Any, ...]]
) -> None:
    job = jobs["command"]
    printed = job.printed()
    assert f"resolved {sum(local_answers.values())} (topic, zone) pairs" in printed
    assert parquet_rows(job.out / "answers", COLUMNS) == local_answers


@pytest.mark.timeout(JOBS_TIMEOUT)
def test_the_readme_spark_submit_recipe_runs_as_written(
    jobs: dict[str, Job], local_answers: Counter[tuple[Any, ...]]
) -> None:
    job = jobs["recipe"]
    assert "resolved" in job.printed()
    assert parquet_rows(job.out / "answers", COLUMNS) == local_answers


OWNER_COLUMNS = (
    "namespace", "bundle", "owner", "brokerUrl", "brokerUrlTls", "httpUrl", "httpUrlTls",
    "generation",
)  # fmt: skip


@pytest.mark.timeout(JOBS_TIMEOUT)
def test_a_users_script_calls_resolve_zones_and_reads_ownership(
    spark: Any, jobs: dict[str, Job], local_answers: Counter[tuple[Any, ...]]
) -> None:
    from pulsar_lookup_gateway.zones import OwnershipDataSource

    job = jobs["script"]
    job.printed()
    assert parquet_rows(job.out / "answers", COLUMNS) == local_answers

    spark.dataSource.register(OwnershipDataSource)
    local = (
        spark.read.format("pulsar-ownership")
        .option("metadata", f"file:{DEMO}")
        .option("listener", LISTENER)
        .load()
    )
    want = rows_of(local.toArrow(), OWNER_COLUMNS)
    assert len(want) > 5 and any(row[2] is None for row in want)  # some bundle is unowned
    assert parquet_rows(job.out / "owners", OWNER_COLUMNS) == want


@pytest.mark.timeout(JOBS_TIMEOUT)
def test_a_users_script_on_a_local_master_runs_the_drivers_python(
    jobs: dict[str, Job], local_answers: Counter[tuple[Any, ...]]
) -> None:
    job = jobs["local"]
    job.printed()
    assert parquet_rows(job.out / "answers", COLUMNS) == local_answers


@pytest.mark.timeout(JOBS_TIMEOUT)
def test_executors_without_pyarrow_fail_with_one_line_naming_the_setting(
    jobs: dict[str, Job], cluster: Cluster
) -> None:
    process = jobs["no-pyarrow"].process
    try:
        _, stderr = process.communicate(timeout=JOB_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    assert process.returncode != 0
    # The script's last words; the JVM may log a line of its own shutdown after them
    # ("26/11/28 04:07:25 WARN StandaloneSchedulerBackend...": Spark's, not a trace).
    last = [line for line in stderr.strip().splitlines() if not SPARK_LOG.match(line)][-1]
    assert last.startswith("pulsar_lookup_gateway.zones.executors.ExecutorPythonError: "), last
    assert f"the executors' Python ({cluster.bare.parent}" in last
    assert "cannot import pyarrow" in last and "set spark.pyspark.python" in last
    assert "Py4JJavaError" not in stderr and "\tat org.apache" not in stderr
