"""resolve-zones: every (topic, zone) pair resolved on Spark with the gateway's own resolve().

A zone is a network that reaches the cluster through one advertised listener. The driver takes
one metadata snapshot (a ZooKeeper dump or a snapshot file) and broadcasts it; each executor
process builds one ClusterView from it and answers every pair with `lookup.resolve.resolve`, the
function the gateway answers live lookups with. No row reads ZooKeeper or calls the gateway.

Output (`run`): Parquet answers partitioned by zone, a summary per zone x broker (printed, and
written as CSV) and a PNG chart of each zone's topic share per broker.

This module imports pyspark and pyarrow: it is not part of the pure core. The command line
imports it only when `resolve-zones` runs.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys
import time
import uuid
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from lookup.errors import LookupFailure, MalformedNode
from lookup.metadata_url import MetadataUrl, parse_metadata_url
from lookup.model import BROKERS_ROOT, parse_broker
from lookup.resolve import (
    ResolvePolicy,
    UnownedBundleRedirect,
    namespace_bundle,
    resolve,
    resolve_partitions,
)
from lookup.selection import ChoiceSource, ListenerChoice
from lookup.snapshot import SnapshotError, read_snapshot
from lookup.topics import TopicName
from lookup.view import ClusterView

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

CONNECT, REDIRECT, FAILED = "connect", "redirect", "failed"
FAILED_PREFIX = "failed:"  # summary rows of failed answers: "failed:<ServerError name>"
UNKNOWN_BROKER = "(unknown)"  # an owner the snapshot cannot name (no brokerId, no known URL)

# The answer columns, in order. `zone` is the Parquet partition column.
COLUMNS = (
    "topic",  # the full name resolved (a partition's own name); the input text if it is invalid
    "partition",  # partition index; null for a non-partitioned topic or an invalid name
    "zone",
    "listener",
    "bundle",  # 0xLOWER_0xUPPER; null when the namespace does not exist or the name is invalid
    "response",  # connect | redirect | failed
    "broker_id",  # the broker the answer points to (owner, leader or chosen broker)
    "service_url",  # the URL the zone's clients use: TLS when the zone's tls column is true
    "service_url_tls",
    "authoritative",  # null for failed answers
    "error",  # "<ServerError name>: <message>" for failed answers, else null
)
ARROW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("zone", pa.string()),
        ("listener", pa.string()),
        ("bundle", pa.string()),
        ("response", pa.string()),
        ("broker_id", pa.string()),
        ("service_url", pa.string()),
        ("service_url_tls", pa.string()),
        ("authoritative", pa.bool_()),
        ("error", pa.string()),
    ]
)
SPARK_SCHEMA = (
    "topic STRING, `partition` INT, zone STRING, listener STRING, bundle STRING, "
    "response STRING, broker_id STRING, service_url STRING, service_url_tls STRING, "
    "authoritative BOOLEAN, error STRING"
)
SUMMARY_COLUMNS = (
    "zone",
    "listener",
    "broker",
    "topics",
    "connect",
    "redirect",
    "no_url",
    "share",
)

# Zone names become directory names (zone=<name>); listener names follow reference §1.
_ZONE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_LISTENER_NAME = re.compile(r"[A-Za-z0-9_-]{1,128}")
_TRUE = frozenset({"true", "yes", "1", "tls", "y"})
_FALSE = frozenset({"false", "no", "0", "", "n"})


class ZonesError(ValueError):
    """Input the job cannot use: a zones file, a topics path or format. Says what and where."""


# -- zones ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Zone:
    """A network zone: its clients reach the cluster through `listener`, over TLS if `tls`."""

    name: str
    listener: str
    tls: bool = False

    @property
    def choice(self) -> ListenerChoice:
        # The zone's clients name their listener, as the gateway's listenerName query does.
        return ListenerChoice(self.listener, ChoiceSource.EXPLICIT)


def parse_zones(text: str, origin: str) -> list[Zone]:
    """CSV lines `zone,listener[,tls]`; an optional header line; blank and `#` lines skipped."""
    zones: list[Zone] = []
    seen: set[str] = set()
    for number, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        cells = [cell.strip() for cell in row]
        if not cells or not any(cells) or cells[0].startswith("#"):
            continue
        where = f"{origin}:{number}"
        if not zones and cells[0].lower() == "zone":
            continue  # header
        if len(cells) not in (2, 3):
            raise ZonesError(f"{where}: expected zone,listener[,tls], got {len(cells)} fields")
        name, listener = cells[0], cells[1]
        if not _ZONE_NAME.fullmatch(name):
            raise ZonesError(f"{where}: zone {name!r}: use letters, digits, '_', '-' and '.'")
        if not _LISTENER_NAME.fullmatch(listener):
            raise ZonesError(
                f"{where}: zone {name!r}: listener {listener!r}: use letters, digits, '_', '-'"
            )
        flag = cells[2].lower() if len(cells) == 3 else ""
        if flag not in _TRUE and flag not in _FALSE:
            raise ZonesError(f"{where}: zone {name!r}: tls {cells[2]!r} is not true or false")
        if name in seen:
            raise ZonesError(f"{where}: zone {name!r} is listed twice")
        seen.add(name)
        zones.append(Zone(name, listener, flag in _TRUE))
    if not zones:
        raise ZonesError(f"{origin}: no zones (expected lines of zone,listener[,tls])")
    return zones


def read_zones(path: str | Path) -> list[Zone]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ZonesError(f"cannot read {path}: {exc}") from None
    return parse_zones(text, str(path))


def listener_gaps(nodes: Mapping[str, Any], zones: Sequence[Zone]) -> list[str]:
    """Warnings for zones whose listener some registered brokers do not advertise."""
    brokers: dict[str, set[str]] = {}
    prefix = BROKERS_ROOT + "/"
    for path, content in nodes.items():
        if path.startswith(prefix) and "/" not in path[len(prefix) :]:
            try:
                brokers[path[len(prefix) :]] = set(parse_broker(path, content).advertised_listeners)
            except MalformedNode:
                continue
    warnings_: list[str] = []
    for zone in zones:
        missing = sorted(b for b, names in brokers.items() if zone.listener not in names)
        if missing:
            shown = ", ".join(missing[:10]) + (", ..." if len(missing) > 10 else "")
            warnings_.append(
                f"zone {zone.name}: listener {zone.listener!r} is missing on "
                f"{len(missing)} of {len(brokers)} brokers ({shown})"
            )
    return warnings_


# -- one batch of topics, pure Python (the executors run this) ----------------------------------


def describe_failure(failure: LookupFailure) -> str:
    return f"{failure.code.name}: {failure.message}"


def expand_topic(name: TopicName, view: ClusterView) -> list[TopicName]:
    """A partitioned topic's partitions (per the snapshot's partitioned-topic metadata); any
    other name as it is. Fails as the gateway's partitions lookup fails (unknown namespace)."""
    if name.is_partition:
        return [name]
    count = resolve_partitions(name, view)
    if count == 0:
        return [name]
    return [name.partition(i) for i in range(count)]


