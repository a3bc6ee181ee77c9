"""Zone resolution on Spark: (topic, zone) pairs per second of `resolve-zones` on local[2] for
1M topics x 3 zones, with its fast plan (the job's: an answer table computed on the driver, looked
up in Spark's engine) and the per-pair plan it replaced (`resolve()` for every pair in Python
workers), each run in a fresh process (a cold JVM), and sequential HTTP lookups through the gateway
measured in the same run (a 10,000-lookup sample, extrapolated to the same number of pairs).

    .venv/bin/python -m bench.zones [--topics 1000000] [--sample 10000] [--no-per-pair]
                                    [--no-class-archive] [--runs N] [--no-write]
                                    [--conf KEY=VALUE ...]

The cluster: 20 brokers, 10 namespaces x 64 bundles, 90% of the bundles owned, listener
`partner` advertised by 15 of the 20 brokers. Zones: dc (internal), internet (external, TLS),
partner (partner). The topics are generated as one Parquet file in a temp dir.

Spark: the job as `resolve-zones` runs it (`zones.cli.run`: snapshot file read, answer table,
Parquet write partitioned by zone, summary, CSV and PNG), timed end to end; the SparkSession start
(JVM) is timed separately; Spark's event log gives each phase's wall and CPU time, and the CPU of
the whole process tree (the job's Python, the JVM, the Python workers) is measured as this process
reaps them. As `resolve-zones` does by default, the driver JVM maps a class-data archive in the
user's cache (here a fresh folder): the first fast-plan run records it, then runs with it mapped
and without one (`--no-class-archive`) alternate, `--runs` times; the figure is the median run
with the archive mapped. The per-pair plan runs the job as it was before
(`zones.spark.per_pair_plan`, the summary read back from the Parquet). Baseline: the gateway's
HTTP app (`http_api.app.build_app` on a `LookupService` over a `FileSource` of the same snapshot,
in a child process) answering one lookup at a time (`?listenerName=<zone's listener>`,
keep-alive, 307s not followed) for random (topic, zone) pairs. Results go to BENCHMARKS.md under
"## Zone resolution (Spark)".
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import multiprocessing
import os
import platform
import random
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
from aiohttp import ClientSession, ClientTimeout, TCPConnector

from bench.common import write_section
from pulsar_lookup_gateway.lookup.bundles import NamespaceBundles
from pulsar_lookup_gateway.metadata_store.synthetic import broker_id, broker_node, ownership_node
from pulsar_lookup_gateway.zones.pairs import Zone
from pulsar_lookup_gateway.zones.spark import ARROW_SCHEMA

SECTION = "## Zone resolution (Spark)"
BROKERS = 20
NAMESPACES = 10
BUNDLES = 64
ZONES = (Zone("dc", "internal"), Zone("internet", "external", True), Zone("partner", "partner"))
PARTNER_BROKERS = 15  # brokers 1..15 advertise `partner`; 16..20 lack it
_PR_SET_CHILD_SUBREAPER = 36  # prctl(2)


def partner_urls(i: int) -> dict[str, str]:
    return {
        "brokerServiceUrl": f"pulsar://partner-b{i}.example.net:6650",
        "brokerHttpUrl": f"http://partner-b{i}.example.net:8080",
    }


def snapshot() -> dict[str, Any]:
    nodes: dict[str, Any] = {}
    for i in range(1, BROKERS + 1):
        node = broker_node(i, usage=0.01 * i)
        if i <= PARTNER_BROKERS:
            node["advertisedListeners"]["partner"] = partner_urls(i)
        nodes[f"/loadbalance/brokers/{broker_id(i)}"] = node
    nodes["/loadbalance/leader"] = {"brokerId": broker_id(1), "serviceUrl": "http://10.0.0.1:8080"}
    bundles = NamespaceBundles.equal(BUNDLES)
    boundaries = [f"0x{b:08x}" for b in bundles.boundaries]
    for n in range(NAMESPACES):
        namespace = f"acme/ns{n}"
        nodes[f"/admin/policies/{namespace}"] = {
            "bundles": {"boundaries": boundaries, "numBundles": BUNDLES}
        }
        for k, name in enumerate(bundles.names()):
            if (k + n) % 10 == 0:
                continue  # unowned: answered with a redirect
            owner = 1 + (k * 7 + n) % BROKERS
            node = ownership_node(owner)
            if owner <= PARTNER_BROKERS:
                node["advertisedListeners"]["partner"] = partner_urls(owner)
            nodes[f"/namespace/{namespace}/{name}"] = node
    return nodes


def topic_name(i: int) -> str:
    return f"persistent://acme/ns{i % NAMESPACES}/topic-{i}"


def write_topics(path: Path, count: int) -> None:
    table = pa.table({"topic": [topic_name(i) for i in range(count)]})
    pq.write_table(table, path, row_group_size=131_072)


def write_zones(path: Path) -> None:
    lines = ["zone,listener,tls", *(f"{z.name},{z.listener},{str(z.tls).lower()}" for z in ZONES)]
    path.write_text("\n".join(lines) + "\n")


# -- Spark ---------------------------------------------------------------------------------------


@dataclass
class SparkResult:
    session_start_s: float
    job_s: float
    pairs: int
    # Spark's jobs by description: (wall s, task CPU s); see `phases`
    phases: dict[str, tuple[float, float]]
    kind: str = ""  # no archive | recording | archive (the class-data archive)
    cpu_s: float = 0.0  # CPU of the whole process tree (see `run_spark`)
    load: float = 0.0  # the 1-minute load average as the run started

    @property
    def total_s(self) -> float:
        return self.session_start_s + self.job_s


def _job_args(work: Path, master: str, *, no_class_archive: bool) -> argparse.Namespace:
    from pulsar_lookup_gateway.zones.cli import build_parser

    return build_parser("resolve-zones", master_default=master).parse_args(
        [
            "--metadata", f"file:{work / 'snapshot.json'}",
            "--topics", str(work / "topics.parquet"),
            "--zones", str(work / "zones.csv"),
            "--out", str(work / "out"),
            *(["--no-class-archive"] if no_class_archive else []),
        ]
    )  # fmt: skip


def _per_pair_job(args: argparse.Namespace, spark: Any) -> None:
    """The job as it ran before the answer table: resolve() for every pair in the Python
    workers (`per_pair_plan`), the summary read back from the written Parquet."""
    from pulsar_lookup_gateway.lookup.resolve import ResolvePolicy
    from pulsar_lookup_gateway.metadata_store.snapshot import read_nodes
    from pulsar_lookup_gateway.metadata_store.url import parse_metadata_url
    from pulsar_lookup_gateway.zones.chart import plot_share
    from pulsar_lookup_gateway.zones.pairs import read_zones, write_summary_csv
    from pulsar_lookup_gateway.zones.spark import per_pair_plan, read_topics, summarize

    zones = read_zones(args.zones)
    nodes = read_nodes(parse_metadata_url(args.metadata))
    topics = read_topics(spark, args.topics, "parquet")
    answers = str(Path(args.out) / "answers")
    frame = per_pair_plan(spark, nodes, topics, zones, ResolvePolicy())
    frame.write.mode("overwrite").partitionBy("zone").parquet(answers)
    rows = summarize(spark, answers, zones)
    write_summary_csv(rows, Path(args.out) / "summary.csv")
    plot_share(rows, zones, Path(args.out) / "share.png")


def _per_pair_child(work: str, master: str, conn: Connection) -> None:
    """Child process (a cold JVM): the per-pair plan's job; sends a SparkResult."""
    from pulsar_lookup_gateway.zones import spark as zones_spark

    events = Path(work) / f"events-per-pair-{os.getpid()}"
    settings = event_log(events)
    started = time.perf_counter()
    session = zones_spark.session(master, settings=settings)
    start = time.perf_counter() - started
    try:
        _per_pair_job(_job_args(Path(work), master, no_class_archive=True), session.spark)
    finally:
        zones_spark.stop_session(session.spark)
    elapsed = time.perf_counter() - started
    conn.send(SparkResult(start, elapsed - start, _answers(Path(work)), phases(events)))


