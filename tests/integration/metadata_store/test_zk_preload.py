"""A `zk:` source reads every namespace's policies and ownership before it says it is ready:
its first lookups read nothing from ZooKeeper, answer as the lazy source does, and stay fresh
(the nodes read ahead are watched); a namespace created later is read on first use."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest
from kazoo.client import KazooClient

from pulsar_lookup_gateway.lookup.bundles import NamespaceBundles, topic_hash
from pulsar_lookup_gateway.lookup.errors import LookupFailure
from pulsar_lookup_gateway.lookup.selection import ChoiceSource, ListenerChoice
from pulsar_lookup_gateway.metadata_store.admin import encode, seed
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper
from pulsar_lookup_gateway.metadata_store.kazoo_threads import BatchingClient
from pulsar_lookup_gateway.metadata_store.synthetic import broker_node, ownership_node
from pulsar_lookup_gateway.metadata_store.url import parse_metadata_url
from pulsar_lookup_gateway.metadata_store.zookeeper import ZooKeeperSource
from pulsar_lookup_gateway.serving.service import LookupService
from tests.waiting import eventually

pytestmark = pytest.mark.zookeeper

EXTERNAL = ListenerChoice("external", ChoiceSource.SOCKET)
BUNDLES = NamespaceBundles.equal(16)
NAMESPACES = ["acme/a", "acme/b", "other/c"]


def nodes() -> dict[str, Any]:
    """Three namespaces of 16 bundles over 5 brokers; acme/b has local policies, other/c owns
    only its even bundles (the odd ones are unowned: the leader's)."""
    out: dict[str, Any] = {f"/loadbalance/brokers/b{i}:8080": broker_node(i) for i in range(1, 6)}
    out["/loadbalance/leader"] = {"brokerId": "b1:8080"}
    boundaries = [f"0x{b:08x}" for b in BUNDLES.boundaries]
    for n, ns in enumerate(NAMESPACES):
        out[f"/admin/policies/{ns}"] = {"bundles": {"boundaries": boundaries, "numBundles": 16}}
        for j, name in enumerate(BUNDLES.names()):
            if ns != "other/c" or j % 2 == 0:
                out[f"/namespace/{ns}/{name}"] = ownership_node((n + j) % 5 + 1)
    out["/admin/local-policies/acme/b"] = {"bundles": {"boundaries": boundaries, "numBundles": 16}}
    return out


def topics(namespace: str) -> list[str]:
    """One topic per bundle of `namespace`, in the bundles' order."""
    found: dict[int, str] = {}
    for t in range(100_000):
        name = f"persistent://{namespace}/t{t}"
        found.setdefault(BUNDLES.ranges.index(BUNDLES.find(topic_hash(name))), name)
        if len(found) == len(BUNDLES.ranges):
            return [found[j] for j in sorted(found)]
    raise AssertionError("not every bundle found")


def source(zookeeper: EmbeddedZooKeeper, chroot: str, **kw: Any) -> ZooKeeperSource:
    url = parse_metadata_url(f"zk:{zookeeper.connect_string}{chroot}")
    return ZooKeeperSource(url, start_timeout=15.0, **kw)


async def answers(service: LookupService, names: list[str]) -> list[tuple[Any, ...]]:
    out = []
    for name in names:
        answer = await service.lookup(name, EXTERNAL, "test")
        out.append((answer.response, answer.broker_id, answer.urls, answer.authoritative))
    return out


async def test_ready_means_every_bundle_is_answered_without_a_read(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk_admin: KazooClient
) -> None:
    seed(zk_admin, nodes())
    ahead, lazy = source(zookeeper, zk_chroot), source(zookeeper, zk_chroot, preload_limit=0)
    await asyncio.gather(ahead.start(), lazy.start())
    try:
        every = [name for ns in NAMESPACES for name in topics(ns)]
        before = ahead.reads
        got = await answers(LookupService(ahead), every)
        assert ahead.reads == before  # nothing read: all of it was there at ready
        lazy_before = lazy.reads
        assert got == await answers(LookupService(lazy), every)
        assert lazy.reads > lazy_before  # (the lazy one read them on first use)
    finally:
        await asyncio.gather(ahead.close(), lazy.close())


async def test_nodes_read_ahead_are_watched_and_new_namespaces_read_on_first_use(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk_admin: KazooClient
) -> None:
    seed(zk_admin, nodes())
    ahead = source(zookeeper, zk_chroot)
    await ahead.start()
    service = LookupService(ahead)
    try:
        first = topics("acme/a")[0]
        assert (await service.lookup(first, EXTERNAL, "test")).broker_id == "b1:8080"
        zk_admin.set(f"/namespace/acme/a/{BUNDLES.names()[0]}", encode(ownership_node(4)))

        async def moved() -> bool:
            return (await service.lookup(first, EXTERNAL, "test")).broker_id == "b4:8080"

        await eventually(moved)
        # A namespace created after ready: read (and watched) when first asked.
        with pytest.raises(LookupFailure):
            await service.lookup("persistent://acme/late/t", EXTERNAL, "test")
        seed(
            zk_admin,
            {
                "/admin/policies/acme/late": {},
                "/namespace/acme/late/0x00000000_0xffffffff": ownership_node(3),
            },
        )

        async def late() -> bool:
            try:
                answer = await service.lookup("persistent://acme/late/t", EXTERNAL, "test")
            except LookupFailure:
                return False
            return answer.broker_id == "b3:8080"

        await eventually(late)
    finally:
        await ahead.close()


async def test_the_preload_is_bounded(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk_admin: KazooClient
) -> None:
    """Past `preload_limit` znodes the rest is read on first use (memory stays bounded)."""
    seed(zk_admin, nodes())
    bounded = source(zookeeper, zk_chroot, preload_limit=20)
    await bounded.start()
    try:
        assert bounded.status().ready
        before = bounded.reads
        every = [name for ns in NAMESPACES for name in topics(ns)]
        await answers(LookupService(bounded), every)
        assert bounded.reads > before
    finally:
        await bounded.close()


def test_a_batch_of_requests_is_sent_whole_with_one_wake_up(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk_admin: KazooClient
) -> None:
    """BatchingClient queues a batch's requests and wakes kazoo's connection thread for all of
    them at its end (one write of as many bytes): every request is answered, in order, and
    none before the batch ends but the one a request from another thread meanwhile woke the
    thread for (kazoo sends the head of its queue per byte: the count stays one a request)."""
    seed(zk_admin, {f"/n/{i}": {"i": i} for i in range(300)})
    client = BatchingClient(hosts=zookeeper.connect_string + zk_chroot, timeout=10.0)
    client.start(timeout=15)
    other: list[Any] = []
    thread = threading.Thread(target=lambda: other.append(client.get("/n/7")))
    try:
        with client.batch():
            results = [client.get_async(f"/n/{i}") for i in range(300)]
            thread.start()  # (not batched: another thread)
            time.sleep(0.3)
            assert sum(result.ready() for result in results) <= 1
        values = [json.loads(result.get(timeout=10)[0])["i"] for result in results]
        assert values == list(range(300))
        thread.join(10)
        assert other and json.loads(other[0][0]) == {"i": 7}
    finally:
        client.stop()
        client.close()
