"""The one answer memo (serving.memo): which writes to the view drop which answers (warm
answers filed under their bundle, cold answers by bundle, answers that read which topics
exist), its one byte budget (the places filed first go first), the mark that keeps an answer
read before a write out, and which topics a cold entry answers."""

from __future__ import annotations

import gc
import weakref
import zlib

from pulsar_lookup_gateway.lookup.bundles import NamespaceBundles
from pulsar_lookup_gateway.lookup.resolve import resolve
from pulsar_lookup_gateway.lookup.selection import ChoiceSource, ListenerChoice
from pulsar_lookup_gateway.lookup.topics import MAX_TOPIC_NAME_BYTES, TopicName
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.metadata_store.synthetic import (
    broker_id,
    broker_node,
    cluster,
    ownership_node,
)
from pulsar_lookup_gateway.serving import memo as memo_module
from pulsar_lookup_gateway.serving.memo import (
    ENTRY_OVERHEAD,
    NAMESPACE_WIDE,
    AnswerMemo,
    BundleAnswers,
    place_of,
)

BUNDLES = NamespaceBundles.equal(4)
SHAPE = b"\x18\x00"  # a request's fields after its request id


def topic_in(bundle: int, namespace: str = "public/default", start: int = 0) -> bytes:
    """A topic of `namespace` whose hash falls in the bundle of that index."""
    for n in range(start, start + 100_000):
        name = f"persistent://{namespace}/t{n}".encode()
        if BUNDLES.find(zlib.crc32(name)) == BUNDLES.ranges[bundle]:
            return name
    raise AssertionError("no topic found")


class Kept:
    """A view and a memo following it, holding, for bundles 0 and 1 of public/default and
    bundle 0 of public/other: a warm binary answer, a cold one by bundle, and an HTTP answer
    that read which topics exist."""

    PLACES = (("public/default", 0), ("public/default", 1), ("public/other", 0))

    def __init__(self, view: ClusterView | None = None) -> None:
        self.view = view or ClusterView.from_snapshot(cluster(owned={BUNDLES.ranges[0].name: 1}))
        self.memo = AnswerMemo()
        mark = self.memo.mark(self.view)
        self.warm = self.memo.table("binary")
        self.http = self.memo.table("http")
        self.cold: BundleAnswers = self.memo.cold_table("binary")
        for namespace, index in self.PLACES:
            topic, lower = topic_in(index, namespace), BUNDLES.ranges[index].lower
            place = place_of(namespace, lower)
            self.memo.remember(mark, self.warm, topic, (namespace, index), place, len(topic))
            self.cold.remember(topic, SHAPE, BUNDLES.boundaries, lower, (namespace, index))
            http = place_of(namespace, lower, reads_topics=True)
            self.memo.remember(mark, self.http, topic, (namespace, index), http, len(topic))

    def held(self) -> set[tuple[str, int]]:
        """The places the binary answers still hold (after the next read's follow); a place
        the warm and the cold answers disagree on fails the test."""
        self.memo.follow(self.view)
        warm, cold = set(), set()
        for namespace, index in self.PLACES:
            topic = topic_in(index, namespace)
            if topic in self.warm:
                warm.add((namespace, index))
            if self.cold.entry(topic, SHAPE) is not None:
                cold.add((namespace, index))
        assert warm == cold
        return warm

    def http_held(self) -> set[tuple[str, int]]:
        self.memo.follow(self.view)
        return {place for place in self.PLACES if topic_in(place[1], place[0]) in self.http}


# -- what a write drops ----------------------------------------------------------------------


def test_a_bundle_owner_write_drops_that_bundle_only() -> None:
    kept = Kept()
    held = kept.memo.bytes_held
    kept.view.put_json(f"/namespace/public/default/{BUNDLES.ranges[0].name}", ownership_node(2))
    assert kept.held() == kept.http_held() == {("public/default", 1), ("public/other", 0)}
    assert kept.memo.bytes_held < held  # what the dropped entries held is given back
    # the service unit state of the extensible load manager names bundles the same way
    kept.view.put_json(f"/service_unit_state/public/other/{BUNDLES.ranges[0].name}", {})
    assert kept.held() == kept.http_held() == {("public/default", 1)}


