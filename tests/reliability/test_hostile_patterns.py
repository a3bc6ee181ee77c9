"""Hostile topic-list patterns (RELIABILITY.md, "Hostile input"): patterns that make a
backtracking engine run for hours are filtered by RE2 as the broker's RE2J filters them, and
what RE2 itself finds costly is bounded by the listing's CPU budget.

The attack test imports only what the gateway had before RE2, so it can be replayed against
that code, where it fails by its timeout."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import pytest

from pulsar_lookup_gateway.lookup.topic_list import TopicLister, topics_hash
from pulsar_lookup_gateway.lookup.topics import NamespaceName
from pulsar_lookup_gateway.lookup.view import ClusterView

NS = NamespaceName("public", "default")
LEDGERS = "/managed-ledgers/public/default/persistent"
PREFIX = "public/default/"

#: Local names: long runs that almost match, and a few that match each pattern below.
LOCALS = [
    *("a" * n for n in (1, 10, 25, 39, 40, 41, 60, 4000)),
    *("a" * n + "x" for n in (10, 25, 40)),
    *("a" * n + "b" for n in (0, 1, 2, 40)),
    *("x" * n + "y" for n in (1, 2, 3, 40)),
    *("a" * n + "!" for n in (20, 39, 3990)),
    "x" * 40,
    "ab" * 20,
    "ba" * 30,
    "a" * 25 + "x-partition-0",
    "a" * 25 + "x-partition-1",
    "a" * 40 + "b-partition-7",
]


def local_of(topic: str) -> str:
    """The partitioned topic's local name."""
    local = topic.removeprefix("persistent://" + PREFIX)
    base, _, index = local.rpartition("-partition-")
    return base if base and index.isdigit() else local


def runs(local: str, char: str, end: str, least: int) -> bool:
    """`local` is at least `least` times `char`, then `end`."""
    return local.endswith(end) and len(local) - 1 >= least and set(local[:-1]) <= {char}


#: Each pattern (matched against the whole name without its scheme, ``public/default/...``)
#: and the same rule written out by hand.
ATTACKS: dict[str, Callable[[str], bool]] = {
    # 2**25 and 2**40 ways to split the name for a backtracking engine.
    "(.|.){25}x": lambda local: len(PREFIX + local) == 26 and local.endswith("x"),
    "(.|.){40}x": lambda local: len(PREFIX + local) == 41 and local.endswith("x"),
    PREFIX + "(a|a)*b": lambda local: runs(local, "a", "b", 0),
    PREFIX + "(a*)*b": lambda local: runs(local, "a", "b", 0),
    PREFIX + "((a+)+)+b": lambda local: runs(local, "a", "b", 1),
    PREFIX + "(x+x+)+y": lambda local: runs(local, "x", "y", 2),
    PREFIX + "(a|aa)+": lambda local: len(local) > 0 and set(local) == {"a"},
    # n**20 ways for a backtracking engine on a name that ends in no `a`.
    "(.*a){20}": lambda local: (PREFIX + local).count("a") >= 20 and local.endswith("a"),
    PREFIX + "(.*)*!": lambda local: local.endswith("!"),
}


def view_of(locals_: list[str]) -> ClusterView:
    nodes: dict[str, object] = {f"{LEDGERS}/{name}": {} for name in locals_}
    nodes["/admin/policies/public/default"] = {}
    return ClusterView.from_snapshot(nodes)


@pytest.mark.timeout(20)
@pytest.mark.parametrize("pattern", sorted(ATTACKS))
def test_backtracking_bombs_are_filtered_as_the_broker_filters_them(pattern: str) -> None:
    listing = TopicLister().listing(view_of(LOCALS), NS, pattern)
    expected = tuple(
        sorted(
            f"persistent://{PREFIX}{name}" for name in LOCALS if ATTACKS[pattern](local_of(name))
        )
    )
    assert expected, "each pattern matches some of the names"
    assert listing.filtered
    assert listing.topics == expected
    assert listing.topics_hash == topics_hash(expected)


def random_names(count: int, length: int, seed: int) -> list[str]:
    """Names varied enough that RE2's DFA meets a new state at almost every byte."""
    chooser = random.Random(seed)
    return [f"{n:05d}" + "".join(chooser.choices("ab", k=length - 5)) for n in range(count)]


#: What RE2 finds costly: each byte a new DFA state, ~3 ns per instruction (program size).
COSTLY = [".*a.{20}", "(.*a){38}.{20}", "(?i)(.*[ab]){50}", "(.|.){40}x"]


@pytest.mark.parametrize("pattern", COSTLY)
def test_what_re2_finds_costly_stays_within_the_budget(pattern: str) -> None:
    """The worst case measured: 200 names of 4,000 bytes an attacker created, each new to the
    DFA. Filtered (in steps: serving.namespace_queries gives the loop's other sockets a turn
    between them); the CPU time of one listing is printed."""
    names = random_names(200, 4000, seed=1)
    view = view_of(names)
    lister = TopicLister()
    lister.listing(view, NS)  # the list itself, built once for every pattern
    started = time.thread_time()
    listing = lister.listing(view, NS, pattern)
    spent = time.thread_time() - started
    again_started = time.thread_time()
    again = lister.listing(view, NS, pattern)
    again_spent = time.thread_time() - again_started
    assert listing.filtered and listing.refused is None
    assert again == listing
    print(
        f"\n{pattern!r} over {len(names)} names of 4,000 bytes: "
        "filtered, "
        f"{spent * 1000:.1f} ms CPU; again {again_spent * 1000:.2f} ms"
    )


def test_matching_is_linear_in_the_bytes_of_the_names() -> None:
    """CPU time per byte for 4x more names of the same kind (printed, not asserted: a shared
    machine's timing is no pass/fail); no budget here, to see the engine alone."""
    pattern = ".*a.{20}"
    for count in (50, 100, 200):
        names = random_names(count, 4000, seed=count)
        view = view_of(names)
        lister = TopicLister(pattern_budget=float("inf"))
        lister.listing(view, NS)
        started = time.thread_time()
        listing = lister.listing(view, NS, pattern)
        spent = time.thread_time() - started
        assert listing.filtered
        size = sum(len(PREFIX + name) for name in names)
        print(f"\n{count} names, {size:,} bytes: {spent * 1e9 / size:.0f} ns per byte")
