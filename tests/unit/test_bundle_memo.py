"""The bundle memo: which topics its entries answer, and its bounds (which writes to the view
drop its entries: test_view_writes)."""

from __future__ import annotations

import zlib

from pulsar_lookup_gateway.listeners import bundle_memo
from pulsar_lookup_gateway.listeners.bundle_memo import BundleAnswers, BundleMemo, topic_and_tail
from pulsar_lookup_gateway.lookup.bundles import NamespaceBundles
from pulsar_lookup_gateway.lookup.resolve import broker_fingerprint
from pulsar_lookup_gateway.lookup.topics import MAX_TOPIC_NAME_BYTES
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.metadata_store.synthetic import cluster
from pulsar_lookup_gateway.serving.view_writes import WriteFollower

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
    """A view, a memo following its writes and holding an entry for one bundle of the
    socket's choice."""
    view = ClusterView.from_snapshot(cluster(owned={BUNDLES.ranges[0].name: 1}))
    memo = BundleMemo()
    WriteFollower(broker_fingerprint, [memo]).check(view)
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