def _answers(work: Path) -> int:
    return int(pq.ParquetDataset(work / "out" / "answers").read(columns=["response"]).num_rows)


def event_log(events: Path) -> dict[str, str]:
    """Spark settings that write the event log (for the phases) into the folder `events`."""
    events.mkdir(exist_ok=True)
    return {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.compress": "false",
        "spark.eventLog.dir": events.as_uri(),
    }


def submit_args(settings: dict[str, str]) -> str:
    """`settings` as spark-submit's --conf in PYSPARK_SUBMIT_ARGS."""
    submit = " ".join(f"--conf {shlex.quote(f'{k}={v}')}" for k, v in settings.items())
    return f"{submit} pyspark-shell"


def _command(work: Path, master: str, cache: Path | None, conf: tuple[str, ...]) -> SparkResult:
    """`resolve-zones` as a user runs it, timed from its start to its exit (the JVM's start
    included): its own SparkSession, with the default class archive in `cache` (the user's
    cache, $XDG_CACHE_HOME; None: `--no-class-archive`). Spark's event log (for the phases)
    and `conf` come as spark-submit's `--conf` in PYSPARK_SUBMIT_ARGS, the same for every run
    (the default archive's name depends on it; a spark-defaults.conf would put a folder that is
    not empty on the class path, where Java archives no classes)."""
    events = work / "events"
    settings = {**event_log(events), **dict(item.split("=", 1) for item in conf)}
    env = {**os.environ, "PYSPARK_SUBMIT_ARGS": submit_args(settings)}
    if cache is not None:
        env["XDG_CACHE_HOME"] = str(cache)
    argv = [
        sys.executable, "-m", "pulsar_lookup_gateway", "resolve-zones",
        "--metadata", f"file:{work / 'snapshot.json'}",
        "--topics", str(work / "topics.parquet"),
        "--zones", str(work / "zones.csv"),
        "--out", str(work / "out"),
        "--master", master,
        *([] if cache is not None else ["--no-class-archive"]),
    ]  # fmt: skip
    earlier = set(events.iterdir())
    # output to files, not pipes: the command's end is its own exit, not that of every process
    # holding its output open
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        began, started = time.time(), time.perf_counter()
        code = subprocess.run(argv, env=env, stdout=out, stderr=err, timeout=900).returncode
        elapsed = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if code != 0:
        raise RuntimeError(f"resolve-zones exited with {code}: {stderr[-2000:]}")
    said = re.search(r"^class archive: (recorded|used|none|not recorded)", stdout, re.M)
    kind = {"recorded": "recording", "used": "archive"}.get(said[1] if said else "", "no archive")
    if cache is not None and kind == "no archive":
        raise RuntimeError(f"the default class archive was not used: {stdout[-2000:]}")
    run = Path(tempfile.mkdtemp(prefix="events-", dir=work))
    for log in set(events.iterdir()) - earlier:
        log.rename(run / log.name)
    start = _application_start(run) - began
    result = SparkResult(start, elapsed - start, _answers(work), phases(run), kind)
    shutil.rmtree(run, ignore_errors=True)
    return result


