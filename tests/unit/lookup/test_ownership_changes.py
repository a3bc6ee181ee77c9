"""The ownership watch's pure rules: a topic's state and generation from a view dated with
zxids, half-way views, what a write may affect, and how one stream coalesces."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulsar_lookup_gateway.http_api.watch_stream import CONTROL_LIMIT, StreamState
from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure
from pulsar_lookup_gateway.lookup.ownership_changes import (
    ErrorCode,
    TopicState,
    TopicStateKind,
    answered_state,
    depends_on,
    failed_state,
    registration_print,
    supersedes,
)
from pulsar_lookup_gateway.lookup.resolve import resolve
from pulsar_lookup_gateway.lookup.selection import ChoiceSource, ListenerChoice
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.lookup.view import EVERY_PATH, ClusterView
from pulsar_lookup_gateway.lookup.write_keys import ALL, keys_of_path
from pulsar_lookup_gateway.metadata_store.synthetic import (
    broker_id,
    broker_node,
    cluster,
    ownership_node,
    topic_in_range,
)
from tests.unit.serving.collected import Collected

FIRST = "0x00000000_0x40000000"
TOPIC = TopicName.parse(topic_in_range(0, 0x40000000))
EXTERNAL = ListenerChoice("external", ChoiceSource.EXPLICIT)
OWNERSHIP = f"/namespace/public/default/{FIRST}"
REGISTRATION = f"/loadbalance/brokers/{broker_id(1)}"


def dated_view(nodes: dict[str, Any], zxids: dict[str, tuple[int, int]]) -> ClusterView:
    """A partial view (as ZooKeeper fills it) of `nodes`: each node dated (czxid, mzxid) by
    `zxids` (default (1, 1)), each parent's list by the newest czxid under it."""
    view = ClusterView(complete=False)
    children: dict[str, set[str]] = {}
    for path in nodes:
        child = path
        while child not in ("", "/"):
            parent, _, name = child.rpartition("/")
            children.setdefault(parent or "/", set()).add(name)
            child = parent
    children.setdefault("/admin/local-policies/public", set())  # (a parent read, empty)
    for parent, names in children.items():
        pzxid = max((zxids.get(f"{parent.rstrip('/')}/{n}", (1, 1))[0] for n in names), default=1)
        view.set_children(parent, names, pzxid)
    for path, content in nodes.items():
        view.put_bytes(path, json.dumps(content).encode(), zxids.get(path, (1, 1)))
    return view


def state_of(view: ClusterView, choice: ListenerChoice = EXTERNAL) -> TopicState | None:
    try:
        return answered_state(resolve(TOPIC, choice, view), view)
    except LookupFailure as failure:
        return failed_state(TOPIC, failure, view)


def test_an_owner_is_dated_by_its_ownership_node_and_registration_creation() -> None:
    nodes = cluster(brokers=2, owned={FIRST: 1})
    view = dated_view(nodes, {OWNERSHIP: (5, 9), REGISTRATION: (7, 40)})
    assert state_of(view) == TopicState(
        TopicStateKind.OWNER,
        9,  # not 40: load reports rewrite the registration, its creation (7) dates it
        "pulsar://b1.example.com:6650",
        "pulsar+ssl://b1.example.com:6651",
        None,
        "https://b1.example.com:8443",
    )
    view = dated_view(nodes, {OWNERSHIP: (5, 9), REGISTRATION: (12, 40)})
    assert state_of(view).generation == 12  # type: ignore[union-attr]


def test_unowned_after_a_deletion_is_dated_by_the_parents_list() -> None:
    nodes = cluster(brokers=2, owned={FIRST: 1})
    view = dated_view(nodes, {OWNERSHIP: (5, 9)})
    # The node read as deleted while the list still names it: half-way, nothing to tell.
    view.put_absent(OWNERSHIP)
    assert state_of(view) is None
    view.set_children("/namespace/public/default", [], 15)  # the list, read again
    assert state_of(view) == TopicState(TopicStateKind.UNOWNED, 15)


