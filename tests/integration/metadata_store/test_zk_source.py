"""ZooKeeperSource against a real ZooKeeper: reads, watches, connection states, bad nodes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure, ServerError
from pulsar_lookup_gateway.lookup.resolve import ResponseKind, resolve
from pulsar_lookup_gateway.lookup.selection import ChoiceSource, ListenerChoice
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.metadata_store.admin import connected, encode, seed
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper
from pulsar_lookup_gateway.metadata_store.file import FileSource
from pulsar_lookup_gateway.metadata_store.snapshot import read_snapshot, write_snapshot
from pulsar_lookup_gateway.metadata_store.synthetic import (
    broker_id,
    broker_node,
    cluster,
    ownership_node,
    topic_in_range,
)
from pulsar_lookup_gateway.metadata_store.url import parse_metadata_url
from pulsar_lookup_gateway.metadata_store.zookeeper import ZooKeeperSource
from pulsar_lookup_gateway.serving.service import LookupService
from tests.waiting import eventually

pytestmark = pytest.mark.zookeeper

FIRST, LAST = "0x00000000_0x40000000", "0xc0000000_0xffffffff"
IN_FIRST = topic_in_range(0, 0x40000000)
IN_LAST = topic_in_range(0xC0000000, 0xFFFFFFFF)
EXTERNAL = ListenerChoice("external", ChoiceSource.EXPLICIT)
OWNERSHIP = f"/namespace/public/default/{FIRST}"


def source_for(connect: str, chroot: str, **kw: Any) -> ZooKeeperSource:
    kw.setdefault("start_timeout", 15.0)
    return ZooKeeperSource(parse_metadata_url(f"zk:{connect}{chroot}"), **kw)


@pytest.fixture
async def running(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk_admin: KazooClient
) -> AsyncIterator[LookupService]:
    seed(zk_admin, cluster(owned={FIRST: 1}))
    source = source_for(zookeeper.connect_string, zk_chroot)
    await source.start()
    yield LookupService(source)
    await source.close()


@pytest.fixture
async def lazy(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk_admin: KazooClient
) -> AsyncIterator[LookupService]:
    """`running`, but nothing is read ahead: every node is read on a lookup's first use (as
    for a namespace created after the source said it was ready)."""
    seed(zk_admin, cluster(owned={FIRST: 1}))
    source = source_for(zookeeper.connect_string, zk_chroot, preload_limit=0)
    await source.start()
    yield LookupService(source)
    await source.close()


async def owner_of(service: LookupService, topic: str) -> str | None:
    return (await service.lookup(topic, EXTERNAL, "test")).broker_id


async def test_reads_through_a_chroot_and_is_ready(running: LookupService) -> None:
    assert running.source.status().ready
    answer = await running.lookup(IN_FIRST, EXTERNAL, "test")
    assert (answer.response, answer.broker_id) == (ResponseKind.CONNECT, broker_id(1))
    assert answer.urls.service_url == "pulsar://b1.example.com:6650"


async def test_answers_equal_the_snapshot_answers(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk_admin: KazooClient, tmp_path: Any
) -> None:
    demo = read_snapshot("configs/demo-cluster.json")
    seed(zk_admin, demo)
    path = tmp_path / "demo.json"
    write_snapshot(path, demo)
    zk_source, file_source = source_for(zookeeper.connect_string, zk_chroot), FileSource(path)
    await zk_source.start()
    await file_source.start()
    try:
        topics = [f"persistent://public/default/t{i}" for i in range(40)]
        topics += [f"persistent://acme/payments/p{i}" for i in range(40)]
        topics += ["orders", "nope/ns/t"]
        for listener in ("internal", "external", "missing"):
            choice = ListenerChoice(listener, ChoiceSource.SOCKET)
            for topic in topics:
                assert await _answer(LookupService(zk_source), topic, choice) == await _answer(
                    LookupService(file_source), topic, choice
                )
        assert await LookupService(zk_source).partitions("orders") == 4
    finally:
        await zk_source.close()
        await file_source.close()


async def _answer(service: LookupService, topic: str, choice: ListenerChoice) -> Any:
    try:
        return await service.lookup(topic, choice, "test")
    except LookupFailure as exc:
        return (exc.kind, exc.message)


async def test_ownership_moves_show_through_watches(
    running: LookupService, zk_admin: KazooClient
) -> None:
    assert await owner_of(running, IN_FIRST) == broker_id(1)
    zk_admin.set(OWNERSHIP, encode(ownership_node(3)))

    async def moved() -> bool:
        return await owner_of(running, IN_FIRST) == broker_id(3)

    await eventually(moved)
    zk_admin.delete(OWNERSHIP)  # unloaded: now a redirect to the leader (b1)

    async def redirected() -> bool:
        answer = await running.lookup(IN_FIRST, EXTERNAL, "test")
        return answer.response is ResponseKind.REDIRECT

    await eventually(redirected)


async def test_a_bundle_taken_after_the_first_lookup_is_seen(
    running: LookupService, zk_admin: KazooClient
) -> None:
    first = await running.lookup(IN_LAST, EXTERNAL, "test")
    assert first.response is ResponseKind.REDIRECT  # absent node, watched for creation
    zk_admin.create(f"/namespace/public/default/{LAST}", encode(ownership_node(2)))

    async def owned() -> bool:
        answer = await running.lookup(IN_LAST, EXTERNAL, "test")
        return answer.response is ResponseKind.CONNECT and answer.broker_id == broker_id(2)

    await eventually(owned)


def _hash_pick(nodes: dict[str, Any]) -> str | None:
    """The broker resolve() sends an unowned bundle to, on a snapshot of `nodes`."""
    view = ClusterView.from_snapshot(nodes)
    return resolve(TopicName.parse(IN_LAST), EXTERNAL, view).broker_id


async def test_brokers_joining_and_leaving_and_leader_change(
    running: LookupService, zk_admin: KazooClient
) -> None:
    # Without a leader node, an unowned bundle goes to the live broker its hash picks; find a
    # newcomer the hash prefers to the three brokers there are.
    nodes = cluster(owned={FIRST: 1}, leader=None)
    before = _hash_pick(nodes)
    newcomer = next(
        broker_id(i)
        for i in range(4, 400)
        if _hash_pick(nodes | {f"/loadbalance/brokers/{broker_id(i)}": broker_node(i)})
        == broker_id(i)
    )
    zk_admin.delete("/loadbalance/leader")

    async def leaderless() -> bool:
        return await owner_of(running, IN_LAST) == before

    await eventually(leaderless)
    number = int(newcomer.removeprefix("b").removesuffix(":8080"))
    zk_admin.create(f"/loadbalance/brokers/{newcomer}", encode(broker_node(number)))

    async def joined() -> bool:
        return await owner_of(running, IN_LAST) == newcomer

    await eventually(joined)
    zk_admin.delete(f"/loadbalance/brokers/{newcomer}")
    await eventually(leaderless)
    zk_admin.create("/loadbalance/leader", encode({"brokerId": broker_id(2)}))

    async def new_leader() -> bool:
        answer = await running.lookup(IN_LAST, EXTERNAL, "test")
        return answer.broker_id == broker_id(2) and answer.authoritative is False

    await eventually(new_leader)


async def test_bundle_split_and_new_partitioned_topic(
    running: LookupService, zk_admin: KazooClient
) -> None:
    low = topic_in_range(0, 0x20000000)
    assert (await running.lookup(low, EXTERNAL, "test")).bundle.name == FIRST
    assert await running.partitions("fresh") == 0
    split = ["0x00000000", "0x20000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"]
    zk_admin.create(
        "/admin/local-policies/public/default",
        encode({"bundles": {"boundaries": split, "numBundles": 5}}),
        makepath=True,
    )
    zk_admin.create(
        "/admin/partitioned-topics/public/default/persistent/fresh",
        encode({"partitions": 6}),
        makepath=True,
    )

    async def split_seen() -> bool:
        answer = await running.lookup(low, EXTERNAL, "test")
        return answer.bundle.name == "0x00000000_0x20000000"

    async def partitions_seen() -> bool:
        return await running.partitions("fresh") == 6

    await eventually(split_seen)
    await eventually(partitions_seen)


async def test_concurrent_misses_share_one_read(lazy: LookupService) -> None:
    source = lazy.source
    assert isinstance(source, ZooKeeperSource)
    before = source.reads
    answers = await asyncio.gather(*(lazy.lookup(IN_LAST, EXTERNAL, "test") for _ in range(50)))
    assert {a.broker_id for a in answers} == {broker_id(1)}
    # Nothing was looked up yet. Read once each: the tenants' list, the tenant's namespaces,
    # the policies, the local policies and the one ownership node.
    assert source.reads - before == 5


async def test_made_up_names_cost_no_zookeeper_reads(running: LookupService) -> None:
    """Names come from clients: a tenant, namespace or partitioned topic nobody created is
    answered from its parent's (watched) children list, with no read or watch of its own."""
    source = running.source
    assert isinstance(source, ZooKeeperSource)
    await running.lookup(IN_FIRST, EXTERNAL, "test")  # lists tenants, namespaces
    await running.partitions(IN_FIRST)  # lists the namespace's partitioned topics
    before = source.reads
    for n in range(100):
        for topic in (f"persistent://made-up-{n}/ns/t", f"persistent://public/made-up-{n}/t"):
            with pytest.raises(LookupFailure) as info:
                await running.lookup(topic, EXTERNAL, "test")
            assert info.value.kind is FailureKind.NAMESPACE_NOT_FOUND
        assert await running.partitions(f"persistent://public/default/made-up-{n}") == 0
    assert source.reads == before


