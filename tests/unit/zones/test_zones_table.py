"""The fast plan's answer table (zones.answer_table), without Spark: forged representatives
hash where they must, the buckets find every hash's bundle, the answers are the per-pair path's,
and whatever the table cannot answer for sure is left to the per-pair path."""

from __future__ import annotations

import random
from typing import Any

import pytest

from pulsar_lookup_gateway.lookup.bundles import topic_hash
from pulsar_lookup_gateway.lookup.resolve import ResolvePolicy
from pulsar_lookup_gateway.lookup.topics import NamespaceName, TopicDomain, TopicName
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.metadata_store.synthetic import broker_id, cluster
from pulsar_lookup_gateway.zones.answer_table import (
    ANSWER_COLUMNS,
    DOMAINS,
    AnswerTable,
    answer_key,
    build_table,
    representative,
    summary_counts,
)
from pulsar_lookup_gateway.zones.pairs import COLUMNS, Zone, resolve_pairs

ZONES = (Zone("dc", "internal"), Zone("internet", "external", tls=True), Zone("x", "nowhere"))
SPLIT = ["0x00000000", "0x00000001", "0x00000100", "0x7fffffff", "0x80000000", "0xffffffff"]


def snapshot() -> dict[str, Any]:
    nodes = cluster(owned={"0x00000000_0x40000000": 1, "0xc0000000_0xffffffff": 2})
    nodes["/admin/policies/acme/split"] = {
        "bundles": {"boundaries": SPLIT, "numBundles": len(SPLIT) - 1}
    }
    nodes["/admin/policies/acme/whole"] = {}  # no bundle data: one bundle
    nodes["/admin/policies/acme/gone"] = {"deleted": True}
    nodes["/admin/policies/acme/broken"] = {"bundles": {"boundaries": ["0x00000000"]}}
    nodes["/admin/policies/bad tenant/ns"] = {}
    root = "/admin/partitioned-topics"
    nodes[f"{root}/public/default/persistent/orders"] = {"partitions": 3}
    nodes[f"{root}/public/default/non-persistent/with+space%7E"] = {"partitions": 2}
    nodes[f"{root}/public/default/persistent/none"] = {"partitions": 0}
    nodes[f"{root}/public/default/persistent/bad"] = {"partitions": -1}
    nodes[f"{root}/public/default/persistent/p-partition-1"] = {"partitions": 4}
    nodes[f"{root}/public/default/persistent/a%2Fb"] = {"partitions": 4}  # no name has it
    nodes[f"{root}/acme/gone/persistent/t"] = {"partitions": 2}
    return nodes


NO_POLICY = ResolvePolicy()


def table_of(nodes: dict[str, Any], policy: ResolvePolicy = NO_POLICY) -> AnswerTable:
    return build_table(nodes, ClusterView.from_snapshot(nodes), ZONES, policy)


@pytest.mark.parametrize("domain", list(TopicDomain))
def test_representatives_hash_to_any_value(domain: TopicDomain) -> None:
    rng = random.Random(17)
    namespace = NamespaceName("acme", "ns-1")
    for value in [0, 1, 0x7FFFFFFF, 0xFFFFFFFF, *(rng.randrange(2**32) for _ in range(500))]:
        topic = representative(namespace, domain, value)
        assert topic_hash(topic.full) == value
        assert TopicName.parse(topic.full) == topic
        assert (topic.domain, topic.namespace_name, topic.is_partition) == (
            domain, namespace, False
        )  # fmt: skip
        assert "__" not in topic.local_name  # never a system topic


def test_buckets_find_the_bundle_of_every_hash() -> None:
    nodes = snapshot()
    table = table_of(nodes)
    view = ClusterView.from_snapshot(nodes)
    rng = random.Random(5)
    for entry in table.namespaces:
        bundles = view.bundles(NamespaceName(entry.tenant, entry.namespace))
        assert bundles is not None
        values = [0, 1, 0xFF, 0x100, 0x7FFFFFFE, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]
        values += [rng.randrange(2**32) for _ in range(2000)]
        for value in values:
            found = [
                b
                for b in table.buckets
                if b.namespace_id == entry.namespace_id
                and b.bucket == value >> entry.shift
                and b.lower <= value <= b.highest
            ]
            assert len(found) == 1, (entry, value)
            bundle = bundles.find(value)
            assert (found[0].lower, found[0].highest) == (
                bundle.lower,
                bundle.upper - (bundle.upper != 0xFFFFFFFF),
            )
    # Buckets stay few: at most one per bucket plus one per bundle boundary.
    assert len(table.buckets) <= sum(2 ** (32 - e.shift) for e in table.namespaces) + 16