def _bundle_or_none(name: TopicName, view: ClusterView, policy: ResolvePolicy) -> str | None:
    try:
        return namespace_bundle(name, view, policy).name
    except LookupFailure:
        return None


def resolve_pairs(
    texts: Iterable[str | None],
    zones: Sequence[Zone],
    view: ClusterView,
    policy: ResolvePolicy,
) -> dict[str, list[Any]]:
    """The answer columns for every (topic, zone) pair of `texts` (one name each). Each name is
    parsed once and resolved once per distinct listener; zones that share a listener share the
    answer. A failed lookup is a row, never an exception."""
    columns: dict[str, list[Any]] = {name: [] for name in COLUMNS}
    add_topic = columns["topic"].append
    add_partition = columns["partition"].append
    add_zone = columns["zone"].append
    add_listener = columns["listener"].append
    add_bundle = columns["bundle"].append
    add_response = columns["response"].append
    add_broker = columns["broker_id"].append
    add_url = columns["service_url"].append
    add_url_tls = columns["service_url_tls"].append
    add_authoritative = columns["authoritative"].append
    add_error = columns["error"].append

    listeners = list(dict.fromkeys(zone.listener for zone in zones))
    choices = [ListenerChoice(name, ChoiceSource.EXPLICIT) for name in listeners]
    plan = [(zone.name, zone.listener, zone.tls, listeners.index(zone.listener)) for zone in zones]

    def failed(topic: str | None, partition: int | None, bundle: str | None, error: str) -> None:
        for zone_name, listener, _tls, _index in plan:
            add_topic(topic)
            add_partition(partition)
            add_zone(zone_name)
            add_listener(listener)
            add_bundle(bundle)
            add_response(FAILED)
            add_broker(None)
            add_url(None)
            add_url_tls(None)
            add_authoritative(None)
            add_error(error)

    for text in texts:
        try:
            name = TopicName.parse(text if text is not None else "")
        except LookupFailure as failure:
            failed(text, None, None, describe_failure(failure))
            continue
        try:
            targets = expand_topic(name, view)
        except LookupFailure as failure:
            failed(name.full, None, _bundle_or_none(name, view, policy), describe_failure(failure))
            continue
        for target in targets:
            partition = target.partition_index if target.partition_index >= 0 else None
            answers: list[Any] = []
            for choice in choices:
                try:
                    answers.append(resolve(target, choice, view, policy))
                except LookupFailure as failure:
                    answers.append(failure)
            failure_bundle: str | None = None
            failure_bundle_known = False
            for zone_name, listener, tls, index in plan:
                answer = answers[index]
                add_topic(target.full)
                add_partition(partition)
                add_zone(zone_name)
                add_listener(listener)
                if isinstance(answer, LookupFailure):
                    if not failure_bundle_known:
                        failure_bundle = _bundle_or_none(target, view, policy)
                        failure_bundle_known = True
                    add_bundle(failure_bundle)
                    add_response(FAILED)
                    add_broker(None)
                    add_url(None)
                    add_url_tls(None)
                    add_authoritative(None)
                    add_error(describe_failure(answer))
                else:
                    urls = answer.urls
                    add_bundle(answer.bundle.name)
                    add_response(answer.response.value)
                    add_broker(answer.broker_id)
                    add_url(urls.service_url_tls if tls else urls.service_url)
                    add_url_tls(urls.service_url_tls)
                    add_authoritative(answer.authoritative)
                    add_error(None)
    return columns