async def test_a_malformed_znode_fails_only_the_lookups_that_need_it(
    running: LookupService, zk_admin: KazooClient
) -> None:
    zk_admin.set(OWNERSHIP, b"{not json")

    async def broken() -> bool:
        try:
            await running.lookup(IN_FIRST, EXTERNAL, "test")
        except LookupFailure as exc:
            return exc.code is ServerError.MetadataError and OWNERSHIP in exc.message
        return False

    await eventually(broken)
    other = await running.lookup(IN_LAST, EXTERNAL, "test")
    assert other.response is ResponseKind.REDIRECT
    zk_admin.set(OWNERSHIP, encode(ownership_node(2)))

    async def healed() -> bool:
        try:
            return await owner_of(running, IN_FIRST) == broker_id(2)
        except LookupFailure:
            return False

    await eventually(healed)


# -- connection states, each on a ZooKeeper server of its own ---------------------------


@pytest.fixture
def private_zk() -> Iterator[EmbeddedZooKeeper]:
    with EmbeddedZooKeeper() as server:
        yield server


async def test_zookeeper_down_serves_cache_fails_fast_then_recovers(
    private_zk: EmbeddedZooKeeper,
) -> None:
    with connected(private_zk.connect_string) as admin:
        seed(admin, cluster(owned={FIRST: 1}) | {"/admin/policies/acme/x": {}})  # never read
    # Long enough that the session outlives the outage, so the cache is kept.
    session_timeout = 30.0
    # (nothing read ahead: acme/x stays unread)
    source = source_for(
        private_zk.connect_string, "", session_timeout=session_timeout, preload_limit=0
    )
    await source.start()
    service = LookupService(source)
    try:
        assert await owner_of(service, IN_FIRST) == broker_id(1)  # now cached
        private_zk.kill()

        async def suspended() -> bool:
            return source.status().stale

        await eventually(suspended)
        assert not source.status().ready
        assert "suspended" in source.status().reason
        for _ in range(20):  # cached answers keep flowing
            assert await owner_of(service, IN_FIRST) == broker_id(1)
        with pytest.raises(LookupFailure) as info:  # an unread node: fails, and fast
            await asyncio.wait_for(service.lookup("persistent://acme/x/t", EXTERNAL, "t"), 0.5)
        assert info.value.kind is FailureKind.METADATA_UNAVAILABLE
        assert info.value.code is ServerError.ServiceNotReady

        private_zk.start()

        async def ready() -> bool:
            return source.status().ready

        # kazoo waits up to the session timeout for the first answer of a server it reached;
        # a reconnect that lands while the restarted server is still starting can take that
        # long before the next attempt succeeds.
        await eventually(ready, timeout=session_timeout + 30)
        with connected(private_zk.connect_string) as admin:
            admin.set(OWNERSHIP, encode(ownership_node(2)))

        async def changed() -> bool:
            return await owner_of(service, IN_FIRST) == broker_id(2)

        await eventually(changed)
    finally:
        await source.close()