def test_a_namespace_list_of_owned_bundles_or_its_policies_drop_that_namespace_only() -> None:
    kept = Kept()
    kept.view.set_children("/namespace/public/default", [])
    assert kept.held() == kept.http_held() == {("public/other", 0)}
    kept.view.put_json("/namespace/public/other/not-a-bundle", {})  # unknown node: the namespace
    assert kept.held() == set()
    kept = Kept()
    kept.view.put_json("/admin/policies/public/other", {})
    assert kept.held() == kept.http_held() == {("public/default", 0), ("public/default", 1)}


def test_a_tenant_write_drops_its_namespaces() -> None:
    kept = Kept()
    kept.view.put_json("/admin/policies/public", {"adminRoles": []})
    assert kept.held() == kept.http_held() == set()


def test_topic_nodes_drop_only_the_answers_that_read_them() -> None:
    """A ledger roll rewrites managed-ledger nodes all the time: binary answers never read
    them and stay; an HTTP lookup of a persistent topic that may not be created read which
    topics exist, and goes with its namespace's topic nodes."""
    kept = Kept()
    kept.view.put_json("/managed-ledgers/public/default/persistent/t", {})
    assert len(kept.held()) == 3
    assert kept.http_held() == {("public/other", 0)}
    kept.view.put_json("/admin/partitioned-topics/public/other/persistent/p", {"partitions": 2})
    assert len(kept.held()) == 3 and kept.http_held() == set()


def test_a_load_report_keeps_answers_and_a_moved_broker_drops_them() -> None:
    kept = Kept()
    path = f"/loadbalance/brokers/{broker_id(1)}"
    kept.view.put_json(path, broker_node(1, usage=0.99))
    assert len(kept.held()) == 3 and len(kept.http_held()) == 3
    moved = broker_node(1, usage=0.99)
    moved["pulsarServiceUrl"] = "pulsar://elsewhere:6650"
    kept.view.put_json(path, moved)
    assert kept.held() == kept.http_held() == set()


def test_the_broker_list_the_leader_and_the_clusters_drop_everything() -> None:
    for path in ("/loadbalance/brokers/", "/loadbalance/leader", "/admin/clusters/east", "/x/y"):
        kept = Kept()
        if path.endswith("/"):
            kept.view.set_children(path.rstrip("/"), [])
        else:
            kept.view.put_json(path, {})
        assert kept.held() == kept.http_held() == set(), path
        assert kept.memo.bytes_held == 0


def test_unread_nodes_keep_every_answer() -> None:
    kept = Kept()
    kept.view.put_json("/schemas/public/default/t", {})
    kept.view.put_json("/loadbalance/bundle-data/public/default/x", {})
    assert len(kept.held()) == 3 and len(kept.http_held()) == 3