def _application_start(events: Path) -> float:
    """When Spark's application (its SparkContext) started, from the event log: epoch s."""
    for log in _event_logs(events):
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event["Event"] == "SparkListenerApplicationStart":
                return float(event["Timestamp"]) / 1000
    raise RuntimeError(f"no application start in {events}")


def _become_subreaper() -> bool:
    """Orphans of our children (the JVM once its Python exits, its Python workers) are
    re-parented to this process, so that reaping them counts their CPU in RUSAGE_CHILDREN.
    Linux only; False elsewhere (the CPU figure then misses them)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _children() -> set[int]:
    me = os.getpid()
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == me:
                found.add(int(entry.name))
    return found


def _reap_orphans(keep: set[int], deadline_s: float = 300.0) -> None:
    """Waits for every child but `keep` (orphans re-parented here) to exit, and reaps it."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            return
        if not _children() - keep:
            return
        time.sleep(0.05)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_spark(
    work: Path,
    master: str,
    plan: str,
    cache: Path | None = None,
    conf: tuple[str, ...] = (),
) -> SparkResult:
    """One job in a fresh process (a cold JVM): the fast plan as the `resolve-zones` command
    (`_command`), the per-pair plan in a child of ours. Its `cpu_s` is the CPU of the whole
    process tree (Python, the JVM with its compiler and collector threads, the Python
    workers), when this process can be their subreaper."""
    resource_tracker.ensure_running()  # a child of ours that outlives the run
    tree = _become_subreaper()
    before_children, before_cpu = _children(), _children_cpu()
    load = os.getloadavg()[0]
    try:
        fast = plan == "fast"
        result = _command(work, master, cache, conf) if fast else _in_child(work, master)
    finally:
        if tree:
            _reap_orphans(before_children)
    result.cpu_s = _children_cpu() - before_cpu
    result.load = load
    shutil.rmtree(work / "out", ignore_errors=True)
    return result


