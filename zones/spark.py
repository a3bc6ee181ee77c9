"""The Spark side of resolve-zones: the answers of every (topic, zone) pair of a topics DataFrame.

Two plans give the same rows. `plan_zones` (the job's): the driver answers each (bundle, domain)
of the snapshot once with `zones.pairs.resolve_pairs` (`zones.answer_table`), and Spark's own
engine parses the names, expands partitioned topics, finds each bundle by the CRC-32 of the name
and looks its answers up with broadcast joins; only names it cannot answer for sure reach Python.
`per_pair_plan` (the per-pair plan, the reference): the driver broadcasts the snapshot, and each
executor process builds one ClusterView from it and answers every batch of topics with
`resolve_pairs`, which calls the gateway's own resolve(). No row reads ZooKeeper or calls the
gateway. Imports pyarrow (and pyspark where it is used): the command line loads this module only
when the job runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pulsar_lookup_gateway.lookup.resolve import ResolvePolicy
from pulsar_lookup_gateway.lookup.topics import MAX_TOPIC_NAME_BYTES, PARTITION_SUFFIX
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.zones.answer_table import (
    DOMAINS,
    AnswerTable,
    build_table,
    summary_counts,
)
from pulsar_lookup_gateway.zones.class_archive import ClassArchive, default_archive, start_mapping
from pulsar_lookup_gateway.zones.executors import prepare
from pulsar_lookup_gateway.zones.pairs import (
    COLUMNS,
    FAILED,
    FAILED_PREFIX,
    UNKNOWN_BROKER,
    SummaryRow,
    Zone,
    ZonesError,
    build_summary,
    resolve_pairs,
)

# The answer COLUMNS as Arrow (the executors' batches) and Spark (the DataFrame) see them: strings
# but for these two.
_TYPES = {"partition": (pa.int32(), "INT"), "authoritative": (pa.bool_(), "BOOLEAN")}
_STRING = (pa.string(), "STRING")
ARROW_SCHEMA = pa.schema([(name, _TYPES.get(name, _STRING)[0]) for name in COLUMNS])
SPARK_SCHEMA = ", ".join(f"`{name}` {_TYPES.get(name, _STRING)[1]}" for name in COLUMNS)


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


def per_pair_plan(
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
    prepare(spark)
    topics = _spread_topics(spark, topics_df, zones, partitions)
    shared = _SharedSnapshot(uuid.uuid4().hex, spark.sparkContext.broadcast(nodes))
    return topics.mapInArrow(partial(_resolve_batches, shared, list(zones), policy), SPARK_SCHEMA)


def _spread_topics(
    spark: Any, topics_df: Any, zones: Sequence[Zone], partitions: int | None
) -> Any:
    """The plans' input, checked: the `topic` column as strings, over `partitions` partitions,
    or over at least twice the default parallelism (every core gets work)."""
    if "topic" not in topics_df.columns:
        raise ZonesError(f"the topics have no 'topic' column (columns: {topics_df.columns})")
    if not zones:
        raise ZonesError("no zones")
    topics = topics_df.select(F.col("topic").cast("string").alias("topic"))
    wanted = partitions or 2 * spark.sparkContext.defaultParallelism
    if partitions is not None or topics.rdd.getNumPartitions() < wanted:
        topics = topics.repartition(wanted)
    return topics


# -- the fast plan: Spark's own engine looks every answer up ----------------------------------


_MAX_PARTITION = 2**31 - 1
# TopicName's partition suffix rule, in Java's dialect: Python's "." is anything but "\n" and
# fullmatch ends at the very end ("$" in Java would also match before a final line break).
_PARTITIONED = "^[^\\n]+-partition-([0-9]+)\\z"


def _arrow_schema(columns: Sequence[str]) -> Any:
    return pa.schema([(name, _TYPES.get(name, _STRING)[0]) for name in columns])


def _spark_schema(columns: Sequence[str]) -> str:
    return ", ".join(f"`{name}` {_TYPES.get(name, _STRING)[1]}" for name in columns)


@dataclass
class ZonePlan:
    """One job's answers, as lazy DataFrames of the answer columns, and their summary.

    `routed` holds one row per topic, or per partition of a partitioned topic, with its answer
    key; a null key sends the topic text to the per-pair path. `fast` is the table's answers
    for the rows with a key, `nodes` and `policy` what the per-pair path answers the others
    with. `keys` observes the routed rows as `fast` is written: the answer keys' counts (a
    histogram of at least as many bins as there are keys, so exact) and the rows without one."""

    table: AnswerTable
    routed: Any  # DataFrame: topic, partition, key
    fast: Any  # DataFrame of the table's answers
    nodes: dict[str, Any]
    policy: ResolvePolicy
    keys: Any = None  # pyspark Observation over `routed` (see `_observed`)
    _written: bool = False  # the write ran, so `keys` holds the counts
    _keyed: list[tuple[int | None, int]] | None = None
    _per_pair: Any = None

    def write(self, path: str) -> None:
        """The answers as Parquet partitioned by zone (Spark's overwrite mode). The table's
        answers are written in the one pass over the topics, which also counts the answer
        keys; the per-pair path's answers, when any row has no key, are appended (the topics
        read again: unusual names are few)."""
        with _described(self.routed, "resolve-zones: write the answers"):
            self.fast.write.mode("overwrite").partitionBy("zone").parquet(path)
        self._written = self.keys is not None
        if self.per_pair is not None:
            with _described(self.routed, "resolve-zones: write the per-pair answers"):
                self.per_pair.write.mode("append").partitionBy("zone").parquet(path)

    @property
    def per_pair_texts(self) -> int:
        """The routed rows the per-pair path answers (topic texts without an answer key)."""
        return sum(count for key, count in self._key_counts() if key is None)

    @property
    def per_pair(self) -> Any:
        """The per-pair path's answers (cached), or None when every row has a key."""
        if self._per_pair is None and self.per_pair_texts:
            spark = self.routed.sparkSession
            answers = _per_pair_answers(spark, self.routed, self.nodes, self.table, self.policy)
            self._per_pair = answers.persist()
        return self._per_pair

    @property
    def answers(self) -> Any:
        """Every answer as one DataFrame: COLUMNS (and the endpoints with a protocol)."""
        return self.fast if self.per_pair is None else self.fast.unionByName(self.per_pair)

    def summary(self) -> list[SummaryRow]:
        """The summary by Spark aggregations (no answers are read back): topics per answer
        key, joined with the table's answers on the driver, plus the per-pair path's answers
        grouped as `summarize` groups them."""
        with _described(self.routed, "resolve-zones: summary"):
            keyed = [(key, count) for key, count in self._key_counts() if key is not None]
            counts = summary_counts(self.table, keyed)
            if self.per_pair is not None:
                counts += _grouped_counts(self.per_pair)
        return build_summary(counts, self.table.zones)

    def release(self) -> None:
        """Drops the cached per-pair answers."""
        if self._per_pair is not None:
            self._per_pair.unpersist()

    def _key_counts(self) -> list[tuple[int | None, int]]:
        """Routed rows per answer key (None: the per-pair path's): observed by the write, or
        (before one) counted by a job of their own, once."""
        if self._keyed is None and self._written:
            self._keyed = _observed_counts(self.keys.get)  # a property
        if self._keyed is None:
            with _described(self.routed, "resolve-zones: count the answer keys"):
                rows = self.routed.groupBy("key").count().collect()
            self._keyed = [(row["key"], int(row["count"])) for row in rows]
        return self._keyed


