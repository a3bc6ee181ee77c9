"""The fast plan of resolve-zones (`zones.spark.plan_zones`: Spark parses the names and looks the
answers up in a table the driver computed with the lookup core) gives exactly the rows of the
per-pair path (`zones.pairs.resolve_pairs`, resolve() for every pair), on Spark local[2].

Over 10,000 pairs per run (the large inputs are bench/zones.py's): split bundles, unowned, unloading
and malformed bundles, listeners some brokers lack, partitioned topics (persistent and not, encoded
names, failing metadata), partitions named directly, invalid and unusual names (white space, non-
ASCII, line breaks, dot segments, the length limit), namespaces that do not exist, are deleted (with
system topics), are served by a peer cluster or by none, heartbeat namespaces, and the extensible
load manager.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pytest

from pulsar_lookup_gateway.lookup.resolve import ResolvePolicy
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.metadata_store.synthetic import FOUR_BUNDLES, broker_id, ownership_node
from pulsar_lookup_gateway.zones.pairs import (
    COLUMNS,
    Zone,
    build_summary,
    protocol_columns,
    resolve_pairs,
    resolve_pairs_with_protocol,
)
from pulsar_lookup_gateway.zones.spark import ZonePlan, plan_zones
from tests.integration.zones.zone_cluster import (
    INVALID,
    NP_PARTITIONED,
    PARTITIONED,
    ZONES,
    cluster_nodes,
)

pytestmark = [
    pytest.mark.spark,
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
]

EXTENSIBLE = "org.apache.pulsar.broker.loadbalance.extensions.ExtensibleLoadManagerImpl"
PEER_URLS = {
    "serviceUrl": "http://east.example.com:8080",
    "brokerServiceUrl": "pulsar://east.example.com:6650",
    "brokerServiceUrlTls": "pulsar+ssl://east.example.com:6651",
}
LOCAL = ResolvePolicy(cluster_name="test")
DEMO = Path(__file__).resolve().parents[3] / "configs" / "demo-cluster.json"
DEMO_NAMESPACES = ("public/default", "acme/payments")
PARTITIONED_ROOT = "/admin/partitioned-topics"
# Namespaces with topics in bulk (tenant/namespace, share of the bulk topics).
BULK = {
    "public/default": 6,
    "acme/orders": 6,
    "acme/events": 2,
    "acme/odd": 2,
    "geo/east": 2,
    "geo/allowed": 1,
    "pulsar/system": 1,
}


def plan_nodes() -> dict[str, Any]:
    """test_zones' cluster, with geo-replication, deleted, heartbeat, malformed and odd
    namespaces, and more partitioned topics."""
    nodes = cluster_nodes()
    for served in ("public/default", "acme/orders"):
        nodes[f"/admin/policies/{served}"]["replication_clusters"] = ["test"]
    nodes["/admin/clusters/test"] = {
        "serviceUrl": "http://test:8080",
        "peerClusterNames": ["east", "lost"],
    }
    nodes["/admin/clusters/east"] = PEER_URLS  # "lost" has no cluster node
    bundles = {"boundaries": FOUR_BUNDLES, "numBundles": 4}

    def add_namespace(name: str, owners: dict[str, int], **policies: Any) -> None:
        nodes[f"/admin/policies/{name}"] = {"bundles": bundles, **policies}
        for bundle, i in owners.items():
            nodes[f"/namespace/{name}/{bundle}"] = ownership_node(i)

    first, second, third = FOUR_BUNDLES[0:2], FOUR_BUNDLES[1:3], FOUR_BUNDLES[2:4]
    b1, b2, b3 = ("_".join(b) for b in (first, second, third))
    add_namespace("geo/east", {b1: 1}, replication_clusters=["east"])  # redirected to the peer
    add_namespace("geo/lost", {b1: 1}, replication_clusters=["lost"])  # peer without cluster data
    add_namespace("geo/mars", {b1: 1}, replication_clusters=["mars"])  # served by nobody
    add_namespace("geo/allowed", {b1: 2}, replication_clusters=["east"], allowed_clusters=["test"])
    add_namespace("acme/gone", {b1: 1, b2: 2}, replication_clusters=["test"], deleted=True)
    add_namespace("pulsar/system", {b1: 2}, replication_clusters=["test"])
    add_namespace("pulsar/b1:8080", {b1: 1, b2: 1, b3: 1})  # heartbeat: no cluster checks
    add_namespace("acme/odd", {}, replication_clusters=["test"])
    nodes[f"/namespace/acme/odd/{b1}"] = "not an object"  # malformed ownership
    nodes[f"/namespace/acme/odd/{b2}"] = {**ownership_node(9), "brokerId": broker_id(9)}
    nodes[f"/namespace/acme/odd/{b3}"] = {"nativeUrl": "pulsar://10.0.0.9:6650"}  # no listeners
    nodes["/admin/policies/acme/broken"] = {"bundles": {"boundaries": ["0x00000000"]}}
    partitioned = {
        "acme/gone/persistent/__change_events": 2,
        "acme/gone/persistent/t7": 3,
        "acme/orders/persistent/bad-meta": "x",  # malformed
        "acme/orders/persistent/zero": 0,
        "public/default/persistent/with+space": 2,
        "public/default/persistent/%C3%BCml%7E": 3,  # "üml~"
        "public/default/persistent/p-partition-1": 2,  # a partition's name: never expands
        "geo/east/persistent/stream": 3,
        "geo/mars/persistent/stream": 3,
        "pulsar/system/persistent/__change_events": 2,
    }
    for path, count in partitioned.items():
        nodes[f"{PARTITIONED_ROOT}/{path}"] = {"partitions": count}
    return nodes


def extensible_nodes() -> dict[str, Any]:
    """The same cluster under the extensible load manager's table view, with broker 2 serving
    no non-persistent topics: unowned bundles go to a broker chosen per domain."""
    nodes = plan_nodes()
    for path, node in nodes.items():
        if path.startswith("/loadbalance/brokers/"):
            node["loadManagerClassName"] = EXTENSIBLE
    nodes[f"/loadbalance/brokers/{broker_id(2)}"]["nonPersistentTopicsEnabled"] = False
    states = {
        "0x00000000_0x20000000": {"state": "Owned", "dstBroker": broker_id(1)},
        "0x20000000_0x40000000": {"state": "Splitting", "sourceBroker": broker_id(2)},
        "0x40000000_0x80000000": {"state": "Assigning", "dstBroker": broker_id(4)},
        "0x80000000_0xa0000000": {"state": "Deleted", "sourceBroker": broker_id(3)},
        "0xa0000000_0xc0000000": {"state": "Owned", "dstBroker": broker_id(7)},  # gone
    }  # 0xc0000000_0xffffffff: no node
    for bundle, state in states.items():
        nodes[f"/service_unit_state/acme/orders/{bundle}"] = state
    nodes["/service_unit_state/public/default/0x00000000_0x40000000"] = {"state": "Free"}
    nodes["/service_unit_state/public/default/0x40000000_0x80000000"] = {"state": "Owned"}
    return nodes


def unusual_texts() -> list[str | None]:
    """Names at the edges of the parser, and names only the per-pair path answers."""
    long_local = "a" * (4096 - len("persistent://public/default/"))
    texts: list[str | None] = [
        *INVALID,
        # white space, line breaks, control and non-ASCII characters
        " ", "\t", "\u3000", "\x1c", " t", "t ", "\x1ft", "t\n", "\n", "t\r",
        "with space", "public/default/with space", "persistent://public/default/with space",
        "üml~", "persistent://public/default/üml~", "日本語", "persistent://acme/orders/日本語",
        "persistent://public/default/t\n", "persistent://acme/orders/o1\u2028",
        # dot segments and empty segments
        ".", "..", "persistent://public/./t", "persistent://public/default/..", "public/../t",
        "./default/t", "persistent://public//t", "persistent:///default/t", "public/default/",
        "//", "/", "a/b/c/d", "persistent://a/b/c/d",
        # domains and separators
        "Persistent://public/default/t", "persistent:/public/default/t", "persistent:/a/b",
        "persistent:://public/default/t", "persistent://public/default/a://b",
        "persistent://public/default/a:b", "non-persistent://public/default/a:b",
        "x/y://public/default/t", "://public/default/t",
        # the length limit (4096 bytes), in ASCII and in two-byte characters
        "persistent://public/default/" + long_local,
        "persistent://public/default/" + long_local + "a",
        "persistent://public/default/" + "ü" * ((4096 - 28) // 2),
        "persistent://public/default/" + "ü" * ((4096 - 28) // 2 + 1),
        "a" * 4096, "a" * 4097,
        # partition suffixes
        *(f"persistent://acme/orders/orders-p5-partition-{k}" for k in range(8)),
        "acme/orders/orders-p5-partition-007",
        "persistent://acme/orders/x-partition-2147483647",
        "persistent://acme/orders/x-partition-2147483648",
        "persistent://acme/orders/x-partition-12345678901",
        "persistent://acme/orders/x-partition-0000000001",
        "persistent://acme/orders/x-partition-", "persistent://acme/orders/-partition-1",
        "persistent://acme/orders/a-partition-1-partition-2",
        "persistent://acme/orders/orders-p3-partition-1\n",
        "persistent://acme/orders/orders-p3-partition-1 ",
        "persistent://acme/orders/x-partition-٣",  # an Arabic-Indic digit
        "p-partition-1", "persistent://public/default/p-partition-1",
        # partitioned topics
        "acme/orders/bad-meta", "acme/orders/zero", "with space", "üml~",
        "persistent://geo/east/stream", "persistent://geo/mars/stream",
        "persistent://acme/gone/__change_events", "pulsar/system/__change_events",
        "persistent://pulsar/system/__change_events-partition-1",
        # deleted namespace: system topics pass, the others fail
        *(f"persistent://acme/gone/t{i}" for i in range(200)),
        "persistent://acme/gone/x__transaction_pending_ack",
        "persistent://acme/gone/__transaction_buffer_snapshot",
        "non-persistent://acme/gone/__change_events-partition-0",
        # namespaces nobody serves, that do not exist, or whose policies are malformed
        *(f"persistent://geo/lost/l{i}" for i in range(100)),
        *(f"geo/mars/m{i}" for i in range(100)),
        *(f"persistent://acme/broken/b{i}" for i in range(50)),
        *(f"persistent://ghost/ns/g{i}" for i in range(50)),
        "persistent://bad tenant/ns/t",
        # heartbeat namespaces
        *(f"persistent://pulsar/b1:8080/healthcheck-{i}" for i in range(30)),
        "non-persistent://pulsar/b1:8080/healthcheck",
        "persistent://pulsar/b2:8080/healthcheck",
    ]  # fmt: skip
    return texts


def bulk_texts(count: int, seed: int) -> list[str]:
    """Plain names in every form: full (both domains), tenant/namespace/topic, topic."""
    rng = random.Random(seed)
    spaces = [name for name, weight in BULK.items() for _ in range(weight)]
    texts = []
    for i in range(count):
        namespace = rng.choice(spaces)
        form = rng.randrange(4)
        if form == 0:
            texts.append(f"persistent://{namespace}/t{i}")
        elif form == 1:
            texts.append(f"non-persistent://{namespace}/n{i}")
        elif form == 2:
            texts.append(f"{namespace}/s{i}")
        else:
            texts.append(f"o{i}" if namespace == "public/default" else f"{namespace}/o{i}")
    texts += [f"persistent://acme/orders/{name}" for name in PARTITIONED]
    texts += [f"non-persistent://public/default/{name}" for name in NP_PARTITIONED]
    return texts


def fast_and_per_pair(
    spark: Any,
    nodes: dict[str, Any],
    texts: list[str | None],
    zones: list[Zone],
    policy: ResolvePolicy,
) -> tuple[ZonePlan, list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    frame = spark.createDataFrame(pa.table({"topic": pa.array(texts, pa.string())}))
    plan = plan_zones(spark, nodes, frame, zones, policy, partitions=3)
    fast = [tuple(r[c] for c in COLUMNS) for r in plan.answers.toArrow().to_pylist()]
    columns = resolve_pairs(texts, zones, ClusterView.from_snapshot(nodes), policy)
    per_pair = list(zip(*(columns[c] for c in COLUMNS), strict=True))
    return plan, fast, per_pair


def summary_of(rows: list[tuple[Any, ...]], zones: list[Zone]) -> Any:
    counts: Counter[tuple[str, str, str, int]] = Counter()
    at = {c: i for i, c in enumerate(COLUMNS)}
    for row in rows:
        if row[at["response"]] == "failed":
            broker = "failed:" + row[at["error"]].split(":", 1)[0]
        else:
            broker = row[at["broker_id"]] or "(unknown)"
        no_url = int(row[at["response"]] != "failed" and row[at["service_url"]] is None)
        counts[(row[at["zone"]], broker, row[at["response"]], no_url)] += 1
    return build_summary(
        [(z, b, r, n, n * no_url) for (z, b, r, no_url), n in counts.items()], zones
    )


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("cluster", "policy"),
    [("modular", ResolvePolicy()), ("modular", LOCAL), ("extensible", LOCAL)],
    ids=["modular", "modular-geo", "extensible-geo"],
)
def test_fast_plan_rows_equal_the_per_pair_rows(
    spark: Any, cluster: str, policy: ResolvePolicy
) -> None:
    nodes = plan_nodes() if cluster == "modular" else extensible_nodes()
    unusual = unusual_texts()
    texts = bulk_texts(3_000, seed=len(cluster)) + unusual
    random.Random(3).shuffle(texts)
    zones = list(ZONES)
    plan, fast, per_pair = fast_and_per_pair(spark, nodes, texts, zones, policy)
    try:
        assert len(per_pair) >= 10_000
        assert len(fast) == len(per_pair)
        assert Counter(fast) == Counter(per_pair)
        # The table answered every bulk name; only unusual texts took the per-pair path.
        assert 0 < plan.per_pair_texts <= len(unusual)
        assert plan.summary() == summary_of(per_pair, zones)
        responses = Counter(row[COLUMNS.index("response")] for row in per_pair)
        assert set(responses) == {"connect", "redirect", "failed"}
    finally:
        plan.release()


def test_without_unusual_names_nothing_takes_the_per_pair_path(spark: Any) -> None:
    nodes = plan_nodes()
    texts: list[str | None] = list(bulk_texts(2_000, seed=1))
    plan, fast, per_pair = fast_and_per_pair(spark, nodes, texts, list(ZONES), LOCAL)
    try:
        assert plan.per_pair_texts == 0 and plan.per_pair is None
        assert Counter(fast) == Counter(per_pair)
        assert plan.summary() == summary_of(per_pair, list(ZONES))
    finally:
        plan.release()


def test_with_a_protocol_the_endpoints_column_is_the_per_pair_one(spark: Any) -> None:
    """resolve-zones --protocol: the table carries each bundle's endpoints per zone."""
    nodes = json.loads(DEMO.read_text())
    zones = [Zone("dc", "internal"), Zone("internet", "external", tls=True), Zone("lab", "lab")]
    rng = random.Random(4)
    texts: list[str | None] = [
        *(f"persistent://{rng.choice(DEMO_NAMESPACES)}/t{i}" for i in range(3_000)),
        *(f"orders-partition-{i}" for i in range(6)),
        "orders", "acme/payments/settlements", "bad//name", "acme/nope/t", None,
    ]  # fmt: skip
    frame = spark.createDataFrame(pa.table({"topic": pa.array(texts, pa.string())}))
    plan = plan_zones(spark, nodes, frame, zones, ResolvePolicy(), protocol="kafka")
    try:
        fast = [tuple(r[c] for c in protocol_columns()) for r in plan.answers.toArrow().to_pylist()]
        view = ClusterView.from_snapshot(nodes)
        columns = resolve_pairs_with_protocol(texts, zones, view, ResolvePolicy(), "kafka")
        per_pair = list(zip(*(columns[c] for c in protocol_columns()), strict=True))
        assert Counter(fast) == Counter(per_pair)
        assert {row[-1] for row in fast} > {None}  # some owners have kafka endpoints
        assert plan.per_pair_texts == 3  # bad//name, acme/nope/t, None
    finally:
        plan.release()