def test_a_registration_is_compared_with_the_brokers_answers_were_made_from() -> None:
    """A ZooKeeper cache can hear a broker list before the registrations in it (a broker that
    leaves and comes back under its id): an answer made after the list changed must be checked
    against what it read, not against what was read before the list changed."""
    brokers = "/loadbalance/brokers"
    choice = ListenerChoice(None, ChoiceSource.INTERNAL, True)
    view = ClusterView(complete=False)
    view.set_children("/", ["admin", "namespace", "loadbalance"])
    view.set_children("/loadbalance", ["brokers"])  # no leader: unowned bundles by hash
    view.set_children("/admin/policies", ["public"])
    view.set_children("/admin/policies/public", ["default"])
    view.set_children("/admin/local-policies/public", [])
    view.put_json("/admin/policies/public/default", {})  # one bundle, owned by nobody
    view.set_children("/namespace/public/default", [])
    for i in (1, 2):
        view.put_json(f"{brokers}/{broker_id(i)}", broker_node(i))
    view.set_children(brokers, [broker_id(1), broker_id(2)])
    memo = AnswerMemo()
    entries = memo.table("binary")

    def answer(topic: str) -> str | None:
        return resolve(TopicName.parse(topic), choice, view).broker_id

    memo.follow(view)
    topic = next(
        name
        for name in (f"persistent://public/default/t{n}" for n in range(1000))
        if answer(name) == broker_id(2)
    )
    view.set_children(brokers, [broker_id(1)])  # broker 2 left
    view.put_json(f"{brokers}/{broker_id(1)}", broker_node(1, usage=0.5))  # a load report
    memo.follow(view)
    view.set_children(brokers, [broker_id(1), broker_id(2)])  # back, its old content cached
    mark = memo.mark(view)  # (as each socket read does before anything is memoised)
    resolved = resolve(TopicName.parse(topic), choice, view)
    place = place_of(str(resolved.topic.namespace_name), resolved.bundle.lower)
    memo.remember(mark, entries, topic.encode(), resolved.broker_id, place, len(topic))
    assert entries[topic.encode()] == broker_id(2)
    view.put_absent(f"{brokers}/{broker_id(2)}")  # gone again: its node read before the list
    memo.follow(view)
    assert entries.get(topic.encode()) in (None, answer(topic)) and answer(topic) != broker_id(2)


def test_an_answer_read_before_a_write_is_not_kept() -> None:
    kept = Kept()
    mark = kept.memo.mark(kept.view)
    kept.view.put_json("/schemas/public/default/t", {})  # (any write bumps the version)
    kept.memo.remember(mark, kept.http, b"late", "v", place_of("public/default", 0), 4)
    assert b"late" not in kept.http
    kept.memo.remember(kept.memo.mark(kept.view), kept.http, b"now", "v", place_of("a/b", 0), 3)
    assert kept.http[b"now"] == "v"


def test_a_new_view_drops_everything_and_closing_stops_following() -> None:
    kept = Kept()
    new = ClusterView.from_snapshot(cluster(owned={BUNDLES.ranges[0].name: 1}))
    kept.view = new
    assert kept.held() == set() and kept.memo.bytes_held == 0
    kept.memo.remember(None, kept.warm, b"k", "v", place_of("public/default", 0), 1)
    kept.memo.close()
    assert kept.warm == {} and kept.memo.bytes_held == 0
    kept.memo.remember(None, kept.warm, b"k", "v", place_of("public/default", 0), 1)
    assert kept.warm == {}  # (not following a view: nothing would keep it fresh)


def test_a_view_handed_over_again_and_again_is_followed_once() -> None:
    """A reloaded snapshot or a lost session hands the observers to the new view: following
    it must not add the memo again, and closing must leave nothing behind."""
    kept = Kept()
    old = kept.view
    for _ in range(3):
        new = ClusterView.from_snapshot(cluster())
        old.hand_over(new)
        kept.memo.follow(new)
        old = new
    seen: list[str] = []
    new.observe(seen.append)
    kept.memo.remember(None, kept.warm, b"k", "v", place_of("public/default", 0), 1)
    new.put_json("/admin/policies/public/default", {})
    assert kept.warm == {} and seen == ["/admin/policies/public/default"]
    kept.memo.close()
    assert new._observers == [seen.append]  # (nothing of ours left behind)


def test_a_released_table_gives_its_bytes_back() -> None:
    kept = Kept()
    kept.memo.release("http")
    kept.memo.release("binary")
    assert kept.memo.bytes_held == 0 and kept.memo.table("binary") is not kept.warm


class _Key:
    """A key that can be watched for being freed (bytes and str cannot be weakly referenced)."""


def test_a_released_table_keeps_nothing_of_its_own_alive() -> None:
    """A front end made and closed again and again (sockets, applications) leaves nothing in
    the memo's filing: neither its keys nor its table stay referenced once it is released."""
    kept = Kept()
    mark = kept.memo.mark(kept.view)
    held = kept.memo.bytes_held
    keys = [_Key() for _ in range(50)]
    freed = [weakref.ref(key) for key in keys]
    for _ in range(3):
        table = kept.memo.table("closing socket")
        for key in keys:
            kept.memo.remember(mark, table, key, "answer", place_of("public/default", 0), 10)
        kept.memo.release("closing socket")
    del keys, key, table
    gc.collect()
    assert [ref() for ref in freed] == [None] * 50
    assert kept.memo.bytes_held == held
    assert kept.held() == set(Kept.PLACES)  # (what others filed at the same place is kept)


