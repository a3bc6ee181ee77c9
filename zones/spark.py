"""The Spark side of resolve-zones: the pairs of a topics DataFrame resolved on the executors.

The driver broadcasts one metadata snapshot; each executor process builds one ClusterView from
it and answers every batch of topics with `zones.pairs.resolve_pairs`, which calls the gateway's
own resolve(). No row reads ZooKeeper or calls the gateway. Imports pyarrow (and pyspark where
it is used): the command line loads this module only when the job runs.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lookup.resolve import ResolvePolicy
from lookup.view import ClusterView
from zones.pairs import (
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
    context = spark.sparkContext
    shared = _SharedSnapshot(uuid.uuid4().hex, context.broadcast(nodes))
    topics = topics_df.select(F.col("topic").cast("string").alias("topic"))
    wanted = partitions or 2 * context.defaultParallelism
    if partitions is not None or topics.rdd.getNumPartitions() < wanted:
        topics = topics.repartition(wanted)
    return topics.mapInArrow(partial(_resolve_batches, shared, list(zones), policy), SPARK_SCHEMA)


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


def local_session(master: str, *, app_name: str = "resolve-zones", **conf: str) -> Any:
    """A SparkSession for a local master, bound to 127.0.0.1, whose Python workers run this
    interpreter (so they import this package and pyarrow from the same environment)."""
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


def session(master: str | None, *, progress: bool = False) -> tuple[Any, bool]:
    """(session, whether this job owns it): an active session (a test's, a notebook's) is
    used as it is; otherwise a new one, local or from spark-submit's settings. `progress`:
    Spark's console progress bar on stderr (`spark.ui.showConsoleProgress`), for a session
    this job creates with a master of its own; under spark-submit its settings decide."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    builder = SparkSession.builder.appName("resolve-zones")
    if master is None:  # spark-submit's --master and --conf settings
        return builder.getOrCreate(), True
    shown = "true" if progress else "false"
    if master.startswith("local"):
        return local_session(master, **{"spark.ui.showConsoleProgress": shown}), True
    return builder.master(master).config("spark.ui.showConsoleProgress", shown).getOrCreate(), True
