"""Which writes to the view drop which answers of the caches that outlive view versions: the
lookup memo (answers by request bytes, filed under their bundle) and the bundle memo, both real,
following one view through a WriteFollower as a binary socket's lookups do."""

from __future__ import annotations

import zlib

from pulsar_lookup_gateway.listeners.bundle_memo import BundleAnswers, BundleMemo
from pulsar_lookup_gateway.listeners.lookup_memo import LookupMemo
from pulsar_lookup_gateway.lookup.bundles import NamespaceBundles
from pulsar_lookup_gateway.lookup.resolve import broker_fingerprint, resolve
from pulsar_lookup_gateway.lookup.selection import ChoiceSource, ListenerChoice
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.metadata_store.synthetic import (
    broker_id,
    broker_node,
    cluster,
    ownership_node,
)
from pulsar_lookup_gateway.serving.view_writes import WriteFollower, bundle_lower

BUNDLES = NamespaceBundles.equal(4)
SHAPE = b"\x18\x00"  # the request's fields after its request id


def topic_in(bundle: int, namespace: str = "public/default") -> bytes:
    """A topic of `namespace` whose hash falls in the bundle of that index."""
    for n in range(100_000):
        name = f"persistent://{namespace}/t{n}".encode()
        if BUNDLES.find(zlib.crc32(name)) == BUNDLES.ranges[bundle]:
            return name
    raise AssertionError("no topic found")


class Caches:
    """A view and both caches of one socket following it, holding the answers of bundles 0
    and 1 of public/default and bundle 0 of public/other."""

    PLACES = (("public/default", 0), ("public/default", 1), ("public/other", 0))

    def __init__(self, view: ClusterView | None = None) -> None:
        self.view = view or ClusterView.from_snapshot(cluster(owned={BUNDLES.ranges[0].name: 1}))
        self.memo = LookupMemo()
        self.bundle_memo = BundleMemo()
        self.follower = WriteFollower(broker_fingerprint, [self.memo, self.bundle_memo])
        self.follower.check(self.view)
        self.entries = self.memo.entries_for("choice")
        self.answers: BundleAnswers = self.bundle_memo.answers_for("choice")
        for namespace, index in self.PLACES:
            topic, lower = topic_in(index, namespace), BUNDLES.ranges[index].lower
            self.memo.remember(self.entries, topic, (namespace, index), (namespace, lower))
            self.answers.remember(topic, SHAPE, BUNDLES.boundaries, lower, (namespace, index))

    def held(self) -> set[tuple[str, int]]:
        """The places both caches still answer (after the batch's check, as lookups do); a
        place one cache answers and the other does not fails the test."""
        self.follower.check(self.view)
        by_memo, by_bundles = set(), set()
        for namespace, index in self.PLACES:
            topic = topic_in(index, namespace)
            if topic in self.entries:
                by_memo.add((namespace, index))
            if self.answers.entry(topic, SHAPE) is not None:
                by_bundles.add((namespace, index))
        assert by_memo == by_bundles
        return by_memo


def test_a_bundle_owner_write_drops_that_bundle_only() -> None:
    caches = Caches()
    held = caches.memo.bytes_held
    caches.view.put_json(f"/namespace/public/default/{BUNDLES.ranges[0].name}", ownership_node(2))
    assert caches.held() == {("public/default", 1), ("public/other", 0)}
    assert caches.memo.bytes_held < held  # what the dropped entry held is given back
    # the service unit state of the extensible load manager names bundles the same way
    caches.view.put_json(f"/service_unit_state/public/other/{BUNDLES.ranges[0].name}", {})
    assert caches.held() == {("public/default", 1)}


def test_a_namespace_list_of_owned_bundles_drops_that_namespace_only() -> None:
    caches = Caches()
    caches.view.set_children("/namespace/public/default", [])
    assert caches.held() == {("public/other", 0)}
    caches.view.put_json("/namespace/public/other/not-a-bundle", {})  # unknown node: the namespace
    assert caches.held() == set()


def test_a_load_report_keeps_answers_and_a_moved_broker_drops_them() -> None:
    caches = Caches()
    path = f"/loadbalance/brokers/{broker_id(1)}"
    caches.view.put_json(path, broker_node(1, usage=0.99))
    assert len(caches.held()) == 3
    moved = broker_node(1, usage=0.99)
    moved["pulsarServiceUrl"] = "pulsar://elsewhere:6650"
    caches.view.put_json(path, moved)
    assert caches.held() == set()