def _in_child(work: Path, master: str) -> SparkResult:
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=_per_pair_child, args=(str(work), master, child))
    process.start()
    try:
        deadline = time.monotonic() + 900
        while not parent.poll(1):
            if not process.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the per-pair Spark job failed or did not finish")
        result: SparkResult = parent.recv()
    finally:
        process.join(60)
        if process.is_alive():
            process.kill()
    return result


def _event_logs(events: Path) -> list[Path]:
    """Spark's event log files under `events`: not a rolling log's status marker, checksums."""
    return [
        p for p in sorted(events.rglob("*"))
        if p.is_file() and not p.name.startswith(("appstatus", "."))
    ]  # fmt: skip


def phases(events: Path) -> dict[str, tuple[float, float]]:
    """From a Spark event log: per job description, (wall time from the first job's start to
    the last one's end, CPU time of their tasks), in seconds."""
    spans: dict[str, list[float]] = {}
    cpu: dict[str, float] = {}
    description: dict[int, str] = {}
    stage_job: dict[int, int] = {}
    for log in _event_logs(events):
        for line in log.read_text().splitlines():
            event = json.loads(line)
            kind = event["Event"]
            if kind == "SparkListenerJobStart":
                name = (event.get("Properties") or {}).get("spark.job.description") or "(other)"
                description[event["Job ID"]] = name
                for stage in event["Stage IDs"]:
                    stage_job[stage] = event["Job ID"]
                span = spans.setdefault(name, [event["Submission Time"], event["Submission Time"]])
                span[0] = min(span[0], event["Submission Time"])
            elif kind == "SparkListenerJobEnd":
                span = spans[description[event["Job ID"]]]
                span[1] = max(span[1], event["Completion Time"])
            elif kind == "SparkListenerTaskEnd":
                name = description.get(stage_job.get(event["Stage ID"], -1), "(other)")
                metrics = event.get("Task Metrics") or {}
                cpu[name] = cpu.get(name, 0.0) + metrics.get("Executor CPU Time", 0) / 1e9
    return {name: ((s[1] - s[0]) / 1000, cpu.get(name, 0.0)) for name, s in spans.items()}


# -- the HTTP baseline ----------------------------------------------------------------------------


def _serve(snapshot_path: str, conn: Connection) -> None:
    """Child process: the gateway's HTTP app on 127.0.0.1, until the parent says stop."""
    from pulsar_lookup_gateway.http_api.app import build_app
    from pulsar_lookup_gateway.http_api.server import HttpServer
    from pulsar_lookup_gateway.http_api.settings import HttpSettings
    from pulsar_lookup_gateway.listeners.endpoints.addresses import Endpoint, Scheme
    from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
    from pulsar_lookup_gateway.metadata_store.file import FileSource
    from pulsar_lookup_gateway.serving.service import LookupService

    async def serve() -> None:
        source = FileSource(snapshot_path, poll_interval=3600)
        await source.start()
        service = LookupService(source, internal_listener="internal")
        app = build_app(service, HttpSettings(None))
        spec = SocketSpec(Endpoint(Scheme.HTTP, "127.0.0.1", 0), None, "bench socket")
        server = HttpServer(spec, app)
        await server.start()
        conn.send(server.port)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, conn.recv)  # "stop"
        await server.stop(5)
        await source.close()

    asyncio.run(serve())


def lookup_path(topic: str, zone: Zone) -> str:
    domain, _, rest = topic.partition("://")
    tenant, namespace, local = rest.split("/", 2)
    parts = "/".join(quote(p, safe="") for p in (domain, tenant, namespace, local))
    return f"/lookup/v2/topic/{parts}?listenerName={zone.listener}"


async def _sequential(port: int, paths: list[str]) -> tuple[float, dict[int, int]]:
    statuses: dict[int, int] = {}
    timeout = ClientTimeout(total=10)
    async with ClientSession(connector=TCPConnector(limit=1), timeout=timeout) as session:
        base = f"http://127.0.0.1:{port}"
        for path in paths[:500]:  # warm-up: connection, caches
            async with session.get(base + path, allow_redirects=False) as response:
                await response.read()
        started = time.perf_counter()
        for path in paths:
            async with session.get(base + path, allow_redirects=False) as response:
                await response.read()
                statuses[response.status] = statuses.get(response.status, 0) + 1
        return time.perf_counter() - started, statuses