# -- the one byte budget ---------------------------------------------------------------------


def test_at_the_bound_the_places_filed_first_go_first() -> None:
    """The full path answers the first topic of each bundle in a storm: at the bound it must
    not throw the whole memo away for each."""
    memo = AnswerMemo(max_bytes=3 * (2 + ENTRY_OVERHEAD))
    memo.follow(ClusterView.from_snapshot(cluster()))
    entries, other = memo.table("choice"), memo.table("other choice")
    memo.remember(None, entries, b"a1", "a1", place_of("t/ns", 1), 2)
    memo.remember(None, entries, b"b", "b", place_of("t/ns", 2), 2)
    memo.remember(None, other, b"a2", "a2", place_of("t/ns", 1), 2)  # (same bundle, other table)
    memo.remember(None, entries, b"c", "c", place_of("t/other", 3), 2)  # over: bundle 1 goes
    assert entries == {b"b": "b", b"c": "c"} and other == {}
    memo.remember(None, entries, b"d", "d", place_of("t/other", 4), 2)
    memo.remember(None, entries, b"e", "e", place_of("t/ns", 2), 2)  # over: bundle 2 goes
    assert entries == {b"c": "c", b"d": "d", b"e": "e"}
    memo.forget_namespace("t/ns")
    assert entries == {b"c": "c", b"d": "d"} and memo.bytes_held == 2 * (2 + ENTRY_OVERHEAD)
    memo.remember(None, entries, b"z" * 1000, "z", place_of("t/x", 0), 1000)  # over the bound
    assert b"z" * 1000 not in entries


def test_remembering_if_there_is_room_never_pushes_anything_out() -> None:
    memo = AnswerMemo(max_bytes=3 * (1 + ENTRY_OVERHEAD))
    memo.follow(ClusterView.from_snapshot(cluster()))
    entries = memo.table("choice")
    for i in range(5):
        memo.remember_if_room(entries, bytes([i]), i, place_of("t/ns", i), 1)
    assert entries == {b"\x00": 0, b"\x01": 1, b"\x02": 2}


def test_cold_answers_share_the_budget_and_go_when_there_is_nothing_older() -> None:
    memo = AnswerMemo(max_bytes=4096)
    memo.follow(ClusterView.from_snapshot(cluster()))
    cold = memo.cold_table("choice")
    cold.remember(topic_in(0), SHAPE, BUNDLES.boundaries, BUNDLES.ranges[0].lower, "first")
    other = topic_in(0, "public/other")
    cold.remember(other, SHAPE, BUNDLES.boundaries, BUNDLES.ranges[0].lower, "second")
    held = memo.bytes_held
    assert held > 0 and cold.entry(topic_in(0, start=500), SHAPE) == "first"
    entries = memo.table("warm")
    memo.remember(None, entries, b"k", "v", place_of("a/b", 0), 4096 - held)  # needs room
    assert entries == {b"k": "v"} and cold.entry(topic_in(0, start=500), SHAPE) is None
    assert cold.entry(other, SHAPE) == "second"  # (only as much as was needed)


def test_namespace_wide_places_go_with_their_namespace_not_with_a_bundle() -> None:
    memo = AnswerMemo()
    memo.follow(ClusterView.from_snapshot(cluster()))
    allowed = memo.table("allowed")
    memo.remember(None, allowed, ("role", "t"), True, place_of("t/ns", NAMESPACE_WIDE), 5)
    memo.forget_bundle("t/ns", 0)
    assert allowed == {("role", "t"): True}
    memo.forget(("tenant", "t"))
    assert allowed == {}


# -- cold answers by bundle ------------------------------------------------------------------


