"""The bundle memo: which topics its entries answer, and which writes to the view drop them."""

from __future__ import annotations

import zlib

from pulsar_lookup_gateway.listeners import bundle_memo
from pulsar_lookup_gateway.listeners.bundle_memo import BundleAnswers, BundleMemo, topic_and_tail
from pulsar_lookup_gateway.lookup.bundles import NamespaceBundles
from pulsar_lookup_gateway.lookup.resolve import broker_fingerprint
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
    for name in (PREFIX + "..", PREFIX + ".", PREFIX, PREFIX + "a/b", PREFIX + "ünï", "t0"):
        assert answers.entry(name.encode(), b"\x18\x00") is None, name


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
    assert memo.slots == 0


def test_request_shapes_and_slots_are_bounded() -> None:
    _, memo, answers = kept()
    lower = BUNDLES.ranges[0].lower
    for n in range(bundle_memo.MAX_TAILS + 5):
        answers.remember(topic_in(0), bytes([0x3A, n]), BUNDLES.boundaries, lower, n)
    shapes = sum(answers.entry(topic_in(0), bytes([0x3A, n])) is not None for n in range(40))
    assert shapes == bundle_memo.MAX_TAILS - 1  # (one shape was taken by kept())
    answers.remember(topic_in(0), b"x" * 300, BUNDLES.boundaries, lower, "long")
    assert answers.entry(topic_in(0), b"x" * 300) is None
    assert memo.slots == bundle_memo.MAX_TAILS * (len(BUNDLES.boundaries) - 1)
    assert not memo.take_slots(bundle_memo.MAX_SLOTS)  # at the bound: everything starts over
    assert memo.slots == 0 and answers.entry(topic_in(0), b"\x18\x00") is None


def test_topic_and_tail_read_a_memo_key() -> None:
    assert topic_and_tail(b"\x0a\x03abc\x18\x01") == (b"abc", b"\x18\x01")
    assert topic_and_tail(b"\x0a\x05abc") is None
    assert topic_and_tail(b"\x12\x01a") is None
