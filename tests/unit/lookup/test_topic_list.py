"""Topic listing: the broker's list, system-topic rule, pattern rules and list hash."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulsar_lookup_gateway.lookup.errors import NodeNotLoaded
from pulsar_lookup_gateway.lookup.topic_list import (
    MAX_PROGRAM_SIZE,
    SHARE,
    ListingWork,
    PatternInvalid,
    PatternRefused,
    TopicLister,
    TopicListing,
    TopicsPattern,
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


def compiled(pattern: str, max_length: int = 50) -> TopicsPattern:
    result = compile_topics_pattern(pattern, max_length)
    assert isinstance(result, TopicsPattern), result
    return result


def refusal(pattern: str, max_length: int = 50) -> str:
    result = compile_topics_pattern(pattern, max_length)
    assert isinstance(result, PatternRefused), result
    return result.reason


@pytest.mark.parametrize(
    "pattern",
    [
        "persistent://public/default/foo-.*",
        "public/default/foo-.*",
        "^persistent://public/default/foo-[0-9]+$",
        "non-persistent://public/default/x.*",
        "public/default/(orders|payments)-.*",
        # Exponential or polynomial for a backtracking engine, linear for RE2: all filter.
        "public/default/(a+)+b",
        "public/default/.*-in-.*",
        "public/default/(a|ab)*c",
        "(.|.){40}x",
        "(.*a){20}",
        "(?i)public/default/\\w+-\\d{1,8}",
        "public/default/\\\\C",  # an escaped backslash, then a C
    ],
)
def test_patterns_re2_compiles_filter(pattern: str) -> None:
    assert compiled(pattern).program_size <= MAX_PROGRAM_SIZE


JDK = " (the broker's JDK fallback would apply it)"


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("public/default/" + "x" * 36, "longer than 50 characters"),
        # RE2J refuses these, the JDK compiles them with a meaning RE2 cannot give.
        ("public/default/(a)\\1", "RE2 refuses it: invalid escape sequence: \\1" + JDK),
        ("public/default/(?=a).*", "RE2 refuses it: invalid perl operator: (?=" + JDK),
        ("public/default/(?<!a)b", "RE2 refuses it: invalid perl operator: (?<!" + JDK),
        ("public/default/a*+", "RE2 refuses it: bad repetition operator: *+" + JDK),
        ("public/default/x\\Z", "RE2 refuses it: invalid escape sequence: \\Z" + JDK),
        (
            "public/default/a{1001}",
            "RE2 refuses it: invalid repetition size: {1001}; in the JDK's meaning, "
            "RE2 refuses it: invalid repetition size: {1001}",
        ),
        # RE2J compiles these: over the gateway's bounds.
        ("public/default/\\pL+", "an RE2 program of 1216 instructions (over 512)"),
        ("((.?){99}){10}", "an RE2 program of 8914 instructions (over 512)"),
        ("\\pL{1000}", "RE2 refuses it: pattern too large - compile failed"),
        ("public/default/\ud800", "not Unicode text"),
    ],
)
def test_what_re2_refuses_is_answered_unfiltered_with_a_reason(pattern: str, reason: str) -> None:
    assert refusal(pattern) == reason
    listing = TopicLister().listing(view_with("a", "b"), NS, pattern)
    assert (listing.filtered, listing.refused) == (False, reason)
    assert listing.topics == ("persistent://public/default/a", "persistent://public/default/b")


def test_a_refusal_echoes_the_client_text_printable() -> None:
    assert refusal("public/default/\\p{\n}") == (
        "RE2 refuses it: invalid character class range: \\p{\\n}" + JDK
    )


def test_pattern_length_bound_is_the_setting() -> None:
    pattern = "public/default/" + "x" * 36
    assert compiled(pattern, 51).regex == pattern
    assert refusal("public/default/x", 0) == "longer than 0 characters"


@pytest.mark.parametrize(
    ("pattern", "name", "matches"),
    [
        # RE2's defaults mean what RE2J's (the broker's first engine) do.
        (".", "\u00e9", True),  # any code point, one at a time
        (".", "\U0001f600", True),
        (".", "\n", False),
        ("\\w", "\u00e9", False),  # \w, \d, \s, \b are ASCII
        ("\\d", "\u0663", False),
        ("\\s", "\u00a0", False),
        ("a\\b.", "a\u00e9", True),
        ("(?i)k", "\u212a", True),  # (?i) folds Unicode case (the Kelvin sign)
        ("(?i)STRASSE", "strasse", True),
        ("\\p{Greek}+", "\u03b1\u03b2\u03b3", True),
        ("[[:alpha:]]+", "abc", True),
        ("a$", "a\n", False),  # $ is the end of the name, not before a last newline
        ("a", "ab", False),  # the whole name (Java's matches())
        ("b", "ab", False),
        ("\\Qa.b\\E", "a.b", True),
        ("\\Qa.b\\E", "axb", False),
        ("x.y", "x\udc80y", True),  # a lone surrogate is one code point, as in Java
    ],
)
def test_match_semantics(pattern: str, name: str, matches: bool) -> None:
    assert compiled(pattern).fullmatch(name) is matches


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


def test_listing_without_pattern_or_with_a_refused_one_is_whole() -> None:
    view = view_with("a", "b")
    lister = TopicLister()
    for pattern in (None, "public/default/(a)\\1"):
        listing = lister.listing(view, NS, pattern)
        assert not listing.filtered
        assert listing.topics == ("persistent://public/default/a", "persistent://public/default/b")
        assert listing.topics_hash == topics_hash(listing.topics)
    assert lister.listing(view, NS).refused is None


def test_a_pattern_backtracking_would_run_away_on_filters() -> None:
    view = view_with("aaaaaaaaaaaaaaaaaaaaaaaaaaaaab", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaa!", "b")
    listing = TopicLister().listing(view, NS, "public/default/(a+)+b")
    assert (listing.filtered, listing.refused) == (True, None)
    assert listing.topics == ("persistent://public/default/aaaaaaaaaaaaaaaaaaaaaaaaaaaaab",)


def test_broker_side_evaluation_off_never_filters() -> None:
    listing = TopicLister(evaluate_patterns=False).listing(view_with("a"), NS, "public/.*")
    assert not listing.filtered and listing.topics == ("persistent://public/default/a",)
    assert listing.refused == "broker-side pattern evaluation is off"


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


class StepClock:
    """A clock that moves `step` seconds at each reading, and counts its readings."""

    def __init__(self, step: float) -> None:
        self.step = step
        self.now = 0.0
        self.readings = 0

    def __call__(self) -> float:
        self.readings += 1
        self.now += self.step
        return self.now


def steps_of(work: ListingWork, seconds: float) -> tuple[TopicListing, int]:
    """Step `work` to its end: (its listing, the steps it took)."""
    for steps in range(1, 100_000):
        done = work.step(seconds)
        if done is not None:
            return done, steps
    raise AssertionError("the listing never ended")


def test_any_list_is_filtered_in_steps_and_kept_until_it_changes() -> None:
    """Issue 42: a big namespace was answered unfiltered past 5 ms of filtering. Now any list
    is filtered, a step of `pattern_budget` of the clock at a time (the loop's other sockets
    go in between), and what it made is kept until the list changes."""
    names = [f"t{n:04d}-" + "a" * 40 for n in range(100)]  # ~5.7 KB of names to match
    view = view_with(*names)
    clock = StepClock(0.004)
    lister = TopicLister(pattern_budget=0.01, clock=clock)
    listing, steps = steps_of(lister.begin(view, NS, "public/default/t00[0-4].*"), 0.01)
    assert listing.filtered and listing.refused is None and steps > 3
    assert listing.topics == tuple(f"persistent://{NS}/t{n:04d}-" + "a" * 40 for n in range(50))
    assert listing.topics_hash == topics_hash(listing.topics)
    # Kept: the same request is made in one step, with no reading of the clock but the step's.
    readings = clock.readings
    again, steps = steps_of(lister.begin(view, NS, "public/default/t00[0-4].*"), 0.01)
    assert (again, steps) == (listing, 1) and clock.readings - readings == 2
    # A changed list is listed and matched again.
    view.set_children(LEDGERS, names[:10])
    listing, _ = steps_of(lister.begin(view, NS, "public/default/t00[0-4].*"), 0.01)
    assert listing.filtered and len(listing.topics) == 10


def test_the_first_listing_of_a_big_namespace_is_made_in_steps() -> None:
    """The list itself (parsing, sorting, hashing every name) is made in steps too: the same
    list as in one go, sorted."""
    names = [f"topic-{(n * 7919) % 5000:05d}" for n in range(5000)]
    view = view_with(*names)
    clock = StepClock(0.001)
    listing, steps = steps_of(TopicLister(clock=clock).begin(view, NS), 0.002)
    assert steps > 100
    assert listing.topics == tuple(sorted(f"persistent://{NS}/{name}" for name in names))
    assert listing.topics_hash == topics_hash(listing.topics)


def test_listings_of_a_list_in_the_making_share_its_build() -> None:
    """Review: each listing of a big namespace not listed yet would build (and hold) its own
    copy of the list; listings at the same time share one build."""
    view = view_with(*(f"topic-{n:05d}" for n in range(3000)))
    lister = TopicLister(clock=StepClock(0.001))
    first = lister.begin(view, NS)
    second = lister.begin(view, NS, "public/default/topic-0000.")
    done: dict[int, TopicListing] = {}
    while len(done) < 2:
        for index, work in enumerate((first, second)):
            if index not in done and (listing := work.step(0.002)) is not None:
                done[index] = listing
    assert len(done[0].topics) == 3000 and len(done[1].topics) == 10
    assert lister.begin(view, NS).step(0.002) == done[0]
    assert lister._lists[(NS, False)].topics is done[0].topics  # one list, made once
    assert not lister._building


def test_a_short_list_is_made_in_one_step() -> None:
    clock = StepClock(1.0)  # every reading is over any budget
    work = TopicLister(clock=clock).begin(view_with("a", "b"), NS, "public/default/a")
    listing = work.step(0.001)
    assert listing is not None and listing.filtered
    assert listing.topics == ("persistent://public/default/a",)


def test_the_partitions_of_a_topic_are_matched_as_one_name() -> None:
    partitions = [f"orders-partition-{n}" for n in range(2000)]  # ~50 KB of names
    view = view_with(*partitions, "other-partition-0")
    clock = StepClock(1.0)
    listing, steps = steps_of(TopicLister(clock=clock).begin(view, NS, "public/default/other"), 0.5)
    assert listing.filtered and listing.topics == ("persistent://public/default/other-partition-0",)
    _, list_steps = steps_of(TopicLister(clock=clock).begin(view, NS), 0.5)
    assert steps - list_steps <= 1  # two names matched, one hashed: under a KiB


@given(st.text(max_size=50))
def test_any_short_pattern_compiles_or_is_refused(pattern: str) -> None:
    """Whatever a client sends, the check never raises; an accepted pattern is matched against
    a long name that does not match (a backtracking engine's worst case), which a catastrophic
    pattern would turn into a hang (the test's timeout)."""
    result = compile_topics_pattern(pattern, 50)
    if isinstance(result, TopicsPattern):
        assert result.program_size <= MAX_PROGRAM_SIZE
        result.fullmatch("public/default/" + "a" * 300 + "!")
    elif isinstance(result, PatternInvalid):
        assert result.message.startswith("java.")
    else:
        assert result.reason


def test_all_listings_together_take_a_share_of_the_clock() -> None:
    """Review: thousands of distinct patterns in one read held the loop for seconds. Every
    listing is made, and filtered, but all listings together take SHARE of the clock: once
    that is spent, pause() says how long to wait (wall clock) before the next step."""
    names = [f"t{n:04d}-" + "a" * 40 for n in range(100)]
    view = view_with(*names)
    clock = StepClock(0.01)  # each reading of the thread's clock: 10 ms more
    wall = [0.0]
    lister = TopicLister(pattern_budget=0.005, clock=clock, wall=lambda: wall[0])
    assert lister.pause() == 0.0
    waited = spent = 0.0
    steps = 0
    for n in range(200):
        work = lister.begin(view, NS, f"public/default/t00{n % 10}{n}.*")
        while True:
            pause = lister.pause()  # (before every step, as serving.namespace_queries does)
            waited += pause
            wall[0] += pause
            before = clock.now
            done = work.step(lister.pattern_budget)
            spent += clock.now - before
            steps += 1
            if done is not None:
                break
        assert done.filtered
    # The waits kept the steps to SHARE of the time (one second's share ahead at first).
    # (Each reading moves this clock: a step's first reading is not its work.)
    assert waited > 0 and spent - 0.01 * steps <= SHARE * (wall[0] + 1) + 0.1