def cold_kept(bundle: int = 0) -> tuple[ClusterView, AnswerMemo, BundleAnswers]:
    view = ClusterView.from_snapshot(cluster(owned={BUNDLES.ranges[0].name: 1}))
    memo = AnswerMemo()
    memo.follow(view)
    answers = memo.cold_table("choice")
    lower = BUNDLES.ranges[bundle].lower
    answers.remember(topic_in(bundle), SHAPE, BUNDLES.boundaries, lower, "entry")
    return view, memo, answers


def test_a_cold_entry_answers_every_topic_of_its_bundle_and_request_shape() -> None:
    _, _, answers = cold_kept()
    assert answers.entry(topic_in(0, start=500), SHAPE) == "entry"
    assert answers.entry(topic_in(1), SHAPE) is None  # another bundle
    assert answers.entry(topic_in(0, start=500), b"\x18\x01") is None  # another shape
    other_domain = topic_in(0).replace(b"persistent:", b"non-persistent:")
    assert answers.entry(other_domain, SHAPE) is None


def test_names_the_full_path_would_refuse_or_read_otherwise_are_not_answered_cold() -> None:
    _, _, answers = cold_kept()
    prefix = "persistent://public/default/"
    too_long = next(  # (in the bundle of the entry)
        name
        for name in (f"{prefix}{n}{'t' * MAX_TOPIC_NAME_BYTES}" for n in range(100))
        if BUNDLES.find(zlib.crc32(name.encode())) == BUNDLES.ranges[0]
    )
    for name in (prefix + "..", prefix + ".", prefix, prefix + "a/b", prefix + "ünï", "t0"):
        assert answers.entry(name.encode(), SHAPE) is None, name
    assert answers.entry(too_long.encode(), SHAPE) is None


def test_cold_request_shapes_are_bounded() -> None:
    _, _, answers = cold_kept()
    lower = BUNDLES.ranges[0].lower
    for n in range(memo_module.MAX_TAILS + 5):
        answers.remember(topic_in(0), bytes([0x3A, n]), BUNDLES.boundaries, lower, n)
    shapes = sum(answers.entry(topic_in(0), bytes([0x3A, n])) is not None for n in range(40))
    assert shapes == memo_module.MAX_TAILS - 1  # (one shape was taken by cold_kept())
    answers.remember(topic_in(0), b"x" * 300, BUNDLES.boundaries, lower, "long")
    assert answers.entry(topic_in(0), b"x" * 300) is None


def test_what_a_dropped_cold_namespace_held_is_given_back() -> None:
    """Ownership churn drops namespaces again and again: their bytes must not pile up."""
    view, memo, answers = cold_kept()
    held = memo.bytes_held
    for n in range(1000):
        view.set_children("/namespace/public/default", [f"x{n}"])
        answers.remember(topic_in(0), SHAPE, BUNDLES.boundaries, 0, "again")
    assert memo.bytes_held == held


def test_a_cold_namespace_pushed_out_by_its_own_new_shape_leaves_no_bytes_behind() -> None:
    shape_bytes = len(SHAPE) + memo_module.SLOT_BYTES * 4 + memo_module.OVERHEAD_BYTES
    prefix = b"persistent://public/default"
    held = len(prefix) + memo_module.SLOT_BYTES * 4 + memo_module.OVERHEAD_BYTES + shape_bytes
    memo = AnswerMemo(max_bytes=held + shape_bytes - 1)  # room for one namespace, one shape
    memo.follow(ClusterView.from_snapshot(cluster()))
    cold = memo.cold_table("choice")
    lower = BUNDLES.ranges[0].lower
    cold.remember(topic_in(0), SHAPE, BUNDLES.boundaries, lower, "first")
    assert memo.bytes_held == held
    cold.remember(topic_in(0), b"\x18\x01", BUNDLES.boundaries, lower, "second shape")
    assert cold.entry(topic_in(0), SHAPE) is None  # (pushed out to make room)
    assert memo.bytes_held == 0 and cold.prefixes() == []