def _observed(routed: Any, table: AnswerTable) -> tuple[Any, Any]:
    """`routed` observed (the rows pass unchanged) and its Observation: per answer key, how
    many rows have it, and how many have none. Counted as the write passes, instead of
    caching the routed rows for a second job (a cache is built by a job of its own, and keeps
    the heap full while the write runs). Spark's histogram_numeric keeps one bin per distinct
    value until it has more than its bins, and merges the closest ones first (equal keys), so
    with at least as many bins as keys it counts exactly."""
    from pyspark.sql import Observation

    keys = (max((b.bundle_id for b in table.buckets), default=0) + 1) * len(DOMAINS)
    bins = min(2**31 - 1, max(keys, 2) * 64)
    observation = Observation()
    observed = routed.observe(
        observation,
        F.histogram_numeric(F.col("key"), F.lit(bins)).alias("keys"),
        F.count_if(F.col("key").isNull()).alias("without"),
    )
    return observed, observation


def _observed_counts(metrics: dict[str, Any]) -> list[tuple[int | None, int]]:
    """(key, rows) from the observed histogram (its bins are (key, count) as doubles, a key
    possibly in several bins: one per partition), and (None, rows without a key)."""
    counts: dict[int | None, int] = {}
    for point in metrics["keys"] or ():
        key = round(point["x"])
        counts[key] = counts.get(key, 0) + round(point["y"])
    if metrics["without"]:
        counts[None] = int(metrics["without"])
    return list(counts.items())


