"""Warm-cache lookups against the cost of one ZooKeeper read, measured in the same run; and
start-up, first lookup and memory for a large cluster.

    .venv/bin/python -m bench.zk_cache [--brokers 1000] [--bundles 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import resource
import time
from typing import Any

from pulsar_lookup_gateway.lookup.bundles import NamespaceBundles
from pulsar_lookup_gateway.lookup.resolve import resolve
from pulsar_lookup_gateway.lookup.selection import ChoiceSource, ListenerChoice
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.metadata_store.admin import connected, seed
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper
from pulsar_lookup_gateway.metadata_store.synthetic import broker_node, ownership_node
from pulsar_lookup_gateway.metadata_store.url import parse_metadata_url
from pulsar_lookup_gateway.metadata_store.zookeeper import ZooKeeperSource
from pulsar_lookup_gateway.serving.service import LookupService

NAMESPACE_BUNDLES = 1000  # bundles per namespace: 100,000 bundles = 100 namespaces


def big_cluster(brokers: int, bundles: int) -> tuple[dict[str, Any], list[str]]:
    nodes: dict[str, Any] = {}
    for i in range(1, brokers + 1):
        nodes[f"/loadbalance/brokers/b{i}:8080"] = broker_node(i % 250 + 1, usage=i / brokers)
    nodes["/loadbalance/leader"] = {"brokerId": "b1:8080"}
    equal = NamespaceBundles.equal(NAMESPACE_BUNDLES)
    boundaries = [f"0x{b:08x}" for b in equal.boundaries]
    namespaces = [f"tenant/ns{n}" for n in range(max(1, bundles // NAMESPACE_BUNDLES))]
    for n, ns in enumerate(namespaces):
        nodes[f"/admin/policies/{ns}"] = {
            "bundles": {"boundaries": boundaries, "numBundles": NAMESPACE_BUNDLES}
        }
        for j, name in enumerate(equal.names()):
            nodes[f"/namespace/{ns}/{name}"] = ownership_node((n + j) % 250 + 1)
    return nodes, namespaces


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def measure(zk: EmbeddedZooKeeper, namespaces: list[str], bundles: int) -> dict[str, float]:
    choice = ListenerChoice("external", ChoiceSource.SOCKET)
    rss_before = rss_mib()
    source = ZooKeeperSource(parse_metadata_url(f"zk:{zk.connect_string}"), start_timeout=120)
    started = time.perf_counter()
    await source.start()
    startup = time.perf_counter() - started
    service = LookupService(source)
    first_topic = f"persistent://{namespaces[0]}/first"
    started = time.perf_counter()
    await service.lookup(first_topic, choice, "bench")
    first_lookup = time.perf_counter() - started

    # Warm every bundle: one topic per bundle, looked up concurrently in batches.
    topics: list[str] = []
    for ns in namespaces:
        equal = NamespaceBundles.equal(NAMESPACE_BUNDLES)
        wanted = {r.name for r in equal.ranges}
        n = 0
        while wanted:
            name = f"persistent://{ns}/t{n}"
            n += 1
            bundle = equal.find(_hash(name)).name
            if bundle in wanted:
                wanted.discard(bundle)
                topics.append(name)
    started = time.perf_counter()
    for i in range(0, len(topics), 500):
        await asyncio.gather(*(service.lookup(t, choice, "bench") for t in topics[i : i + 500]))
    warm_all = time.perf_counter() - started
    gc.collect()
    rss_after = rss_mib()

    # Warm resolve() calls per second (pure core) and service lookups per second.
    parsed = [TopicName.parse(t) for t in random.Random(7).choices(topics, k=200_000)]
    view = source.view
    started = time.perf_counter()
    for topic in parsed:
        resolve(topic, choice, view)
    resolve_rate = len(parsed) / (time.perf_counter() - started)
    names = [t.full for t in parsed[:100_000]]
    started = time.perf_counter()
    for name in names:
        await service.lookup(name, choice, "bench")
    service_rate = len(names) / (time.perf_counter() - started)
    await source.close()

    # The cost of one ZooKeeper read (a round trip on loopback), same server, same run.
    with connected(zk.connect_string) as client:
        paths = [f"/namespace/{namespaces[0]}/{name}" for name in equal.names()] * 3
        started = time.perf_counter()
        for path in paths:
            client.get(path)
        zk_rate = len(paths) / (time.perf_counter() - started)
    return {
        "startup_s": startup,
        "first_lookup_ms": first_lookup * 1000,
        "warm_all_s": warm_all,
        "rss_growth_mib": rss_after - rss_before,
        "resolve_per_s": resolve_rate,
        "service_per_s": service_rate,
        "zk_reads_per_s": zk_rate,
        "bundles": float(len(topics)),
    }


def _hash(name: str) -> int:
    from pulsar_lookup_gateway.lookup.bundles import topic_hash

    return topic_hash(name)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="bench.zk_cache")
    parser.add_argument("--brokers", type=int, default=1000)
    parser.add_argument("--bundles", type=int, default=100_000)
    args = parser.parse_args(argv)
    nodes, namespaces = big_cluster(args.brokers, args.bundles)
    with EmbeddedZooKeeper() as zk:
        with connected(zk.connect_string) as client:
            started = time.perf_counter()
            seed(client, nodes)
        print(f"seeded {len(nodes)} znodes in {time.perf_counter() - started:.1f}s")
        r = asyncio.run(measure(zk, namespaces, args.bundles))
    print(
        f"| brokers | bundles | start-up (ready) | first lookup | warm all bundles | RSS growth |\n"
        f"|---|---|---|---|---|---|\n"
        f"| {args.brokers} | {int(r['bundles'])} | {r['startup_s']:.2f} s "
        f"| {r['first_lookup_ms']:.1f} ms | {r['warm_all_s']:.1f} s "
        f"| {r['rss_growth_mib']:.0f} MiB |"
    )
    print(
        f"\n| warm resolve() / s | warm service lookups / s | ZooKeeper reads / s "
        f"| resolve ÷ ZK read | service ÷ ZK read |\n|---|---|---|---|---|\n"
        f"| {r['resolve_per_s']:,.0f} | {r['service_per_s']:,.0f} | {r['zk_reads_per_s']:,.0f} "
        f"| {r['resolve_per_s'] / r['zk_reads_per_s']:.0f}x "
        f"| {r['service_per_s'] / r['zk_reads_per_s']:.0f}x |"
    )


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