# -- the Spark side -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _SharedSnapshot:
    """The broadcast snapshot and a token naming it; only the token is read per task."""

    token: str
    broadcast: Any  # pyspark Broadcast[dict[str, Any]]


# One ClusterView per executor Python process (workers are reused across tasks), for the
# snapshot of the job that runs now; a new snapshot replaces it.
_VIEWS: dict[str, ClusterView] = {}


def _executor_view(shared: _SharedSnapshot) -> ClusterView:
    view = _VIEWS.get(shared.token)
    if view is None:
        _VIEWS.clear()
        view = ClusterView.from_snapshot(shared.broadcast.value)
        _VIEWS[shared.token] = view
    return view


def _resolve_batches(
    shared: _SharedSnapshot,
    zones: Sequence[Zone],
    policy: ResolvePolicy,
    batches: Iterator[Any],
) -> Iterator[Any]:
    """mapInArrow: record batches of one `topic` column in, answer batches out."""
    view = _executor_view(shared)
    for batch in batches:
        texts = batch.column(0).to_pylist()
        columns = resolve_pairs(texts, zones, view, policy)
        yield pa.RecordBatch.from_pydict(columns, schema=ARROW_SCHEMA)


def resolve_zones(
    spark: Any,
    nodes: dict[str, Any],
    topics_df: Any,
    zones: list[Zone],
    policy: ResolvePolicy,
    *,
    partitions: int | None = None,
) -> Any:
    """A DataFrame of the answer COLUMNS for every (topic, zone) pair: `topics_df` has a
    `topic` column; `nodes` is the snapshot (znode path -> JSON content) every answer reads.

    Lazy: nothing runs until the DataFrame is written or collected."""
    if "topic" not in topics_df.columns:
        raise ZonesError(f"the topics have no 'topic' column (columns: {topics_df.columns})")
    if not zones:
        raise ZonesError("no zones")
    from pyspark.sql import functions as F

    context = spark.sparkContext
    shared = _SharedSnapshot(uuid.uuid4().hex, context.broadcast(nodes))
    topics = topics_df.select(F.col("topic").cast("string").alias("topic"))
    wanted = partitions or 2 * context.defaultParallelism
    if partitions is not None or topics.rdd.getNumPartitions() < wanted:
        topics = topics.repartition(wanted)
    return topics.mapInArrow(partial(_resolve_batches, shared, list(zones), policy), SPARK_SCHEMA)