def _native_names(topics: Any) -> Any:
    """Topic texts parsed by Spark as TopicName.parse parses them: `full` (a short form
    completed), `domain_index` (in DOMAINS), `tenant`, `namespace`, `index` (the partition
    index, -1 for none) and `native`: false for the texts left to TopicName.parse in Python.
    Tenant and namespace are checked by the join with the table's namespaces, whose names
    TopicName.parse accepted."""
    text = F.col("topic")
    full = (
        F.when(text.contains("://"), text)
        .when(text.contains("/"), F.concat(F.lit("persistent://"), text))
        .otherwise(F.concat(F.lit("persistent://public/default/"), text))
    )
    # Everything after the first "://" (the domain is what comes before it).
    rest = F.expr("substr(full, length(substring_index(full, '://', 1)) + 4)")
    tenant = F.substring_index(rest, "/", 1)
    namespace = F.substring_index(F.substring_index(rest, "/", 2), "/", -1)
    local = F.substring_index(rest, "/", -1)
    domain = F.substring_index(F.col("full"), "://", 1)
    domain_index = F.lit(None).cast("int")
    for i, value in reversed(list(enumerate(DOMAINS))):
        domain_index = F.when(domain == value.value, F.lit(i)).otherwise(domain_index)
    native = (
        domain_index.isNotNull()
        # exactly <tenant>/<namespace>/<local> after the domain
        & (F.concat_ws("/", tenant, namespace, local) == rest)
        & ~local.isin("", ".", "..")
        & (F.octet_length(text) <= MAX_TOPIC_NAME_BYTES)
        # not blank: Python's idea of white space is wider than Java's; printable ASCII is not
        & (text.contains("/") | text.rlike("[!-~]"))
    )
    digits = F.when(local.contains(PARTITION_SUFFIX), F.regexp_extract(local, _PARTITIONED, 1))
    index = F.when(
        (F.length(digits) <= 10) & (digits.try_cast("long") <= _MAX_PARTITION),
        digits.try_cast("int"),
    ).otherwise(F.lit(-1))
    return topics.withColumn("full", full).select(
        "topic",
        F.coalesce(native, F.lit(False)).alias("native"),
        "full",
        domain_index.alias("domain_index"),
        tenant.alias("tenant"),
        namespace.alias("namespace"),
        index.alias("index"),
    )