def test_answers_are_the_per_pair_answers_of_a_topic_in_the_bundle() -> None:
    nodes = snapshot()
    view = ClusterView.from_snapshot(nodes)
    table = table_of(nodes)
    rng = random.Random(9)
    names = {(e.tenant, e.namespace): e.namespace_id for e in table.namespaces}
    bundle_ids = {}
    for b in table.buckets:
        bundle_ids[(b.namespace_id, b.lower)] = b.bundle_id
    for (tenant, namespace), namespace_id in names.items():
        bundles = view.bundles(NamespaceName(tenant, namespace))
        assert bundles is not None
        for _ in range(50):
            domain = rng.choice(DOMAINS)
            topic = f"{domain.value}://{tenant}/{namespace}/t{rng.randrange(10**6)}"
            bundle = bundles.find(topic_hash(topic))
            key = answer_key(bundle_ids[(namespace_id, bundle.lower)], domain)
            columns = resolve_pairs([topic], ZONES, view, ResolvePolicy())
            want = [tuple(columns[c][i] for c in ANSWER_COLUMNS) for i in range(len(ZONES))]
            assert table.answers[key] == want
    assert COLUMNS[2:] == ANSWER_COLUMNS


def test_what_the_table_leaves_to_the_per_pair_path() -> None:
    table = table_of(snapshot())
    assert set(table.per_pair_namespaces) == {"acme/gone", "acme/broken", "bad tenant/ns"}
    assert table.per_pair_namespaces["acme/gone"].startswith("deleted")
    assert table.per_pair_namespaces["acme/broken"].startswith("MetadataError: malformed")
    assert {(e.tenant, e.namespace) for e in table.namespaces} == {
        ("public", "default"), ("acme", "split"), ("acme", "whole")
    }  # fmt: skip
    assert table.partitioned == {
        "persistent://public/default/orders": 3,
        "non-persistent://public/default/with space~": 2,
        "persistent://public/default/bad": None,  # malformed metadata
        "persistent://acme/gone/t": None,  # the namespace check fails
    }
    assert table.resolved == 2 * (4 + 5 + 1)  # bundles x domains


def test_geo_replication_answers_per_namespace() -> None:
    nodes = snapshot()
    nodes["/admin/policies/public/default"]["replication_clusters"] = ["east"]
    nodes["/admin/clusters/west"] = {"peerClusterNames": ["east"]}
    nodes["/admin/clusters/east"] = {"brokerServiceUrl": "pulsar://east:6650"}
    table = table_of(nodes, ResolvePolicy(cluster_name="west"))
    public = next(e for e in table.namespaces if e.namespace == "default")
    ids = {b.bundle_id for b in table.buckets if b.namespace_id == public.namespace_id}
    rows = [row for i in ids for d in DOMAINS for row in table.answers[answer_key(i, d)]]
    # a peer cluster's own URLs whatever the listener; no TLS URL for the TLS zone
    assert {(r[0], r[3], r[4], r[5]) for r in rows} == {
        ("dc", "redirect", "cluster:east", "pulsar://east:6650"),
        ("internet", "redirect", "cluster:east", None),
        ("x", "redirect", "cluster:east", "pulsar://east:6650"),
    }
    # acme/* have no clusters configured: failed, as the per-pair path answers them
    split = next(e for e in table.namespaces if e.namespace == "split")
    ids = {b.bundle_id for b in table.buckets if b.namespace_id == split.namespace_id}
    errors = {table.answers[answer_key(i, TopicDomain.PERSISTENT)][0][-1] for i in ids}
    assert errors == {
        "MetadataError: Namespace does not have any clusters configured : "
        "local_cluster=west ns=acme/split"
    }


def test_summary_counts_weigh_each_answer_by_its_topics() -> None:
    table = table_of(snapshot())
    owned = next(
        k
        for k, rows in table.answers.items()
        if rows[0][ANSWER_COLUMNS.index("response")] == "connect"
    )
    counts = summary_counts(table, [(owned, 7)])
    assert counts == [
        ("dc", broker_id(1), "connect", 7, 0),
        ("internet", broker_id(1), "connect", 7, 0),
        ("x", "failed:ServiceNotReady", "failed", 7, 0),
    ]
