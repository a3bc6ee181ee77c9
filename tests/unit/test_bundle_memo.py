"""The bundle memo: which topics its entries answer, and which writes to the view drop them."""

from __future__ import annotations

import zlib

from pulsar_lookup_gateway.listeners import bundle_memo
from pulsar_lookup_gateway.listeners.bundle_memo import BundleAnswers, BundleMemo, topic_and_tail
from pulsar_lookup_gateway.lookup.bundles import NamespaceBundles
from pulsar_lookup_gateway.lookup.resolve import broker_fingerprint
from pulsar_lookup_gateway.lookup.topics import MAX_TOPIC_NAME_BYTES
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.metadata_store.synthetic import (
    broker_id,
    broker_node,
    cluster,
    ownership_node,
)

BUNDLES = NamespaceBundles.equal(4)
PREFIX = "persistent://public/default/"


def topic_in(bundle: int, start: int = 0) -> bytes:
    """A topic of public/default whose hash falls in the bundle of that index."""
    for n in range(start, start + 100_000):
        name = f"{PREFIX}t{n}".encode()
        if BUNDLES.find(zlib.crc32(name)) == BUNDLES.ranges[bundle]:
            return name
    raise AssertionError("no topic found")


def kept(bundle: int = 0) -> tuple[ClusterView, BundleMemo, BundleAnswers]:
    """A view, its memo holding an entry for one bundle of the socket's choice."""
    view = ClusterView.from_snapshot(cluster(owned={BUNDLES.ranges[0].name: 1}))
    memo = BundleMemo(broker_fingerprint)
    memo.follow(view)
    answers = memo.answers_for("choice")
    lower = BUNDLES.ranges[bundle].lower
    answers.remember(topic_in(bundle), b"\x18\x00", BUNDLES.boundaries, lower, "entry")
    return view, memo, answers


def test_an_entry_answers_every_topic_of_its_bundle_and_request_shape() -> None:
    _, _, answers = kept()
    assert answers.entry(topic_in(0, 500), b"\x18\x00") == "entry"
    assert answers.entry(topic_in(1), b"\x18\x00") is None  # another bundle
    assert answers.entry(topic_in(0, 500), b"\x18\x01") is None  # another shape (authoritative)
    other_domain = topic_in(0).replace(b"persistent:", b"non-persistent:")
    assert answers.entry(other_domain, b"\x18\x00") is None


def test_names_the_full_path_would_refuse_or_read_otherwise_are_not_answered() -> None:
    _, _, answers = kept()
    too_long = next(  # (in the bundle of the entry)
        name
        for name in (f"{PREFIX}{n}{'t' * MAX_TOPIC_NAME_BYTES}" for n in range(100))
        if BUNDLES.find(zlib.crc32(name.encode())) == BUNDLES.ranges[0]
    )
    for name in (
        PREFIX + "..",
        PREFIX + ".",
        PREFIX,
        PREFIX + "a/b",
        PREFIX + "ünï",
        "t0",
        too_long,
    ):
        assert answers.entry(name.encode(), b"\x18\x00") is None, name[:40]


def test_a_bundle_owner_write_drops_that_bundle_only() -> None:
    view, _, answers = kept()
    answers.remember(topic_in(1), b"\x18\x00", BUNDLES.boundaries, BUNDLES.ranges[1].lower, "b1")
    view.put_json(f"/namespace/public/default/{BUNDLES.ranges[0].name}", ownership_node(2))
    assert answers.entry(topic_in(0), b"\x18\x00") is None
    assert answers.entry(topic_in(1), b"\x18\x00") == "b1"
    view.set_children("/namespace/public/default", [])  # the namespace's owned bundles
    assert answers.entry(topic_in(1), b"\x18\x00") is None


def test_a_load_report_keeps_entries_and_a_moved_broker_drops_them() -> None:
    view, _, answers = kept()
    path = f"/loadbalance/brokers/{broker_id(1)}"
    view.put_json(path, broker_node(1, usage=0.99))
    assert answers.entry(topic_in(0), b"\x18\x00") == "entry"
    moved = broker_node(1, usage=0.99)
    moved["pulsarServiceUrl"] = "pulsar://elsewhere:6650"
    view.put_json(path, moved)
    assert answers.entry(topic_in(0), b"\x18\x00") is None


def test_unread_nodes_keep_entries_and_anything_else_drops_them() -> None:
    view, _, answers = kept()
    view.put_json("/managed-ledgers/public/default/persistent/t", {})
    view.put_json("/admin/partitioned-topics/public/default/persistent/p", {"partitions": 2})
    assert answers.entry(topic_in(0), b"\x18\x00") == "entry"
    view.put_json("/admin/policies/public/default", {})
    assert answers.entry(topic_in(0), b"\x18\x00") is None


def test_a_new_view_drops_everything_and_closing_forgets_everything() -> None:
    _, memo, answers = kept()
    memo.follow(ClusterView.from_snapshot({}))
    assert answers.entry(topic_in(0), b"\x18\x00") is None
    memo.close()
    assert memo.bytes_held == 0


def test_a_view_handed_over_again_and_again_is_followed_once() -> None:
    """A reloaded snapshot or a lost session hands the observers to the new view: following
    it must not add the memo again, and closing must leave nothing behind."""
    old, memo, _ = kept()
    seen: list[str] = []
    for _ in range(3):
        new = ClusterView.from_snapshot(cluster())
        old.hand_over(new)
        memo.follow(new)
        old = new
    new.observe(seen.append)
    calls = 0
    original = memo.clear

    def counted() -> None:
        nonlocal calls
        calls += 1
        original()

    memo.clear = counted  # type: ignore[method-assign]
    new.put_json("/admin/policies/public/default", {})
    assert calls == 1 and seen == ["/admin/policies/public/default"]
    memo.close()
    calls = 0
    new.put_json("/admin/policies/public/default", {"x": 1})
    assert calls == 0


def test_request_shapes_and_bytes_are_bounded() -> None:
    _, memo, answers = kept()
    lower = BUNDLES.ranges[0].lower
    for n in range(bundle_memo.MAX_TAILS + 5):
        answers.remember(topic_in(0), bytes([0x3A, n]), BUNDLES.boundaries, lower, n)
    shapes = sum(answers.entry(topic_in(0), bytes([0x3A, n])) is not None for n in range(40))
    assert shapes == bundle_memo.MAX_TAILS - 1  # (one shape was taken by kept())
    answers.remember(topic_in(0), b"x" * 300, BUNDLES.boundaries, lower, "long")
    assert answers.entry(topic_in(0), b"x" * 300) is None
    assert memo.bytes_held > bundle_memo.MAX_TAILS * 2
    assert not memo.take_bytes(bundle_memo.MAX_BYTES)  # at the bound: everything starts over
    assert memo.bytes_held == 0 and answers.entry(topic_in(0), b"\x18\x00") is None


def test_what_a_dropped_namespace_held_is_given_back() -> None:
    """Ownership churn drops namespaces again and again: their bytes must not pile up until
    the bound drops everything."""
    view, memo, answers = kept()
    held = memo.bytes_held
    for n in range(1000):
        view.set_children("/namespace/public/default", [f"x{n}"])
        answers.remember(topic_in(0), b"\x18\x00", BUNDLES.boundaries, 0, "again")
    assert memo.bytes_held == held


def test_topic_and_tail_read_a_memo_key() -> None:
    assert topic_and_tail(b"\x0a\x03abc\x18\x01") == (b"abc", b"\x18\x01")
    assert topic_and_tail(b"\x0a\x05abc") is None
    assert topic_and_tail(b"\x12\x01a") is None
