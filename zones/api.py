"""The Python API of resolve-zones: the answers as a DataFrame, inside a user's own Spark job.

    from pulsar_lookup_gateway.zones import resolve_zones

    answers = resolve_zones(topics, [("dc", "internal"), ("internet", "external", True)],
                            metadata="zk:zk-0:2181/pulsar")

The same rows as `resolve-zones` writes to answers/ for the same input (the same plan:
`zones.spark.answers_frame`). The driver reads one snapshot and computes the answer table from
it; the topics never come to the driver. The package ships itself to the executors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame

from pulsar_lookup_gateway.lookup.protocol_data import PROTOCOL_NAME_RULE, is_protocol_name
from pulsar_lookup_gateway.lookup.resolve import ResolvePolicy
from pulsar_lookup_gateway.metadata_store.snapshot import read_nodes
from pulsar_lookup_gateway.metadata_store.url import parse_metadata_url
from pulsar_lookup_gateway.zones.pairs import COLUMNS, Zone, ZonesError, zones_from_rows
from pulsar_lookup_gateway.zones.spark import answers_frame

#: The columns of the answers DataFrame (with `protocol`, an `endpoints` column after them).
ANSWER_COLUMNS = COLUMNS


def resolve_zones(
    topics: DataFrame,
    zones: DataFrame | Sequence[Sequence[Any]],
    *,
    metadata: str,
    cluster_name: str | None = None,
    protocol: str | None = None,
    partitions: int | None = None,
) -> DataFrame:
    """Every (topic, zone) pair's answer, as `resolve-zones` gives it.

    `topics`: a DataFrame with a string column `topic`. `zones`: a DataFrame of (zone,
    listener[, tls]) or a list of (zone, listener) / (zone, listener, tls) tuples, checked as
    the zones file is. `metadata`: `zk:host:port[,host:port][/chroot]` or `file:SNAPSHOT`, read
    once, now. `cluster_name`, `protocol`, `partitions`: as `--cluster-name`, `--protocol`,
    `--partitions`.

    Lazy and uncached: every action on the result reads and resolves the topics again (cache
    it to reuse it). Raises ZonesError (zones, topics), ValueError (the metadata URL, the
    protocol name), SnapshotError or a ZooKeeper error (reading the metadata)."""
    zone_list = _zones(zones)
    if protocol is not None and not is_protocol_name(protocol):
        raise ValueError(f"protocol {protocol!r}: use {PROTOCOL_NAME_RULE}")
    if "topic" not in topics.columns:
        raise ZonesError(f"the topics have no 'topic' column (columns: {topics.columns})")
    nodes = read_nodes(parse_metadata_url(metadata))
    spark = topics.sparkSession
    policy = ResolvePolicy(cluster_name=cluster_name)
    answers: DataFrame = answers_frame(
        spark, nodes, topics, zone_list, policy, partitions=partitions, protocol=protocol
    )
    return answers


def _zones(zones: DataFrame | Sequence[Sequence[Any]]) -> list[Zone]:
    if isinstance(zones, DataFrame):
        names = [c.lower() for c in zones.columns]
        if names[:2] != ["zone", "listener"] or len(names) > 3 or names[2:] not in ([], ["tls"]):
            raise ZonesError(f"zones: expected columns zone, listener[, tls], got {zones.columns}")
        # A handful of rows: the answer table is computed per zone on the driver.
        return zones_from_rows([tuple(row) for row in zones.collect()], "zones")
    if isinstance(zones, str | bytes):
        raise ZonesError("zones: expected a DataFrame or a list of (zone, listener[, tls])")
    return zones_from_rows(zones, "zones")