def detect_topics_format(path: str) -> str:
    """parquet, csv or text, from the name, or from the files inside a local directory."""
    lowered = path.lower().rstrip("/")
    if lowered.endswith((".parquet", ".pq")):
        return "parquet"
    if lowered.endswith((".csv", ".csv.gz", ".csv.bz2")):
        return "csv"
    local = _local_path(path)
    if local is not None and local.is_dir():
        names = [
            p.name.lower()
            for p in local.rglob("*")
            if p.is_file() and not p.name.startswith((".", "_"))
        ]
        if any(n.endswith((".parquet", ".pq")) for n in names):
            return "parquet"
        if any(n.endswith(".csv") or ".csv." in n for n in names):
            return "csv"
    return "text"


def _local_path(path: str) -> Path | None:
    if path.startswith("file:"):
        return Path(path[len("file:") :].removeprefix("//"))
    if "://" in path:
        return None
    return Path(path)


def read_topics(spark: Any, path: str, topics_format: str) -> Any:
    """A DataFrame with one string column `topic`."""
    from pyspark.sql import functions as F

    if topics_format == "parquet":
        frame = spark.read.parquet(path)
    elif topics_format == "csv":
        frame = spark.read.option("header", "true").csv(path)
    elif topics_format == "text":
        frame = spark.read.text(path).withColumnRenamed("value", "topic")
        frame = frame.where(F.trim(F.col("topic")) != "")
    else:
        raise ZonesError(f"unknown topics format {topics_format!r}")
    if "topic" not in frame.columns:
        raise ZonesError(f"{path}: no 'topic' column (columns: {', '.join(frame.columns)})")
    return frame.select(F.col("topic").cast("string").alias("topic"))


# -- the summary -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SummaryRow:
    zone: str
    listener: str
    broker: str  # a broker id, or failed:<ServerError name> for failed answers
    topics: int  # answers (a partition counts as a topic)
    connect: int
    redirect: int
    no_url: int  # answers whose broker has no URL for the zone's scheme (plain or TLS)
    share: float  # topics / the zone's answers

    def cells(self) -> tuple[str, ...]:
        return (
            self.zone,
            self.listener,
            self.broker,
            str(self.topics),
            str(self.connect),
            str(self.redirect),
            str(self.no_url),
            f"{self.share:.6f}",
        )


def build_summary(
    counts: Iterable[tuple[str, str, str, int, int]], zones: Sequence[Zone]
) -> list[SummaryRow]:
    """From (zone, broker, response, answers, answers without a URL) counts: one row per zone
    and broker, failed answers grouped per error code; zones in the given order, then brokers
    by topics (descending) and id, failures last."""
    per: dict[tuple[str, str], list[int]] = {}  # -> [connect, redirect, failed, no_url]
    for zone_name, broker, response, count, no_url in counts:
        tally = per.setdefault((zone_name, broker), [0, 0, 0, 0])
        tally[{CONNECT: 0, REDIRECT: 1}.get(response, 2)] += count
        tally[3] += no_url
    rows: list[SummaryRow] = []
    for zone in zones:
        entries = [(b, t, sum(t[:3])) for (z, b), t in per.items() if z == zone.name]
        total = sum(topics for _b, _t, topics in entries)
        entries.sort(key=lambda e: (e[0].startswith(FAILED_PREFIX), -e[2], e[0]))
        for broker, tally, topics in entries:
            rows.append(
                SummaryRow(
                    zone.name,
                    zone.listener,
                    broker,
                    topics,
                    tally[0],
                    tally[1],
                    tally[3],
                    topics / total if total else 0.0,
                )
            )
    return rows