def _route(
    spark: Any,
    nodes: dict[str, Any],
    topics_df: Any,
    zones: list[Zone],
    policy: ResolvePolicy,
    partitions: int | None,
    protocol: str | None,
    table: AnswerTable | None = None,
) -> tuple[AnswerTable, Any, Any]:
    """The answer table (`table`, or built here), the topics parsed, expanded and routed (lazy:
    one row per topic, or per partition of a partitioned topic, with its answer key; null: the
    per-pair path), and the table's answers as a DataFrame (key, answers: one struct per zone)."""
    # before any function of ours is pickled for the workers: their Python chosen and checked
    prepare(spark)
    topics = _spread_topics(spark, topics_df, zones, partitions)
    if table is None:
        table = build_table(nodes, ClusterView.from_snapshot(nodes), zones, policy, protocol)
    frames = _table_frames(spark, table)

    named = (
        _native_names(topics)
        .join(F.broadcast(frames["namespaces"]), ["tenant", "namespace"], "left")
        .join(F.broadcast(frames["partitioned"]), "full", "left")
    )
    per_pair = ~F.col("native") | F.col("namespace_id").isNull()
    per_pair = per_pair | (F.col("listed").isNotNull() & F.col("partitions").isNull())
    # A partitioned topic's partitions (per-pair rows are never expanded).
    count = F.when(~per_pair & (F.col("partitions") > 0), F.col("partitions"))
    expanded = named.select(
        "topic", "full", "domain_index", "index", "namespace_id", "shift",
        per_pair.alias("per_pair"),
        F.explode_outer(F.sequence(F.lit(0), count - 1)).alias("number"),
    )  # fmt: skip
    native = ~F.col("per_pair")
    partition_name = F.concat("full", F.lit(PARTITION_SUFFIX), "number")
    targets = expanded.select(
        F.when(native & F.col("number").isNotNull(), partition_name)
        .when(native, F.col("full"))
        .otherwise(F.col("topic"))
        .alias("topic"),
        F.when(native, F.coalesce("number", "index")).alias("partition"),
        "domain_index",
        F.when(native, F.col("namespace_id")).alias("namespace_id"),
        "shift",
    ).withColumn("hash", F.crc32("topic"))
    # The bundle: an equi join on (namespace, hash bucket), then the hash range; per-pair rows
    # (no namespace) match nothing and keep a null key.
    routed = targets.join(
        F.broadcast(frames["buckets"]),
        (F.col("namespace_id") == F.col("b_namespace_id"))
        & (F.expr("cast(shiftright(hash, shift) as int)") == F.col("b_bucket"))
        & (F.col("hash") >= F.col("lower"))
        & (F.col("hash") <= F.col("highest")),
        "left",
    ).select(
        "topic",
        F.when(F.col("partition") >= 0, F.col("partition")).alias("partition"),
        (F.col("bundle_id") * len(DOMAINS) + F.col("domain_index")).alias("key"),
    )
    return table, routed, frames["answers"]


def _fast_answers(routed: Any, answers: Any, table: AnswerTable) -> Any:
    """The answers the table holds: one row per zone for every routed row with a key."""
    columns = ("topic", "partition", *table.columns)
    return (
        routed.where(F.col("key").isNotNull())
        .join(F.broadcast(answers), "key")
        .select("topic", "partition", F.inline("answers"))
        .select(*columns)
    )


def _per_pair_answers(
    spark: Any, routed: Any, nodes: dict[str, Any], table: AnswerTable, policy: ResolvePolicy
) -> Any:
    """The per-pair path's answers (resolve_pairs in the Python workers) for the routed rows
    without a key."""
    columns = ("topic", "partition", *table.columns)
    shared = _SharedSnapshot(uuid.uuid4().hex, spark.sparkContext.broadcast(nodes))
    return (
        routed.where(F.col("key").isNull())
        .select("topic")
        .mapInArrow(
            # only the zones and the protocol travel to the executors, not the table's data
            partial(_table_batches, shared, AnswerTable(table.zones, table.protocol), policy),
            _spark_schema(columns),
        )
    )