def test_a_broker_joining_or_leaving_drops_everything() -> None:
    caches = Caches()
    caches.view.set_children("/loadbalance/brokers", [broker_id(1)])
    assert caches.held() == set()


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
    memo = LookupMemo()
    follower = WriteFollower(broker_fingerprint, [memo])
    entries = memo.entries_for(choice)

    def answer(topic: str) -> str | None:
        return resolve(TopicName.parse(topic), choice, view).broker_id

    follower.check(view)
    topic = next(
        name
        for name in (f"persistent://public/default/t{n}" for n in range(1000))
        if answer(name) == broker_id(2)
    )
    view.set_children(brokers, [broker_id(1)])  # broker 2 left
    view.put_json(f"{brokers}/{broker_id(1)}", broker_node(1, usage=0.5))  # a load report
    follower.check(view)
    view.set_children(brokers, [broker_id(1), broker_id(2)])  # back, its old content cached
    follower.check(view)  # (as each socket read does before anything is memoised)
    resolved = resolve(TopicName.parse(topic), choice, view)
    bundle = (str(resolved.topic.namespace_name), resolved.bundle.lower)
    memo.remember(entries, topic.encode(), resolved.broker_id, bundle)
    assert entries[topic.encode()] == broker_id(2)
    view.put_absent(f"{brokers}/{broker_id(2)}")  # gone again: its node read before the list
    follower.check(view)
    assert entries.get(topic.encode()) in (None, answer(topic)) and answer(topic) != broker_id(2)


def test_unread_nodes_keep_answers_and_anything_else_drops_them() -> None:
    caches = Caches()
    caches.view.put_json("/managed-ledgers/public/default/persistent/t", {})
    caches.view.put_json("/admin/partitioned-topics/public/default/persistent/p", {"partitions": 2})
    caches.view.put_json("/schemas/public/default/t", {})
    assert len(caches.held()) == 3
    caches.view.put_json("/admin/policies/public/default", {})
    assert caches.held() == set() and caches.memo.bytes_held == 0


def test_a_tenant_list_and_a_malformed_owner_path_drop_everything() -> None:
    for path in ("/namespace/public", "/namespace//default/x", "/namespace/public/default/a/b"):
        caches = Caches()
        caches.view.put_json(path, {})
        assert caches.held() == set(), path


def test_a_new_view_drops_everything_and_closing_stops_following() -> None:
    caches = Caches()
    new = ClusterView.from_snapshot(cluster(owned={BUNDLES.ranges[0].name: 1}))
    caches.view = new
    assert caches.held() == set()
    caches.memo.remember(caches.entries, b"k", "v", ("public/default", 0))
    caches.follower.close()
    assert caches.entries == {} and caches.memo.bytes_held == 0
    caches.memo.remember(caches.entries, b"k", "v", ("public/default", 0))
    new.put_json("/admin/policies/public/default", {})  # no longer followed: nothing heard
    assert caches.entries == {b"k": "v"}


def test_a_view_handed_over_again_and_again_is_followed_once() -> None:
    """A reloaded snapshot or a lost session hands the observers to the new view: following
    it must not add the follower again, and closing must leave nothing behind."""
    caches = Caches()
    old = caches.view
    for _ in range(3):
        new = ClusterView.from_snapshot(cluster())
        old.hand_over(new)
        caches.follower.check(new)
        old = new
    seen: list[str] = []
    new.observe(seen.append)
    caches.memo.remember(caches.entries, b"k", "v", ("public/default", 0))
    new.put_json("/admin/policies/public/default", {})
    assert caches.entries == {} and seen == ["/admin/policies/public/default"]
    caches.follower.close()
    caches.memo.remember(caches.entries, b"k", "v", ("public/default", 0))
    new.put_json("/admin/policies/public/default", {"x": 1})
    assert caches.entries == {b"k": "v"}
    assert new._observers == [seen.append]  # (nothing of ours left behind)


def test_bundle_lower_reads_a_bundle_name() -> None:
    assert bundle_lower("0x40000000_0x80000000") == 0x40000000
    for name in ("", "0x4000_0x8000", "40000000xx_0x80000000", "0xzzzzzzzz_0x80000000"):
        assert bundle_lower(name) is None, name