def summarize(spark: Any, answers_path: str, zones: Sequence[Zone]) -> list[SummaryRow]:
    """The summary of written answers (reads four columns of the Parquet back)."""
    from pyspark.sql import functions as F

    frame = spark.read.schema(SPARK_SCHEMA).parquet(answers_path)
    is_failed = F.col("response") == FAILED
    broker = F.when(
        is_failed, F.concat(F.lit(FAILED_PREFIX), F.substring_index(F.col("error"), ":", 1))
    ).otherwise(F.coalesce(F.col("broker_id"), F.lit(UNKNOWN_BROKER)))
    no_url = F.when(~is_failed & F.col("service_url").isNull(), 1).otherwise(0)
    grouped = frame.groupBy(F.col("zone"), broker.alias("broker"), F.col("response")).agg(
        F.count(F.lit(1)).alias("answers"), F.sum(no_url).alias("no_url")
    )
    counts = [
        (r["zone"], r["broker"], r["response"], int(r["answers"]), int(r["no_url"]))
        for r in grouped.collect()
    ]
    return build_summary(counts, zones)


def write_summary_csv(rows: Sequence[SummaryRow], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(SUMMARY_COLUMNS)
        writer.writerows(row.cells() for row in rows)


def format_summary(rows: Sequence[SummaryRow]) -> str:
    """The summary as an aligned text table (shares in percent)."""
    header = ("ZONE", "LISTENER", "BROKER", "TOPICS", "CONNECT", "REDIRECT", "NO_URL", "SHARE")
    table: list[tuple[str, ...]] = [header]
    for row in rows:
        table.append((*row.cells()[:-1], f"{100 * row.share:.1f}%"))
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    numeric = range(3, len(header))
    lines = []
    for line in table:
        padded = [
            cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i])
            for i, cell in enumerate(line)
        ]
        lines.append("  ".join(padded).rstrip())
    if not rows:
        lines.append("(no topics)")
    return "\n".join(lines)


def plot_share(rows: Sequence[SummaryRow], zones: Sequence[Zone], path: Path) -> None:
    """A PNG: one horizontal bar per zone, split into each broker's share of its topics;
    failed answers in grey (hatched). Matplotlib's object API with the Agg canvas: no pyplot
    state, no display needed."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    brokers = sorted({r.broker for r in rows if not r.broker.startswith(FAILED_PREFIX)})
    failures = sorted({r.broker for r in rows if r.broker.startswith(FAILED_PREFIX)})
    palette = [
        "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
        "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#86bcb6",
    ]  # fmt: skip
    greys = ["#9e9e9e", "#bdbdbd", "#757575", "#d6d6d6", "#616161"]
    colours = {b: palette[i % len(palette)] for i, b in enumerate(brokers)}
    colours.update({f: greys[i % len(greys)] for i, f in enumerate(failures)})

    figure = Figure(figsize=(11, 1.6 + 0.7 * len(zones)), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    labels = [f"{zone.name}\n({zone.listener}{', tls' if zone.tls else ''})" for zone in zones]
    drawn: set[str] = set()
    for y, zone in enumerate(zones):
        left = 0.0
        for row in (r for r in rows if r.zone == zone.name):
            failed = row.broker.startswith(FAILED_PREFIX)
            axes.barh(
                y,
                row.share,
                left=left,
                color=colours[row.broker],
                edgecolor="white",
                hatch="//" if failed else None,
                label=row.broker if row.broker not in drawn else None,
            )
            drawn.add(row.broker)
            if row.share >= 0.06:
                axes.text(
                    left + row.share / 2,
                    y,
                    f"{100 * row.share:.0f}%",
                    ha="center",
                    va="center",
                    fontsize=8,
                )
            left += row.share
    axes.set_yticks(range(len(zones)), labels)
    axes.invert_yaxis()
    axes.set_xlim(0, 1)
    axes.set_xlabel("share of the zone's topics")
    axes.set_title("Topic share per broker, per zone")
    if drawn:
        axes.legend(
            loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, ncols=1 + len(drawn) // 25
        )
    else:
        axes.text(0.5, 0.5, "no topics", ha="center", va="center", transform=axes.transAxes)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=100)


# -- the job -----------------------------------------------------------------------------------


def load_snapshot(url: MetadataUrl) -> dict[str, Any]:
    """One consistent read of the metadata: the snapshot file, or a dump of ZooKeeper."""
    if url.kind == "file":
        return read_snapshot(url.path)
    from lookup.zk_admin import connect, dump

    client = connect(url.zk_hosts + url.chroot)
    try:
        return dump(client)
    finally:
        client.stop()
        client.close()


def local_session(master: str, *, app_name: str = "resolve-zones", **conf: str) -> Any:
    """A SparkSession for a local master, bound to 127.0.0.1, whose Python workers run this
    interpreter (so they import this package and pyarrow from the same environment)."""
    import os

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings = {
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "8",
        "spark.driver.memory": "2g",
        **conf,
    }
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _session(master: str | None) -> tuple[Any, bool]:
    """(session, whether this job owns it): an active session (a test's, a notebook's) is
    used as it is; otherwise a new one, local or from spark-submit's settings."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    builder = SparkSession.builder.appName("resolve-zones")
    if master is None:  # spark-submit's --master and --conf settings
        return builder.getOrCreate(), True
    if master.startswith("local"):
        return local_session(master), True
    return builder.master(master).getOrCreate(), True