def run_http(work: Path, topics: int, sample: int) -> tuple[float, dict[int, int]]:
    rng = random.Random(8)
    paths = [
        lookup_path(topic_name(rng.randrange(topics)), rng.choice(ZONES)) for _ in range(sample)
    ]
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=_serve, args=(str(work / "snapshot.json"), child))
    process.start()
    try:
        if not parent.poll(60):
            raise RuntimeError("the gateway did not start")
        port = parent.recv()
        elapsed, statuses = asyncio.run(asyncio.wait_for(_sequential(port, paths), 600))
    finally:
        parent.send("stop")
        process.join(30)
        if process.is_alive():
            process.kill()
    return sample / elapsed, statuses


def python_cost_us(topics: int = 20_000) -> float:
    """Microseconds per (topic, zone) pair of the per-pair plan's batch work, in this process."""
    from pulsar_lookup_gateway.lookup.resolve import ResolvePolicy
    from pulsar_lookup_gateway.lookup.view import ClusterView
    from pulsar_lookup_gateway.zones.pairs import resolve_pairs

    view = ClusterView.from_snapshot(snapshot())
    texts = [topic_name(i) for i in range(topics)]
    resolve_pairs(texts[:1000], ZONES, view, ResolvePolicy())  # parse caches
    started = time.perf_counter()
    columns = resolve_pairs(texts, ZONES, view, ResolvePolicy())
    pa.RecordBatch.from_pydict(columns, schema=ARROW_SCHEMA)
    return (time.perf_counter() - started) / (topics * len(ZONES)) * 1e6


def table_cost_s() -> tuple[float, int]:
    """Seconds to build the fast plan's answer table on the driver, and its resolve_pairs
    calls (one per bundle and domain), in this process."""
    from pulsar_lookup_gateway.lookup.resolve import ResolvePolicy
    from pulsar_lookup_gateway.lookup.view import ClusterView
    from pulsar_lookup_gateway.zones.answer_table import build_table

    nodes = snapshot()
    started = time.perf_counter()
    table = build_table(nodes, ClusterView.from_snapshot(nodes), ZONES, ResolvePolicy())
    return time.perf_counter() - started, table.resolved


# -- BENCHMARKS.md ---------------------------------------------------------------------------------


