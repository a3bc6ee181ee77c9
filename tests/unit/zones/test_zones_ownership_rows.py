"""The `pulsar-ownership` rows (zones.ownership.ownership_rows) for bundles being unloaded:
the owner stays named until the unload is done, only its URLs are null (modular load manager:
a disabled ownership node; extensible: a Releasing bundle)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pulsar_lookup_gateway.zones.ownership import Snapshot, ownership_rows

DEMO = Path(__file__).resolve().parents[3] / "configs" / "demo-cluster.json"
EXTENSIBLE = "org.apache.pulsar.broker.loadbalance.extensions.ExtensibleLoadManagerImpl"
B1, B2, B3 = (f"broker-{i}.pulsar.svc:8080" for i in (1, 2, 3))


def rows(nodes: dict[str, Any]) -> dict[tuple[str, str], tuple[Any, ...]]:
    return {(r[0], r[1]): r[2:] for r in ownership_rows(Snapshot(nodes, {}), "external")}


def test_a_disabled_ownership_node_keeps_its_owner_without_urls() -> None:
    nodes = json.loads(DEMO.read_text())
    path = "/namespace/acme/payments/0x40000000_0x80000000"
    nodes[path] = {**nodes[path], "disabled": True}
    got = rows(nodes)
    assert got[("acme/payments", "0x40000000_0x80000000")] == (B1, None, None, None, None, None)
    owned = got[("public/default", "0x00000000_0x40000000")]
    assert owned[:2] == (B1, "pulsar://broker-1.pulsar.example.com:6650")


def test_a_releasing_bundle_keeps_its_source_broker_without_urls() -> None:
    nodes = json.loads(DEMO.read_text())
    for path in [p for p in nodes if p.startswith("/namespace/")]:
        del nodes[path]
    for path, node in nodes.items():
        if path.startswith("/loadbalance/brokers/"):
            node["loadManagerClassName"] = EXTENSIBLE
    root = "/service_unit_state/acme/payments"
    nodes[f"{root}/0x00000000_0x20000000"] = {"state": "Owned", "dstBroker": B2}
    # an unload without a destination, and a transfer to broker 3
    nodes[f"{root}/0x20000000_0x40000000"] = {"state": "Releasing", "sourceBroker": B2}
    nodes[f"{root}/0x40000000_0x80000000"] = {
        "state": "Releasing", "sourceBroker": B1, "dstBroker": B3,
    }  # fmt: skip
    nodes[f"{root}/0x80000000_0xc0000000"] = {"state": "Free"}
    got = rows(nodes)
    assert got[("acme/payments", "0x20000000_0x40000000")] == (B2, None, None, None, None, None)
    assert got[("acme/payments", "0x40000000_0x80000000")] == (B1, None, None, None, None, None)
    owned = got[("acme/payments", "0x00000000_0x20000000")]
    assert owned[:2] == (B2, "pulsar://broker-2.pulsar.example.com:6650")
    assert got[("acme/payments", "0x80000000_0xc0000000")][0] is None  # nobody owns it