def _fail(message: str, code: int) -> int:
    print(f"resolve-zones: {message}", file=sys.stderr)
    return code


def run(args: argparse.Namespace) -> int:
    """The `resolve-zones` command (arguments: lookup.zones_cli.add_arguments)."""
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    try:
        zones = read_zones(args.zones)
        url = parse_metadata_url(args.metadata)
        topics_format = args.topics_format
        if topics_format == "auto":
            topics_format = detect_topics_format(args.topics)
    except ValueError as exc:  # ZonesError too
        return _fail(str(exc), EXIT_USAGE)
    policy = ResolvePolicy(args.default_bundles, UnownedBundleRedirect(args.unowned_redirect))
    out = Path(args.out)
    answers = args.answers or str(out / "answers")

    started = time.perf_counter()
    try:
        nodes = load_snapshot(url)
    except SnapshotError as exc:
        return _fail(f"--metadata: {exc}", EXIT_USAGE)
    except Exception as exc:  # kazoo's timeouts and connection errors have no common base
        return _fail(f"--metadata: cannot read {url}: {exc!r}", EXIT_FAILED)
    print(f"snapshot: {len(nodes)} znodes from {url}; {len(zones)} zone(s)", flush=True)
    for warning in listener_gaps(nodes, zones):
        print(f"warning: {warning}", flush=True)

    from pyspark.errors import AnalysisException

    spark, owned = _session(args.master)
    try:
        try:
            topics = read_topics(spark, args.topics, topics_format)
        except AnalysisException as exc:
            return _fail(f"--topics: {args.topics} ({topics_format}): {exc}", EXIT_USAGE)
        except ZonesError as exc:
            return _fail(f"--topics: {exc}", EXIT_USAGE)
        frame = resolve_zones(spark, nodes, topics, zones, policy, partitions=args.partitions)
        frame.write.mode("overwrite").partitionBy("zone").parquet(answers)
        rows = summarize(spark, answers, zones)
    finally:
        if owned:
            spark.stop()
    elapsed = time.perf_counter() - started
    summary_path, chart_path = out / "summary.csv", out / "share.png"
    write_summary_csv(rows, summary_path)
    plot_share(rows, zones, chart_path)
    pairs = sum(row.topics for row in rows)
    print(format_summary(rows))
    print(f"resolved {pairs} (topic, zone) pairs in {elapsed:.1f} s -> {answers}")
    print(f"summary: {summary_path}")
    print(f"chart:   {chart_path}")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """`spark-submit [--py-files ...] lookup/zones.py --metadata ... --topics ... ...`"""
    from lookup.zones_cli import build_parser

    args = build_parser("resolve-zones", master_default=None).parse_args(argv)
    return run(args)


if __name__ == "__main__":
    # Run as a script (spark-submit): import the module by its package name, so that the
    # functions Spark ships to the executors are found there by reference (and the executors'
    # per-process view cache lives in one module), not pickled from __main__. The script's own
    # directory would shadow top-level modules with this package's; take it off the path.
    _here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if str(Path(p or ".").resolve()) != _here]
    from lookup.zones import main as _main

    sys.exit(_main())