def test_a_gone_registration_makes_its_bundles_unowned_once_settled() -> None:
    nodes = cluster(brokers=2, owned={FIRST: 1})
    view = dated_view(nodes, {OWNERSHIP: (5, 9)})
    view.put_absent(REGISTRATION)
    assert state_of(view) is None  # (still listed)
    view.set_children("/loadbalance/brokers", [broker_id(2)], 21)
    assert state_of(view) == TopicState(TopicStateKind.UNOWNED, 21)
    # and a disabled ownership node (the bundle being unloaded) is unowned too, dated by it
    view = dated_view(cluster(brokers=2) | {OWNERSHIP: ownership_node(1, disabled=True)},
                      {OWNERSHIP: (5, 30)})  # fmt: skip
    assert state_of(view) == TopicState(TopicStateKind.UNOWNED, 30)


def test_an_owner_read_after_its_stale_node_is_not_dated_older_than_the_unowned_before() -> None:
    """The ownership node (owner B) is served stale while the list of registrations read after
    it is new: B handed the bundle to C (690), then deregistered (700). "unowned" at 700 is
    told; the node's re-read (owner C, 690) must not be dropped as older."""
    stale_nodes = cluster(brokers=2, owned={FIRST: 1})
    del stale_nodes[REGISTRATION]
    second = f"/loadbalance/brokers/{broker_id(2)}"
    zxids = {OWNERSHIP: (5, 600), second: (100, 100)}
    stale = dated_view(stale_nodes, zxids)
    stale.set_children("/loadbalance/brokers", [broker_id(2)], 700)
    unowned = state_of(stale)
    assert unowned == TopicState(TopicStateKind.UNOWNED, 700)
    fresh_nodes = stale_nodes | {OWNERSHIP: ownership_node(2)}
    fresh = dated_view(fresh_nodes, zxids | {OWNERSHIP: (5, 690)})
    fresh.set_children("/loadbalance/brokers", [broker_id(2)], 700)
    owner = state_of(fresh)
    assert owner is not None
    assert (owner.kind, owner.service_url, owner.generation) == (
        TopicStateKind.OWNER, "pulsar://b2.example.com:6650", 700,
    )  # fmt: skip
    assert supersedes(owner, unowned)
    # later: nothing changes the topic's answer but a newer write
    assert not supersedes(owner, owner)
    assert not supersedes(TopicState(TopicStateKind.UNOWNED, 650), owner)


@pytest.mark.parametrize(
    ("kind", "state"),
    [
        (FailureKind.NOT_AUTHORIZED, ErrorCode.NOT_AUTHORIZED),
        (FailureKind.NAMESPACE_NOT_FOUND, ErrorCode.NOT_FOUND),
        (FailureKind.TOPIC_NOT_FOUND, ErrorCode.NOT_FOUND),
        (FailureKind.LISTENER_NOT_FOUND, ErrorCode.LISTENER_NOT_FOUND),
        (FailureKind.METADATA_MALFORMED, ErrorCode.UNAVAILABLE),
        (FailureKind.METADATA_UNAVAILABLE, None),  # of the moment: the last answer holds
        (FailureKind.TOO_MANY_REQUESTS, None),
    ],
)
def test_failures_map_to_error_codes(kind: FailureKind, state: ErrorCode | None) -> None:
    found = failed_state(TOPIC, LookupFailure(kind, "why"), ClusterView(complete=True))
    assert (found.code if found is not None else None) == state


def test_messages_leave_out_what_the_lookup_gives_none_of() -> None:
    owner = TopicState(TopicStateKind.OWNER, 7, "pulsar://b:6650", None, None, "https://b:8443")
    assert json.loads(owner.message_json("t")) == {
        "type": "owner", "topic": "t", "generation": 7,
        "brokerUrl": "pulsar://b:6650", "httpUrlTls": "https://b:8443",
    }  # fmt: skip
    error = TopicState(TopicStateKind.ERROR, code=ErrorCode.NOT_FOUND, message="no")
    assert json.loads(error.message_json("t")) == {
        "type": "error", "topic": "t", "code": "not_found", "message": "no",
    }  # fmt: skip