@pytest.mark.timeout(300)
def test_the_write_counts_the_answer_keys_as_it_passes(spark: Any, tmp_path: Path) -> None:
    """resolve-zones' path: the write observes the routed rows (no cache, no second job for
    the summary); the observed counts are exact over several partitions, and the per-pair
    rows, read again, are appended."""
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    from pulsar_lookup_gateway.zones.spark import _observed_counts

    nodes = plan_nodes()
    texts = bulk_texts(4_000, seed=7) + unusual_texts()
    random.Random(7).shuffle(texts)
    zones = list(ZONES)
    frame = spark.createDataFrame(pa.table({"topic": pa.array(texts, pa.string())}))
    plan = plan_zones(spark, nodes, frame, zones, LOCAL, partitions=3)
    try:
        plan.write(str(tmp_path / "answers"))
        observed = Counter(dict(_observed_counts(plan.keys.get)))
        counted = Counter(
            {r["key"]: r["count"] for r in plan.routed.groupBy("key").count().collect()}
        )
        assert observed == counted and len(counted) > 50 and counted[None] > 0
        columns = resolve_pairs(texts, zones, ClusterView.from_snapshot(nodes), LOCAL)
        per_pair = list(zip(*(columns[c] for c in COLUMNS), strict=True))
        table = pq.read_table(tmp_path / "answers", partitioning="hive")
        table = table.set_column(
            table.schema.get_field_index("zone"), "zone", table.column("zone").cast(pa.string())
        )
        written = [tuple(r[c] for c in COLUMNS) for r in table.to_pylist()]
        assert Counter(written) == Counter(per_pair)
        assert plan.summary() == summary_of(per_pair, zones)
    finally:
        plan.release()