def answers_frame(
    spark: Any,
    nodes: dict[str, Any],
    topics_df: Any,
    zones: list[Zone],
    policy: ResolvePolicy,
    *,
    partitions: int | None = None,
    protocol: str | None = None,
) -> Any:
    """The rows of `plan_zones`, as one lazy DataFrame that caches nothing and runs no job
    (the Python API's `resolve_zones`): every action parses and routes the topics again."""
    table, routed, answers = _route(spark, nodes, topics_df, zones, policy, partitions, protocol)
    fast = _fast_answers(routed, answers, table)
    return fast.unionByName(_per_pair_answers(spark, routed, nodes, table, policy))


def plan_zones(
    spark: Any,
    nodes: dict[str, Any],
    topics_df: Any,
    zones: list[Zone],
    policy: ResolvePolicy,
    *,
    partitions: int | None = None,
    protocol: str | None = None,
    table: AnswerTable | None = None,
) -> ZonePlan:
    """Every (topic, zone) pair's answer, the rows `per_pair_plan` gives, computed in Spark's
    engine: the driver answers every (bundle, domain) once with the per-pair path
    (`zones.answer_table`); Spark parses the names, expands partitioned topics, finds each
    bundle by the CRC-32 of the name and looks its answers up with broadcast joins. The topics
    the table cannot answer for sure (unusual or invalid names, namespaces that do not exist or
    are deleted, failing partitioned-topic metadata) go through `resolve_pairs` in Python.
    `protocol`: add the endpoints column of that protocol handler (`zones.pairs`). `table`: the
    answer table if built already (`build_table` of the same nodes, zones, policy and protocol:
    the command line builds it while Spark starts).

    Lazy: runs no job; the first action over the answers (the write) parses and routes the
    topics and counts the answer keys on the way (the summary; the per-pair path, when some
    name has no key, reads the topics again). Call `release()` when done."""
    table, routed, answers = _route(
        spark, nodes, topics_df, zones, policy, partitions, protocol, table
    )
    observed, keys = _observed(routed, table)
    return ZonePlan(table, routed, _fast_answers(observed, answers, table), nodes, policy, keys)


@contextmanager
def _described(frame: Any, description: str) -> Iterator[None]:
    """Spark's jobs started inside are described so (the Spark UI, event logs)."""
    context = frame.sparkSession.sparkContext
    before = context.getLocalProperty("spark.job.description")
    context.setJobDescription(description)
    try:
        yield
    finally:
        context.setJobDescription(before)


def _table_batches(
    shared: _SharedSnapshot, table: AnswerTable, policy: ResolvePolicy, batches: Iterator[Any]
) -> Iterator[Any]:
    """mapInArrow of the per-pair path: `topic` batches in, answer batches out (the table's
    per-pair columns, with the endpoints column for a protocol)."""
    view = _executor_view(shared)
    schema = _arrow_schema(("topic", "partition", *table.columns))
    for batch in batches:
        columns = table.pairs(batch.column(0).to_pylist(), view, policy)
        yield pa.RecordBatch.from_pydict(columns, schema=schema)