#: Spark job descriptions of the fast plan (zones.spark), in the order they run.
PHASES = (
    (
        "resolve-zones: write the answers",
        "read, parse, route and write the answers (Parquet by zone; the routed rows cached)",
    ),
    ("resolve-zones: count the answer keys", "count the answer keys (from the cache)"),
    ("resolve-zones: write the per-pair answers", "write the per-pair answers"),
    ("resolve-zones: summary", "summary"),
)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.zones", description=__doc__)
    parser.add_argument("--topics", type=int, default=1_000_000)
    parser.add_argument("--sample", type=int, default=10_000, help="sequential HTTP lookups")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--no-per-pair", action="store_true", help="skip the per-pair plan (it takes minutes)"
    )
    parser.add_argument(
        "--no-class-archive",
        action="store_true",
        help="only runs without a class-data archive (as `resolve-zones --no-class-archive`); "
        "by default the first fast-plan run records the default archive in a fresh cache "
        "folder, and then runs with it mapped and without one alternate",
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=1,
        help="rounds of the fast plan's runs (archive mapped, then none), after the recording",
    )
    parser.add_argument("--no-write", action="store_true", help="do not update BENCHMARKS.md")
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for the fast plan's runs (A/B runs; repeatable), given as "
        "spark-submit's --conf: spark.driver.extraJavaOptions replaces the job's own (the "
        "collector, the compiler thresholds, the class archive)",
    )
    parser.add_argument("--out", type=Path, default=Path("BENCHMARKS.md"))
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench-zones-") as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        (work / "snapshot.json").write_text(json.dumps(snapshot()))
        write_topics(work / "topics.parquet", args.topics)
        write_zones(work / "zones.csv")
        print(f"generated {args.topics:,} topics in {time.perf_counter() - started:.1f} s")

        http_rate, statuses = run_http(work, args.topics, args.sample)
        print(f"HTTP: {http_rate:,.0f} sequential lookups/s; statuses {statuses}", flush=True)
        old = None if args.no_per_pair else run_spark(work, args.master, "per-pair")
        if old is not None:
            print(f"per-pair plan: {_described_run(old)}", flush=True)
        conf = tuple(args.conf)
        # resolve-zones' default: the class archive in the user's cache, here a fresh one
        cache = None if args.no_class_archive else work / "cache"
        recording = None
        if cache is not None:
            recording = run_spark(work, args.master, "fast", cache, conf)
            print(f"fast plan, {_described_run(recording)}", flush=True)
            if recording.kind != "recording" or not list(cache.rglob("*.jsa")):
                raise RuntimeError("the first run recorded no class archive")
        mapped: list[SparkResult] = []
        cold: list[SparkResult] = []
        for _ in range(args.runs):  # alternated: the load of the others' work varies
            if cache is not None:
                mapped.append(run_spark(work, args.master, "fast", cache, conf))
                print(f"fast plan, {_described_run(mapped[-1])}", flush=True)
            cold.append(run_spark(work, args.master, "fast", None, conf))
            print(f"fast plan, {_described_run(cold[-1])}", flush=True)

    expected = args.topics * len(ZONES)
    for result in (old, recording, *mapped, *cold):
        if result is not None and result.pairs != expected:
            raise RuntimeError(f"the job wrote {result.pairs} answers, expected {expected}")
    new = _median(mapped or cold)  # the default: the archive mapped
    table_s, table_answers = table_cost_s()
    core_us = python_cost_us()
    pairs = new.pairs
    http_time = pairs / http_rate
    statuses_text = ", ".join(f"{n:,} x {status}" for status, n in sorted(statuses.items()))
    setup = (
        f"{args.topics:,} topics (one Parquet file) x {len(ZONES)} zones (dc: internal; "
        "internet: external, TLS; partner: a listener 5 of the 20 brokers lack) on a snapshot "
        f"of {BROKERS} brokers and {NAMESPACES} namespaces x {BUNDLES} bundles (90% owned). "
        f"**Spark**: `resolve-zones` (`zones.cli.run`) on `{args.master}`, from reading the "
        "snapshot file to the Parquet answers, the summary CSV and the PNG, each run in a "
        "fresh process (a cold JVM); by default its driver JVM maps the class-data archive "
        "that the first run recorded in the user's cache (here a fresh one). **Fast plan** "
        "(the job's): the driver answers every (bundle, domain) once with `resolve_pairs`, "
        "Spark's engine looks the answers up. **Per-pair plan** (before): `resolve()` for "
        "every pair in the Python workers, the summary read back from the Parquet. "
        "**Baseline**: the gateway's HTTP lookup route (`build_app` + `LookupService` + "
        "`FileSource` on the same snapshot, in one child process), asked one lookup at a time "
        f"over one keep-alive connection on 127.0.0.1: {args.sample:,} random (topic, zone) "
        f"pairs ({statuses_text}), extrapolated to the same number of pairs. **Times**: the "
        "command (`python -m pulsar_lookup_gateway resolve-zones`) from its start to its exit; "
        "'to Spark's start': to the SparkContext's start in Spark's event log (the JVM "
        "launched); the per-pair plan's: to its SparkSession. **CPU**: of the "
        "whole process tree (the job's Python, the JVM with its compiler and collector "
        "threads, the Python workers), which the others' load on the cores does not change much."
    )

    def row(what: str, seconds: float) -> str:
        return f"| {what} | {pairs:,} | {seconds:.1f} s | {pairs / seconds:,.0f} |"

    rows = [row(f"`resolve-zones`, {_KINDS[new.kind]}: start to exit", new.total_s)]
    if mapped and cold:
        rows.append(row(f"`resolve-zones`, {_KINDS['no archive']}", _median(cold).total_s))
    if recording is not None:
        rows.append(row(f"`resolve-zones`, {_KINDS['recording']}", recording.total_s))
    if old is not None:
        rows += [
            row("Spark job, per-pair plan (before)", old.job_s),
            row("per-pair plan + SparkSession (JVM) start", old.total_s),
        ]
    rows.append(
        f"| sequential HTTP lookups (extrapolated) | {pairs:,} | {http_time:,.0f} s "
        f"| {http_rate:,.0f} |"
    )
    if old is not None:
        rows.append(
            f"| **fast / per-pair plan, JVM start included** | | | "
            f"**{old.total_s / new.total_s:.1f}x** |"
        )
    rows.append(f"| **fast plan / sequential HTTP** | | | **{http_time / new.total_s:.0f}x** |")
    each = [
        f"| {_KINDS[r.kind]} | {r.load:.1f} | {r.session_start_s:.1f} s | {r.job_s:.1f} s "
        f"| {r.total_s:.1f} s | {r.cpu_s:.1f} s |"
        for r in (recording, *mapped, *cold, old)
        if r is not None
    ]

    cpu = sum(c for _w, c in new.phases.values())
    steps = [f"from the start to Spark's (the JVM launched) {new.session_start_s:.1f} s"]
    spent = 0.0
    for description, what in PHASES:
        if description in new.phases:
            wall, task_cpu = new.phases[description]
            spent += wall
            steps.append(f"{what} {wall:.1f} s ({task_cpu:.1f} s of task CPU)")
    steps.append(
        f"the rest {new.job_s - spent:.1f} s (the SparkContext and session, reading the "
        "topics' schema, query planning and code generation on the driver; the summary; CSV "
        "and PNG; Spark's stop)"
    )
    where = (
        f"- Where the time goes (the default run, Spark's event log): {'; '.join(steps)}. Task "
        f"CPU in all: {cpu:.1f} s of the {new.cpu_s:.1f} s of CPU of the process tree (the rest: "
        "the JIT compilers, class loading, query planning, the Python processes). The answer "
        f"table: {table_answers:,} `resolve_pairs` calls in {1000 * table_s:.0f} ms (measured in "
        "this process)."
    )
    before = (
        f"- The per-pair plan answered a pair in {core_us:.1f} us of Python "
        "(`zones.pairs.resolve_pairs`, measured in this run, no Spark): at most "
        f"{2e6 / core_us:,.0f} pairs/s on 2 cores, before Spark's own work."
    )
    total = new.total_s
    command = f".venv/bin/python -m bench.zones --topics {args.topics} --sample {args.sample}"
    lines = [
        SECTION,
        "",
        "```",
        command + "".join(f" --{flag}" for flag in _flags(args)),
        "```",
        "",
        *textwrap.wrap(setup, 100),
        "",
        f"Python {platform.python_version()}, {os.cpu_count()} cores shared with other work.",
        "",
        "| what | pairs | time | pairs/s |",
        "|---|---|---|---|",
        *rows,
        "",
        "| run (in this order) | load average | to Spark's start | then | total | CPU of all "
        "processes |",
        "|---|---|---|---|---|---|",
        *each,
        "",
        f"Goal: {expected:,} pairs in at most 20 s on `{args.master}`, JVM start included: "
        f"**{'met' if total <= 20 else 'not met'}** ({total:.1f} s, {_KINDS[new.kind]}"
        f"{f', the median of {len(mapped or cold)} runs' if len(mapped or cold) > 1 else ''}).",
        "",
        *textwrap.wrap(where, 100, subsequent_indent="  "),
        *textwrap.wrap(before, 100, subsequent_indent="  "),
    ]
    print("\n".join(lines))
    if not args.no_write:
        write_section(args.out, SECTION, lines)
        print(f"wrote {SECTION!r} in {args.out}")


_KINDS = {
    "archive": "default (class archive mapped)",
    "no archive": "`--no-class-archive`",
    "recording": "the first run (recording the class archive)",
    "": "per-pair plan",
}


def _described_run(result: SparkResult) -> str:
    return (
        f"{_KINDS[result.kind]}: {result.session_start_s:.1f} s + {result.job_s:.1f} s = "
        f"{result.total_s:.1f} s; CPU of all processes {result.cpu_s:.1f} s; load average "
        f"{result.load:.1f}"
    )


def _median(results: list[SparkResult]) -> SparkResult:
    return sorted(results, key=lambda r: r.total_s)[len(results) // 2]


def _flags(args: argparse.Namespace) -> list[str]:
    flags = [f"runs {args.runs}"] if args.runs != 1 else []
    flags += [
        name for name in ("no-per-pair", "no-class-archive") if vars(args)[name.replace("-", "_")]
    ]
    return flags + [f"conf {item}" for item in args.conf]


if __name__ == "__main__":
    main(sys.argv[1:])
