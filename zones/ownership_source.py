"""`pulsar-ownership`: bundle ownership as a Spark data source (PySpark's Python Data Source API).

    spark.dataSource.register(OwnershipDataSource)
    owners = (spark.read.format("pulsar-ownership")
              .option("metadata", "zk:zk-0:2181/pulsar").option("listener", "external").load())

The rows (zones.ownership) come from one snapshot, taken where Spark plans the read: in a Python
worker the driver starts. They travel to the executors inside the read's partitions, whose
reader only hands them on, so this module imports nothing heavy at the top: the executors
import it to unpickle the reader.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

SOURCE_NAME = "pulsar-ownership"
#: Rows per partition of the read.
ROWS_PER_PARTITION = 50_000


@dataclass
class OwnershipPartition(InputPartition):
    rows: Sequence[tuple[Any, ...]]


class OwnershipDataSource(DataSource):
    """Options: `metadata` (zk:host:port[/chroot] or file:SNAPSHOT, required) and `listener`
    (the advertised listener whose URLs the rows carry, required)."""

    @classmethod
    def name(cls) -> str:
        # The one call Spark makes in the user's own process before it pickles this class for
        # its workers (`spark.dataSource.register`): their Python chosen and checked, this
        # package shipped to them, first.
        from pyspark import SparkContext

        from pulsar_lookup_gateway.zones.executors import prepare

        context = SparkContext._active_spark_context
        if context is not None:
            prepare(context)
        return SOURCE_NAME

    def schema(self) -> str:
        from pulsar_lookup_gateway.zones.ownership import OWNERSHIP_SCHEMA

        return OWNERSHIP_SCHEMA

    def reader(self, schema: Any) -> OwnershipReader:
        return OwnershipReader(dict(self.options))


class OwnershipReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        from pulsar_lookup_gateway.lookup.selection import LISTENER_NAME_RULE, is_listener_name
        from pulsar_lookup_gateway.metadata_store.url import parse_metadata_url

        metadata, listener = options.get("metadata"), options.get("listener")
        if not metadata:
            raise ValueError(f"{SOURCE_NAME}: the 'metadata' option is required")
        if not listener or not is_listener_name(listener):
            raise ValueError(
                f"{SOURCE_NAME}: the 'listener' option is required: use {LISTENER_NAME_RULE}"
            )
        self.url = parse_metadata_url(metadata)  # ValueError naming what is wrong
        self.listener = listener

    def partitions(self) -> list[OwnershipPartition]:
        """Takes the snapshot (once per read) and splits its rows into partitions."""
        from pulsar_lookup_gateway.zones.ownership import ownership_rows, take_snapshot

        rows = list(ownership_rows(take_snapshot(self.url), self.listener))
        chunks = [
            OwnershipPartition(rows[i : i + ROWS_PER_PARTITION])
            for i in range(0, len(rows), ROWS_PER_PARTITION)
        ]
        return chunks or [OwnershipPartition([])]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, OwnershipPartition)
        yield from partition.rows