def _table_frames(spark: Any, table: AnswerTable) -> dict[str, Any]:
    """The table's parts as small local DataFrames (from Arrow: no Python worker reads them)."""
    answer = pa.struct(list(_arrow_schema(table.columns)))
    schemas = {
        "namespaces": pa.schema(
            [("tenant", pa.string()), ("namespace", pa.string()),
             ("namespace_id", pa.int32()), ("shift", pa.int32())]
        ),
        "partitioned": pa.schema(
            [("full", pa.string()), ("partitions", pa.int32()), ("listed", pa.bool_())]
        ),
        "buckets": pa.schema(
            [("b_namespace_id", pa.int32()), ("b_bucket", pa.int32()), ("lower", pa.int64()),
             ("highest", pa.int64()), ("bundle_id", pa.int32())]
        ),
        "answers": pa.schema([("key", pa.int32()), ("answers", pa.list_(answer))]),
    }  # fmt: skip
    rows: dict[str, list[tuple[Any, ...]]] = {
        "namespaces": [(e.tenant, e.namespace, e.namespace_id, e.shift) for e in table.namespaces],
        "partitioned": [(name, count, True) for name, count in table.partitioned.items()],
        "buckets": [
            (b.namespace_id, b.bucket, b.lower, b.highest, b.bundle_id) for b in table.buckets
        ],
        "answers": [
            (key, [dict(zip(table.columns, answer, strict=True)) for answer in answers])
            for key, answers in table.answers.items()
        ],
    }
    # One Arrow table for the four parts (one transfer to the JVM), a part per `part` value.
    fields = [field for schema in schemas.values() for field in schema]
    columns: list[list[Any]] = [[] for _ in fields]
    parts: list[int] = []
    start = 0
    for part, (name, schema) in enumerate(schemas.items()):
        for values in rows[name]:
            parts.append(part)
            for i, column in enumerate(columns):
                inside = start <= i < start + len(schema)
                column.append(values[i - start] if inside else None)
        start += len(schema)
    arrays = [pa.array(parts, pa.int8())]
    arrays += [pa.array(c, type=f.type) for c, f in zip(columns, fields, strict=True)]
    names = ["part", *(f.name for f in fields)]
    whole = spark.createDataFrame(pa.Table.from_arrays(arrays, names=names))
    return {
        name: whole.where(F.col("part") == part).select(*schema.names)
        for part, (name, schema) in enumerate(schemas.items())
    }


def read_topics(spark: Any, path: str, topics_format: str) -> Any:
    """A DataFrame with one string column `topic`."""
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


def summarize(spark: Any, answers_path: str, zones: Sequence[Zone]) -> list[SummaryRow]:
    """The summary of written answers (reads four columns of the Parquet back)."""
    frame = spark.read.schema(SPARK_SCHEMA).parquet(answers_path)
    return build_summary(_grouped_counts(frame), zones)


def _grouped_counts(frame: Any) -> list[tuple[str, str, str, int, int]]:
    """(zone, broker, response, answers, answers without a URL) of a frame of answers."""
    is_failed = F.col("response") == FAILED
    broker = F.when(
        is_failed, F.concat(F.lit(FAILED_PREFIX), F.substring_index(F.col("error"), ":", 1))
    ).otherwise(F.coalesce(F.col("broker_id"), F.lit(UNKNOWN_BROKER)))
    no_url = F.when(~is_failed & F.col("service_url").isNull(), 1).otherwise(0)
    grouped = frame.groupBy(F.col("zone"), broker.alias("broker"), F.col("response")).agg(
        F.count(F.lit(1)).alias("answers"), F.sum(no_url).alias("no_url")
    )
    return [
        (r["zone"], r["broker"], r["response"], int(r["answers"]), int(r["no_url"]))
        for r in grouped.collect()
    ]


#: A local master of at most this many task threads gets the serial collector: on a short job
#: with 2 cores, G1's concurrent threads cost more CPU than they save (bench.zones: 3M pairs,
#: ~5 s less CPU in all, the answers unchanged); more threads need a parallel collector.
SERIAL_GC_MAX_THREADS = 2
#: How much later than by default such a small local master's JVM compiles a method with C2:
#: a job of seconds runs most of Spark's code (its start, query planning, code generation) a
#: few thousand times, where C2's compiling costs more CPU than its code saves, and C2 took
#: the second core from the tasks; the per-row code, run millions of times, still gets C2
#: (bench.zones: 3M pairs, some 7-10 s less CPU and 5 s sooner; C1 only: 3x slower writes).
C2_THRESHOLD_SCALE = 20
#: HotSpot's own thresholds (Java 17) of the C2 tier, which C2_THRESHOLD_SCALE multiplies.
_C2_THRESHOLDS = {
    "Tier4InvocationThreshold": 5000,
    "Tier4MinInvocationThreshold": 600,
    "Tier4CompileThreshold": 15000,
    "Tier4BackEdgeThreshold": 40000,
}


