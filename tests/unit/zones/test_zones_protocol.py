"""resolve-zones --protocol: the endpoints column, computed by zones.pairs with the function the
gateway's protocol route calls (no Spark needed)."""

from __future__ import annotations

import json
from pathlib import Path

from pulsar_lookup_gateway.lookup.resolve import ResolvePolicy
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.zones.pairs import (
    COLUMNS,
    ENDPOINTS_COLUMN,
    Zone,
    protocol_columns,
    resolve_pairs,
    resolve_pairs_with_protocol,
)

DEMO = Path(__file__).resolve().parents[3] / "configs" / "demo-cluster.json"
ZONES = [Zone("dc", "internal"), Zone("internet", "external", tls=True), Zone("lab", "lab")]


def test_the_endpoints_column_per_topic_and_zone() -> None:
    view = ClusterView.from_snapshot(json.loads(DEMO.read_text()))
    texts = ["orders-partition-1", "orders-partition-3", "bad//name", "acme/nope/t"]
    columns = resolve_pairs_with_protocol(texts, ZONES, view, ResolvePolicy(), "kafka")
    assert tuple(columns) == protocol_columns() == (*COLUMNS, ENDPOINTS_COLUMN)
    # The other columns are resolve_pairs' own.
    plain = resolve_pairs(texts, ZONES, view, ResolvePolicy())
    assert {name: columns[name] for name in COLUMNS} == plain
    rows = list(zip(columns["topic"], columns["zone"], columns[ENDPOINTS_COLUMN], strict=True))
    owned = "persistent://public/default/orders-partition-1"
    assert rows[:3] == [
        (owned, "dc", "PLAINTEXT://10.0.0.1:9092"),
        (owned, "internet", "SASL_SSL://broker-1.pulsar.example.com:9093"),
        (owned, "lab", None),  # no endpoint of the owner is the lab listener's
    ]
    # Unowned, invalid, unknown namespace: no endpoints.
    assert [cell for _t, _z, cell in rows[3:]] == [None] * 9
    grpc = resolve_pairs_with_protocol(texts[:1], ZONES, view, ResolvePolicy(), "grpc")
    assert (
        grpc[ENDPOINTS_COLUMN]
        == ["grpc://broker-1.pulsar.example.com:50051,grpc+tls://broker-1.pulsar.example.com:50052"]
        * 3
    )
