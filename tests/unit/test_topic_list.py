"""Topic listing: the broker's list, system-topic rule, pattern rules and list hash."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulsar_lookup_gateway.lookup.errors import NodeNotLoaded
from pulsar_lookup_gateway.lookup.topic_list import (
    TopicLister,
    compile_topics_pattern,
    crc32c,
    is_system_topic,
    persistent_topics,
    topics_hash,
)
from pulsar_lookup_gateway.lookup.topics import NamespaceName, TopicName
from pulsar_lookup_gateway.lookup.view import ClusterView

NS = NamespaceName("public", "default")
LEDGERS = "/managed-ledgers/public/default/persistent"


def view_with(*encoded: str, namespace: bool = True) -> ClusterView:
    nodes: dict[str, object] = {f"{LEDGERS}/{name}": {} for name in encoded}
    if namespace:
        nodes["/admin/policies/public/default"] = {}
    return ClusterView.from_snapshot(nodes)


def test_crc32c_check_value() -> None:
    # The standard check value of CRC-32C (iSCSI, RFC 3720), and of an empty input.
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"") == 0
    assert crc32c(b"6789", crc32c(b"12345")) == 0xE3069283


def test_hash_is_guavas_little_endian_hex_of_the_sorted_joined_names() -> None:
    names = ["persistent://t/n/b", "persistent://t/n/a"]
    expected = crc32c(b"persistent://t/n/a,persistent://t/n/b").to_bytes(4, "little").hex()
    assert topics_hash(names) == expected == topics_hash(reversed(names))
    assert topics_hash([]) == "00000000"
    assert len(topics_hash(["x"])) == 8


@pytest.mark.parametrize(
    ("topic", "system"),
    [
        ("persistent://public/default/orders", False),
        ("persistent://public/default/__change_events", True),
        ("persistent://public/default/__change_events-partition-2", True),
        ("persistent://public/default/__transaction_buffer_snapshot", True),
        ("persistent://public/default/__transaction_buffer_snapshot_segments", True),
        ("persistent://public/default/__transaction_buffer_snapshot_indexes", True),
        ("persistent://public/default/orders-sub__transaction_pending_ack", True),
        ("persistent://pulsar/system/transaction_coordinator_assign-partition-0", True),
        ("persistent://pulsar/system/__transaction_log_3", True),
        ("persistent://pulsar/system/other", False),
        ("persistent://public/default/change_events", False),
    ],
)
def test_system_topics(topic: str, system: bool) -> None:
    assert is_system_topic(TopicName.parse(topic)) is system


def test_persistent_topics_are_decoded_sorted_and_without_system_topics() -> None:
    view = view_with("b", "a+b", "c%2Bd", "__change_events", "p-partition-0", "%2E%2E")
    assert persistent_topics(view, NS) == [
        "persistent://public/default/a b",
        "persistent://public/default/b",
        "persistent://public/default/c+d",
        "persistent://public/default/p-partition-0",
    ]


@pytest.mark.parametrize(
    ("pattern", "filters"),
    [
        ("persistent://public/default/foo-.*", True),
        ("public/default/foo-.*", True),
        ("^persistent://public/default/foo-[0-9]+$", True),
        ("non-persistent://public/default/x.*", True),
        ("public/default/(orders|payments)-.*", True),
        ("public/default/" + "x" * 36, False),  # 51 characters: longer than 50
        ("public/default/(a+)+b", False),  # nested repetition: exponential backtracking
        ("public/default/.*-in-.*", False),  # two variable repetitions: quadratic
        ("public/default/(a|ab)*c", False),  # alternation inside a repetition
        ("public/default/(a)\\1", False),  # backreference
        ("public/default/(?=a).*", False),  # lookaround
        ("public/default/[", False),  # not a regular expression
        ("http://public/default/x", False),  # a scheme that is not a topic domain
    ],
)
def test_which_patterns_filter(pattern: str, filters: bool) -> None:
    assert (compile_topics_pattern(pattern, 50) is not None) is filters


def test_pattern_length_bound_is_the_setting() -> None:
    pattern = "public/default/" + "x" * 36
    assert compile_topics_pattern(pattern, 51) is not None
    assert compile_topics_pattern("public/default/x", 0) is None


def test_listing_filters_on_the_partitioned_name_without_scheme() -> None:
    view = view_with("foo-1", "foo-2-partition-0", "foo-2-partition-1", "bar", "xfoo-1")
    lister = TopicLister()
    listing = lister.listing(view, NS, "persistent://public/default/foo-[0-9]")
    assert listing.filtered and listing.changed
    assert listing.topics == (
        "persistent://public/default/foo-1",
        "persistent://public/default/foo-2-partition-0",
        "persistent://public/default/foo-2-partition-1",
    )
    assert listing.topics_hash == topics_hash(listing.topics)


def test_listing_without_pattern_or_with_an_unsafe_one_is_whole() -> None:
    view = view_with("a", "b")
    lister = TopicLister()
    for pattern in (None, "public/default/(a+)+$"):
        listing = lister.listing(view, NS, pattern)
        assert not listing.filtered
        assert listing.topics == ("persistent://public/default/a", "persistent://public/default/b")
        assert listing.topics_hash == topics_hash(listing.topics)


def test_broker_side_evaluation_off_never_filters() -> None:
    listing = TopicLister(evaluate_patterns=False).listing(view_with("a"), NS, "public/.*")
    assert not listing.filtered and listing.topics == ("persistent://public/default/a",)


def test_an_unchanged_hash_answers_no_topics() -> None:
    view = view_with("a", "b")
    lister = TopicLister()
    first = lister.listing(view, NS, "public/default/a")
    again = lister.listing(view, NS, "public/default/a", first.topics_hash)
    assert (again.topics, again.changed, again.filtered) == ((), False, True)
    assert again.topics_hash == first.topics_hash
    other = lister.listing(view, NS, "public/default/a", "00000001")
    assert other.changed and other.topics == first.topics


def test_a_missing_namespace_lists_nothing_and_reads_no_ledgers() -> None:
    partial = ClusterView(complete=False)
    partial.set_children("/admin/policies", ["public"])
    partial.set_children("/admin/policies/public", [])
    listing = TopicLister().listing(partial, NS)
    assert listing.topics == () and listing.changed
    partial.set_children("/admin/policies/public", ["default"])
    partial.put_json("/admin/policies/public/default", {})
    with pytest.raises(NodeNotLoaded) as missing:
        TopicLister().listing(partial, NS)
    assert missing.value.path == LEDGERS + "/"


def test_the_list_follows_the_children() -> None:
    view = ClusterView(complete=False)
    view.set_children("/admin/policies", ["public"])
    view.set_children("/admin/policies/public", ["default"])
    view.put_json("/admin/policies/public/default", {})
    view.set_children(LEDGERS, ["a"])
    lister = TopicLister()
    assert lister.listing(view, NS).topics == ("persistent://public/default/a",)
    view.set_children(LEDGERS, ["a", "b"])
    assert len(lister.listing(view, NS).topics) == 2


def test_caches_are_bounded() -> None:
    lister = TopicLister(max_entries=3)
    view = view_with("a")
    for n in range(10):
        lister.listing(view, NS, f"public/default/{n}")
    assert len(lister._filtered) == 3


@given(st.text(max_size=50))
def test_any_short_pattern_compiles_or_is_refused(pattern: str) -> None:
    """Whatever a client sends, the check never raises; an accepted pattern is matched against
    a long name that does not match (a backtracking engine's worst case), which a catastrophic
    pattern would turn into a hang (the test's timeout)."""
    compiled = compile_topics_pattern(pattern, 50)
    if compiled is not None:
        compiled.fullmatch("public/default/" + "a" * 300 + "!")