def driver_java_options(master: str, given: str = "") -> str:
    """The driver JVM's options for a local `master`: `given`, plus for `local`, `local[1]`,
    `local[2]` or `local[*]` on at most 2 cores (also with a failure count) the serial
    collector unless `given` names a collector, and C2 thresholds C2_THRESHOLD_SCALE times
    HotSpot's unless `given` sets a compiler threshold or tier."""
    match = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\d+)?\])?", master)
    threads = None if match is None else match[1] or "1"
    count = (os.cpu_count() or 1) if threads == "*" else int(threads or 0)
    if not 0 < count <= SERIAL_GC_MAX_THREADS:
        return given
    options = given.split()
    added = []
    if not any(o.startswith("-XX:+Use") and "GC" in o for o in options):
        added.append("-XX:+UseSerialGC")
    if not any(
        re.match(r"-XX:(Tier|CompileThreshold|TieredStopAtLevel|[+-]TieredCompilation)", o)
        for o in options
    ):
        added += [
            f"-XX:{name}={value * C2_THRESHOLD_SCALE}" for name, value in _C2_THRESHOLDS.items()
        ]
    return " ".join([given, *added]).strip()


_DEFAULTS_JAVA_OPTIONS = re.compile(
    r"^[ \t\f]*spark\.driver\.extraJavaOptions(?:[ \t\f]*[=:][ \t\f]*|[ \t\f]+)(.*?)\s*$",
    re.MULTILINE,
)


def defaults_java_options(env: Mapping[str, str] | None = None) -> str:
    """`spark.driver.extraJavaOptions` of Spark's defaults file ($SPARK_CONF_DIR, else
    $SPARK_HOME/conf, spark-defaults.conf), "" without one: a value set on the session builder
    replaces it, so ours start from it."""
    from pyspark.find_spark_home import _find_spark_home

    env = os.environ if env is None else env
    folder = env.get("SPARK_CONF_DIR") or os.path.join(_find_spark_home(), "conf")
    try:
        with open(os.path.join(folder, "spark-defaults.conf"), encoding="utf-8") as file:
            text = file.read()
    except (OSError, UnicodeDecodeError):
        return ""
    found = _DEFAULTS_JAVA_OPTIONS.findall(text)  # a Java properties file: the last one counts
    return str(found[-1]) if found else ""


def default_class_archive(java_options: str = "") -> tuple[ClassArchive | None, str]:
    """The default class archive (zones.class_archive.default_archive) of the driver JVM this
    process's PySpark starts, and why there is none."""
    from pyspark import __version__
    from pyspark.find_spark_home import _find_spark_home

    submit_args = os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    return default_archive(
        Path(_find_spark_home()), __version__, f"{java_options} {submit_args}".strip()
    )


def local_session(
    master: str,
    given: Mapping[str, str] | None = None,
    *,
    app_name: str = "resolve-zones",
    class_archive: ClassArchive | None = None,
) -> Any:
    """A SparkSession for a local master, bound to 127.0.0.1, whose Python workers run this
    interpreter (so they import this package and pyarrow from the same environment); `given`:
    Spark settings over ours. `class_archive`: the driver JVM maps its classes from it, or
    records it (zones.class_archive; end such a session with `stop_session`)."""
    conf = dict(given or {})
    user_options = conf.get("spark.driver.extraJavaOptions", defaults_java_options())
    options = driver_java_options(master, user_options)
    if class_archive is not None:
        options = f"{options} {class_archive.java_options()}".strip()
    if options:
        conf["spark.driver.extraJavaOptions"] = options
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings = {
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "8",
        "spark.driver.memory": "2g",
        # A small input file is still read by several tasks (one per Parquet row group or few
        # MB of text), so that every core has work without a shuffle.
        "spark.sql.files.openCostInBytes": "1m",
        **conf,
    }
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if "spark.sql.files.minPartitionNum" not in conf:
        cores = spark.sparkContext.defaultParallelism
        spark.conf.set("spark.sql.files.minPartitionNum", str(2 * cores))
    return spark