def test_a_state_is_filed_under_the_keys_the_write_rule_gives_its_nodes() -> None:
    """The watch files a state by depends_on and hears writes by lookup.write_keys: the keys of
    the nodes an owner's answer read are among its own, those of the nodes it never read not."""
    owner = TopicState(TopicStateKind.OWNER, 5, owner=broker_id(1), bundle=FIRST)
    keys = depends_on(TOPIC, owner)
    read = [
        OWNERSHIP,
        REGISTRATION,
        "/loadbalance/brokers/",
        "/admin/policies/public/default",
        "/admin/local-policies/public/default",
        "/admin/policies/public",
        EVERY_PATH,
    ]
    for path in read:
        assert set(keys_of_path(path)) & (keys | {ALL}), path
    unread = [
        "/namespace/public/default/",  # (another bundle acquired or released)
        "/namespace/public/default/0x40000000_0x80000000",
        "/managed-ledgers/public/default/persistent/t",
        "/loadbalance/leader",
    ]
    for path in unread:
        assert not set(keys_of_path(path)) & keys, path


def test_a_load_report_does_not_change_a_registrations_print() -> None:
    nodes = cluster(brokers=1)
    before = registration_print(dated_view(nodes, {REGISTRATION: (7, 8)}), broker_id(1))
    reported = nodes | {REGISTRATION: broker_node(1, usage=0.99)}
    assert registration_print(dated_view(reported, {REGISTRATION: (7, 50)}), broker_id(1)) == before
    moved = nodes | {REGISTRATION: broker_node(1, names=("internal",))}
    assert registration_print(dated_view(moved, {REGISTRATION: (7, 50)}), broker_id(1)) != before


# -- one stream ---------------------------------------------------------------------------------


def test_a_slow_stream_keeps_the_latest_message_per_topic() -> None:
    stream = StreamState(max_topics=2)
    assert stream.add("a") and stream.add("b") and not stream.add("a")
    assert not stream.room_for(["c"]) and stream.room_for(["a", "b"])
    for message in ("a1", "a2", "a3"):
        stream.offer("a", message)
    stream.offer("b", "b1")
    assert not stream.offer("z", "not watched")
    assert stream.coalesced == 2
    assert stream.take() == ["a3", "b1"] and stream.take() == []
    stream.offer("a", "a4")
    stream.remove("a")  # its unsent message goes with it
    assert stream.take() == []
    assert all(stream.offer_control("x") for _ in range(CONTROL_LIMIT))
    assert not stream.offer_control("one too many")


@given(st.lists(st.tuples(st.sampled_from("abcdefgh"), st.booleans()), max_size=300))
def test_unsent_messages_never_exceed_the_topics_watched(ops: list[tuple[str, bool]]) -> None:
    stream = StreamState(max_topics=8)
    for topic, subscribe in ops:
        if subscribe:
            stream.add(topic)
        else:
            stream.remove(topic)
        for watched in list(stream.topics):
            stream.offer(watched, f"{watched}!")
        assert stream.pending <= len(stream.topics)


# -- the collector held off during a push ---------------------------------------------------------


async def test_the_collector_is_held_off_while_a_change_is_pushed() -> None:
    import asyncio
    import gc

    from pulsar_lookup_gateway.serving.collection_hold import CollectionHold

    hold = CollectionHold()
    assert gc.isenabled()
    try:
        hold.begin()
        assert not gc.isenabled()
        hold.end()  # the writers woken by the push run first
        assert not gc.isenabled()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert gc.isenabled()
        # held at most HOLD_LIMIT, however the push goes
        hold.begin()
        await asyncio.sleep(0.4)
        assert gc.isenabled()
        # a collector turned off by someone else is left alone
        gc.disable()
        hold.begin()
        hold.release()
        assert not gc.isenabled()
    finally:
        hold.release()
        gc.enable()


