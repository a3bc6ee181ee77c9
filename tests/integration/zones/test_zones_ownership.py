"""The `pulsar-ownership` data source and the Python API's `resolve_zones`, on the tests' local
Spark session: ownership read from a real ZooKeeper carries each ownership node's zxid; the
same snapshot as a file gives the same rows without it."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pulsar_lookup_gateway.lookup.resolve import ResolvePolicy
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.metadata_store.admin import connected, seed_url
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper
from pulsar_lookup_gateway.metadata_store.url import parse_metadata_url
from pulsar_lookup_gateway.zones import OwnershipDataSource, resolve_zones
from pulsar_lookup_gateway.zones.pairs import COLUMNS, Zone, ZonesError, resolve_pairs

pytestmark = [
    pytest.mark.spark,
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
]
DEMO = Path(__file__).resolve().parents[3] / "configs" / "demo-cluster.json"
COLUMNS_OWNED = ("namespace", "bundle", "owner", "brokerUrl", "brokerUrlTls", "httpUrl",
                 "httpUrlTls", "generation")  # fmt: skip


def owners(spark: Any, metadata: str, listener: str) -> list[dict[str, Any]]:
    spark.dataSource.register(OwnershipDataSource)
    frame = (
        spark.read.format("pulsar-ownership")
        .option("metadata", metadata)
        .option("listener", listener)
        .load()
    )
    assert tuple(frame.columns) == COLUMNS_OWNED
    rows: list[dict[str, Any]] = frame.toArrow().to_pylist()
    return rows


@pytest.mark.zookeeper
def test_ownership_rows_carry_the_zxid_of_each_ownership_node(
    spark: Any, zookeeper: EmbeddedZooKeeper
) -> None:
    nodes = json.loads(DEMO.read_text())
    metadata = f"zk:{zookeeper.connect_string}/own-{uuid.uuid4().hex[:12]}"
    url = parse_metadata_url(metadata)
    seed_url(url, nodes)
    with connected(url.connect_string) as client:  # a change after the seed: a later zxid
        path = "/namespace/acme/payments/0x40000000_0x80000000"
        client.set(path, json.dumps({**nodes[path], "disabled": True}).encode())
        zxids = {p: client.exists(p).mzxid for p in nodes if p.startswith("/namespace/")}
    rows = owners(spark, metadata, "external")
    by_bundle = {(r["namespace"], r["bundle"]): r for r in rows}
    assert len(by_bundle) == len(rows) == 9  # every bundle of both namespaces, once
    for (namespace, bundle), row in by_bundle.items():
        assert row["generation"] == zxids.get(f"/namespace/{namespace}/{bundle}")
    assert len({r["generation"] for r in rows if r["generation"] is not None}) == 8
    unloading = by_bundle[("acme/payments", "0x40000000_0x80000000")]
    assert unloading["generation"] == max(zxids.values())
    assert unloading["owner"] == "broker-1.pulsar.svc:8080" and unloading["brokerUrl"] is None
    unowned = by_bundle[("public/default", "0xc0000000_0xffffffff")]
    assert unowned["owner"] is None and unowned["generation"] is None
    owned = by_bundle[("public/default", "0x00000000_0x40000000")]
    assert owned["owner"] == "broker-1.pulsar.svc:8080"
    assert owned["brokerUrl"] == "pulsar://broker-1.pulsar.example.com:6650"
    assert owned["httpUrlTls"] == "https://broker-1.pulsar.example.com:8443"

    # From the snapshot file: the same rows, but the unloading one, without zxids.
    from_file = owners(spark, f"file:{DEMO}", "external")
    for row in from_file:
        assert row.pop("generation") is None
    for row in rows:
        row.pop("generation")
    changed = ("acme/payments", "0x40000000_0x80000000")
    assert [r for r in from_file if (r["namespace"], r["bundle"]) != changed] == [
        r for r in rows if (r["namespace"], r["bundle"]) != changed
    ]


def test_ownership_options_are_checked(spark: Any) -> None:
    with pytest.raises(Exception, match="'listener' option is required"):
        owners(spark, f"file:{DEMO}", "bad listener")
    with pytest.raises(Exception, match="neither zk:"):
        owners(spark, "http://x", "external")


def test_resolve_zones_takes_zones_as_rows_or_a_dataframe(spark: Any) -> None:
    texts = ["orders", "acme/payments/settlements", "acme/payments/a", "bad//name", "acme/no/t"]
    topics = spark.createDataFrame([(t,) for t in texts], "topic string")
    zones = [("dc", "internal"), ("internet", "external", True)]
    frame = spark.createDataFrame(
        [("dc", "internal", False), ("internet", "external", True)],
        "zone string, listener string, tls boolean",
    )
    got = resolve_zones(topics, zones, metadata=f"file:{DEMO}")
    assert tuple(got.columns) == COLUMNS
    rows = Counter(tuple(r[c] for c in COLUMNS) for r in got.toArrow().to_pylist())
    again = resolve_zones(topics, frame, metadata=f"file:{DEMO}").toArrow().to_pylist()
    assert Counter(tuple(r[c] for c in COLUMNS) for r in again) == rows
    view = ClusterView.from_snapshot(json.loads(DEMO.read_text()))
    zone_list = [Zone("dc", "internal"), Zone("internet", "external", True)]
    columns = resolve_pairs(texts, zone_list, view, ResolvePolicy())
    assert rows == Counter(zip(*(columns[c] for c in COLUMNS), strict=True))

    with pytest.raises(ZonesError, match="zone 'a/b'"):
        resolve_zones(topics, [("a/b", "internal")], metadata=f"file:{DEMO}")
    with pytest.raises(ZonesError, match="no 'topic' column"):
        resolve_zones(topics.withColumnRenamed("topic", "t"), zones, metadata=f"file:{DEMO}")