async def test_session_loss_drops_the_cache_and_rebuilds_it(
    private_zk: EmbeddedZooKeeper,
) -> None:
    with connected(private_zk.connect_string) as admin:
        seed(admin, cluster(owned={FIRST: 1}))
        await _expire_the_session_and_move_the_owner(private_zk, admin)


async def _expire_the_session_and_move_the_owner(
    private_zk: EmbeddedZooKeeper, admin: KazooClient
) -> None:
    source = source_for(private_zk.connect_string, "", session_timeout=4.0)
    await source.start()
    service = LookupService(source)
    try:
        assert await owner_of(service, IN_FIRST) == broker_id(1)
        old_view = source.view
        # Expire the gateway's session the classic way: a second client with the same
        # session id and password closes it.
        session_id, password = source._client.client_id
        thief = KazooClient(hosts=private_zk.connect_string, client_id=(session_id, password))
        thief.start(timeout=15)
        thief.stop()
        thief.close()
        admin.set(OWNERSHIP, encode(ownership_node(3)))  # while the gateway has no session

        async def rebuilt() -> bool:
            return source.view is not old_view and source.status().ready

        await eventually(rebuilt, timeout=30)
        assert await owner_of(service, IN_FIRST) == broker_id(3)  # never the stale owner
    finally:
        await source.close()