@dataclass(frozen=True)
class Started:
    """The session a job runs on (`session`)."""

    spark: Any
    owned: bool  # this job started it, and stops it (`stop_session`)
    archive: ClassArchive | None = None  # the class archive its driver JVM maps or records
    note: str = ""  # why the default class archive is not used ("" when not wanted)


def session(
    master: str | None,
    *,
    progress: bool = False,
    class_archive: ClassArchive | None = None,
    default_archive: bool = False,
    settings: Mapping[str, str] | None = None,
    on_archive: Callable[[ClassArchive], None] | None = None,
) -> Started:
    """The job's session: an active session (a test's, a notebook's) is used as it is;
    otherwise a new one, local or from spark-submit's settings. `progress`: Spark's console
    progress bar on stderr (`spark.ui.showConsoleProgress`), for a session this job creates with
    a master of its own; under spark-submit its settings decide. `class_archive`: for a local
    master whose driver JVM this job starts (see `local_session`); `default_archive`: else the
    default one in the user's cache (`default_class_archive`). `settings`: Spark settings over
    ours for such a local session (bench.zones: its event log). `on_archive`: called with the
    class archive, if any, before the JVM that maps or records it starts."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return Started(active, owned=False)
    builder = SparkSession.builder.appName("resolve-zones")
    if master is None:  # spark-submit's --master and --conf settings
        return Started(builder.getOrCreate(), owned=True)
    shown = "true" if progress else "false"
    if not master.startswith("local"):
        spark = builder.master(master).config("spark.ui.showConsoleProgress", shown).getOrCreate()
        return Started(spark, owned=True)
    given = {"spark.ui.showConsoleProgress": shown, **(settings or {})}
    note = ""
    # under spark-submit (a gateway port given) the driver JVM is running already
    if class_archive is None and default_archive and "PYSPARK_GATEWAY_PORT" not in os.environ:
        options = given.get("spark.driver.extraJavaOptions", defaults_java_options())
        class_archive, note = default_class_archive(options)
    if class_archive is not None and on_archive is not None:
        on_archive(class_archive)
    spark, class_archive, failed = start_mapping(
        class_archive, lambda archive: local_session(master, given, class_archive=archive)
    )
    return Started(spark, owned=True, archive=class_archive, note=failed or note)


#: How long a job waits for the driver JVM it started to exit once its session stopped.
JVM_EXIT_WAIT_S = 30.0


def stop_session(spark: Any, class_archive: ClassArchive | None = None) -> bool:
    """Stop a session this job started, and end the driver JVM it started (it exits once its
    stdin closes; Spark's shutdown hooks run then): the job waits for it, within
    JVM_EXIT_WAIT_S, so that nothing of the job outlives it (the command line writes its
    outputs meanwhile). For a session that records `class_archive`, the JVM writes the archive
    as it exits, and it is put in place: True then (the recording is removed, not left behind,
    when anything fails)."""
    from pyspark import SparkContext

    jvm = None
    try:
        spark.stop()
        gateway = SparkContext._gateway
        jvm = getattr(gateway, "proc", None)  # None under spark-submit: its JVM, not ours
        if gateway is not None and jvm is not None:
            gateway.shutdown()
            SparkContext._gateway = None  # a later session starts a JVM of its own
            SparkContext._jvm = None
    finally:
        if class_archive is not None and class_archive.records:
            recorded = class_archive.finish(jvm)
        else:
            recorded = False
            _end_jvm(jvm)
    return recorded


def _end_jvm(jvm: Any) -> None:
    if jvm is None:
        return
    if jvm.stdin is not None:
        jvm.stdin.close()  # Spark's gateway JVM exits when its stdin closes
    try:
        jvm.wait(JVM_EXIT_WAIT_S)
    except subprocess.TimeoutExpired:
        jvm.kill()
        jvm.wait()