@pytest.mark.parametrize("count", [200, 5000])  # (above SCAN_LIST_ABOVE: the list is walked)
async def test_a_ledger_written_in_a_namespace_re_looks_up_only_the_topic_it_creates(
    tmp_path: Any, count: int
) -> None:
    import asyncio

    from pulsar_lookup_gateway.metadata_store.file import FileSource
    from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
    from pulsar_lookup_gateway.serving.ownership_watch import OwnershipWatch
    from pulsar_lookup_gateway.serving.service import LookupService

    nodes = cluster(brokers=2, owned={FIRST: 1})
    nodes["/admin/policies/public/default"]["autoTopicCreationOverride"] = {
        "allowAutoTopicCreation": False
    }
    nodes["/managed-ledgers/public/default/persistent/real"] = {}
    path = tmp_path / "cluster.json"
    write_snapshot(path, nodes)
    source = FileSource(path, poll_interval=3600)
    await source.start()
    watch = OwnershipWatch(LookupService(source, declared_listeners=["internal", "external"]))
    sink = Collected()
    made_up = [TopicName.parse(f"persistent://public/default/made-up-{n}") for n in range(count)]
    partition = TopicName.parse("persistent://public/default/parted-partition-1")
    try:
        # (first lookups are made in the watch's turns: wait for them as a stream does)
        await watch.first_answers(
            await watch.subscribe(sink, [*made_up, partition], EXTERNAL, None)
        )
        # (first_answers gives up after FIRST_ANSWER_WAIT; on a loaded machine 5,001 first
        # lookups may take longer, and a late one would be counted below as a write's)
        for _ in range(6000):
            if len(sink.got) == count + 1:
                break
            await asyncio.sleep(0.01)
        assert len(sink.got) == count + 1
        assert {body.get("code") for body in sink.got.values()} == {"not_found"}
        ledgers = "/managed-ledgers/public/default/persistent"

        async def after(write: Any) -> int:
            """The lookups a write makes (once the watch has heard it)."""
            before = watch.lookups
            write()
            for _ in range(5):
                await asyncio.sleep(0)
            return watch.lookups - before

        view = source.view
        # another topic's ledger (its node, then its parent's list, as ZooKeeper tells it)
        assert await after(lambda: view.put_json(f"{ledgers}/other", {})) == 0
        assert await after(lambda: view.set_children(ledgers, ["real", "other"])) == 0
        partitioned = "/admin/partitioned-topics/public/default/persistent"
        assert await after(lambda: view.set_children(partitioned, ["elsewhere"])) == 0
        # a made-up name's own ledger: that topic alone
        named = made_up[7]
        listed = ["real", "other", named.encoded_local_name]
        assert await after(lambda: view.set_children(ledgers, listed)) == 1

        # a partition's base made partitioned: the partition alone
        def make_partitioned() -> None:
            view.put_json(f"{partitioned}/parted", {"partitions": 4})
            view.set_children(partitioned, ["elsewhere", "parted"])

        assert await after(make_partitioned) == 1
        # the namespace's policies: every one of them
        policies = nodes["/admin/policies/public/default"]
        before = watch.lookups
        view.put_json("/admin/policies/public/default", policies)
        for _ in range(6000):  # (the watch's turns take a few ms of each loop iteration)
            await asyncio.sleep(0.01)
            if watch.lookups - before >= len(made_up) + 1:
                break
        for _ in range(5):  # (and none more after)
            await asyncio.sleep(0)
        assert watch.lookups - before == len(made_up) + 1
    finally:
        await watch.close()
        await source.close()


async def test_the_states_topics_share_are_held_in_the_services_memo(tmp_path: Any) -> None:
    """The watch counts its shared states in the process's one byte budget, and gives them
    back when it closes."""
    from pulsar_lookup_gateway.metadata_store.file import FileSource
    from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
    from pulsar_lookup_gateway.serving.ownership_watch import OwnershipWatch
    from pulsar_lookup_gateway.serving.service import LookupService

    path = tmp_path / "cluster.json"
    write_snapshot(path, cluster(brokers=2, owned={FIRST: 1}))
    source = FileSource(path, poll_interval=3600)
    await source.start()
    service = LookupService(source, declared_listeners=["internal", "external"])
    watch = OwnershipWatch(service)
    try:
        await watch.first_answers(await watch.subscribe(Collected(), [TOPIC], EXTERNAL, None))
        with_states = service.memo.bytes_held
        await watch.close()
        assert with_states > 0
        # Its lookups keep no answers of their own (keep=False): nothing of the watch stays.
        assert service.memo.bytes_held == 0
    finally:
        await watch.close()
        await source.close()