async def test_unreachable_zookeeper_is_not_ready_and_lookups_fail_fast() -> None:
    from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import free_port

    source = source_for(f"127.0.0.1:{free_port()}", "", start_timeout=0.2)
    await source.start()
    try:
        status = source.status()
        assert not status.ready and "not connected" in status.reason
        with pytest.raises(LookupFailure) as info:
            await asyncio.wait_for(LookupService(source).lookup("t", EXTERNAL, "t"), 0.5)
        assert info.value.kind is FailureKind.METADATA_UNAVAILABLE
    finally:
        await source.close()


async def test_file_source_reloads_and_keeps_the_last_good_snapshot(tmp_path: Any) -> None:
    path = tmp_path / "s.json"
    write_snapshot(path, cluster(owned={FIRST: 1}))
    source = FileSource(path, poll_interval=0.05)
    await source.start()
    service = LookupService(source)
    try:
        assert await owner_of(service, IN_FIRST) == broker_id(1)
        write_snapshot(path, cluster(owned={FIRST: 2}))

        async def reloaded() -> bool:
            return await owner_of(service, IN_FIRST) == broker_id(2)

        await eventually(reloaded)
        path.write_text("{broken", encoding="utf-8")

        async def noticed() -> bool:
            return "previous snapshot" in source.status().reason

        await eventually(noticed)
        assert source.status().ready
        assert await owner_of(service, IN_FIRST) == broker_id(2)
    finally:
        await source.close()


def test_snapshot_json_is_exactly_pulsars_layout(tmp_path: Any) -> None:
    path = tmp_path / "x.json"
    write_snapshot(path, {"/b": {"x": 1}, "/a": None})
    assert list(json.loads(path.read_text())) == ["/a", "/b"]
