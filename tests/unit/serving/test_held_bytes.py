"""The one byte budget (serving.held_bytes): charges, releases, the bounds (per owner, per
pool), room made by closing stalled owners. Charges go to the unread pool (100 KiB of 200)
unless a test names the watch pool."""

from __future__ import annotations

import pytest

from pulsar_lookup_gateway.serving.held_bytes import UNREAD, WATCH, HeldBytes
from pulsar_lookup_gateway.serving.metrics import LookupMetrics

KIB = 1024


def test_charges_within_both_bounds_are_held_and_given_back() -> None:
    budget = HeldBytes(total=200 * KIB, per_owner=40 * KIB, unread=100 * KIB)
    assert budget.charge("a", 30 * KIB) is None
    assert budget.charge("a", 10 * KIB) is None
    assert budget.charge("a", 1) is not None  # its own bound
    assert budget.held_by("a") == 40 * KIB
    assert budget.refusals["client"] == 1
    budget.release("a", 15 * KIB)
    assert budget.held == 25 * KIB and budget.peak == 40 * KIB
    budget.release("a", 100 * KIB)  # never below zero, never another owner's
    assert budget.held == 0 and budget.held_by("a") == 0
    budget.forget("nobody")
    budget.release("nobody", 5)
    assert budget.held == 0


def test_the_total_refuses_and_a_refused_charge_charges_nothing() -> None:
    budget = HeldBytes(total=200 * KIB, per_owner=40 * KIB, unread=100 * KIB)
    for owner in "abc":
        assert budget.charge(owner, 30 * KIB) is None
    reason = budget.charge("d", 20 * KIB)
    assert reason is not None and str(100 * KIB) in reason
    assert budget.held == 90 * KIB and budget.held_by("d") == 0
    assert budget.refusals["total"] == 1
    budget.forget("b")
    assert budget.charge("d", 20 * KIB) is None
    assert budget.held == 80 * KIB


def test_stalled_owners_are_closed_longest_stalled_first_to_make_room() -> None:
    budget = HeldBytes(total=200 * KIB, per_owner=40 * KIB, unread=100 * KIB)
    closed: list[str] = []
    for owner in "abc":
        assert budget.charge(owner, 30 * KIB) is None
    budget.stalled("b", lambda reason: closed.append("b"))
    budget.stalled("a", lambda reason: closed.append("a"))
    budget.stalled("c", lambda reason: closed.append("c"))
    budget.reading("c")  # it reads again: not closed
    assert budget.charge("reader", 40 * KIB) is None
    assert closed == ["b"]  # one was enough
    assert budget.held == 100 * KIB and budget.held_by("b") == 0
    assert budget.charge("other", 10 * KIB) is None
    assert closed == ["b", "a"]
    assert budget.refusals["stalled"] == 2
    assert budget.charge("more", 40 * KIB) is not None  # nobody stalled is left
    # a stalled owner that holds nothing is not closed (it frees nothing)
    budget.stalled("c", lambda reason: closed.append("c"))
    budget.release("c", 30 * KIB)
    assert budget.charge("more", 40 * KIB) is None
    assert budget.charge("last", 20 * KIB) is not None  # 110 KiB: c frees nothing
    assert closed == ["b", "a"]


def test_a_per_owner_bound_above_the_total_is_refused() -> None:
    with pytest.raises(ValueError, match="per_owner"):
        HeldBytes(total=10, per_owner=20, unread=5)
    with pytest.raises(ValueError, match="unread"):
        HeldBytes(total=10, per_owner=5, unread=10)


def test_what_strangers_pin_cannot_starve_what_watches_hold() -> None:
    """Unread answers fill their share; watched names still have theirs, and the other way
    round. One client's bound holds in each pool."""
    budget = HeldBytes(total=100 * KIB, per_owner=40 * KIB, unread=40 * KIB)
    for owner in "ab":
        assert budget.charge(owner, 20 * KIB) is None  # strangers' unread answers
    assert budget.charge("c", 1) is not None  # the unread share is full
    for owner in "wxy":
        assert budget.charge(owner, 20 * KIB, WATCH) is None  # names: 60 KiB, their share
    assert budget.charge("z", 1, WATCH) is not None
    assert budget.pools[UNREAD].held == 40 * KIB and budget.pools[WATCH].held == 60 * KIB
    assert budget.held == budget.total == 100 * KIB
    assert budget.charge("w", 20 * KIB) is not None  # no room in the unread share
    budget.release("a", 20 * KIB)
    assert budget.charge("w", 20 * KIB) is None
    assert budget.refusals == {"client": 0, "total": 3, "stalled": 0}
    budget.release("w", 20 * KIB, WATCH)  # a pool's bytes are given back to that pool only
    assert budget.pools[WATCH].held == 40 * KIB and budget.held_by("w") == 20 * KIB
    budget.forget("w")
    assert budget.held == 60 * KIB and budget.held_by("w") == 0  # "b"; "x" and "y"


def test_one_clients_bound_holds_in_each_pool() -> None:
    """A watch stream's names fill its bound in the watch pool; its queued first answers have
    the same bound in the unread pool."""
    budget = HeldBytes(total=200 * KIB, per_owner=40 * KIB, unread=100 * KIB)
    assert budget.charge("s", 40 * KIB, WATCH) is None
    assert budget.charge("s", 1, WATCH) is not None
    assert budget.charge("s", 40 * KIB) is None
    assert budget.charge("s", 1) is not None
    assert budget.held_by("s") == 80 * KIB and budget.refusals["client"] == 2


def test_room_is_made_in_the_pool_that_is_full() -> None:
    """A stalled owner is closed only for room in a pool it holds bytes in."""
    budget = HeldBytes(total=100 * KIB, per_owner=40 * KIB, unread=40 * KIB)
    closed: list[str] = []
    assert budget.charge("names", 30 * KIB, WATCH) is None
    budget.stalled("names", lambda reason: closed.append("names"))
    assert budget.charge("stranger", 30 * KIB) is None
    budget.stalled("stranger", lambda reason: closed.append("stranger"))
    assert budget.charge("reader", 20 * KIB) is None  # the stranger closed, not "names"
    assert closed == ["stranger"] and budget.refusals["stalled"] == 1
    assert budget.held_by("names") == 30 * KIB


def test_the_budget_shows_on_metrics() -> None:
    metrics = LookupMetrics()
    budget = HeldBytes(total=100 * KIB, per_owner=40 * KIB, unread=64 * KIB)
    assert budget.charge("a", 50 * KIB) is not None
    budget.expose(metrics)
    assert budget.charge("a", 30 * KIB) is None
    assert budget.charge("b", 80 * KIB) is not None
    assert budget.charge("c", 5 * KIB, WATCH) is None
    sample = metrics.registry.get_sample_value
    assert sample("pulsar_lookup_gateway_held_bytes", {"pool": "unread"}) == 30 * KIB
    assert sample("pulsar_lookup_gateway_held_bytes", {"pool": "watch"}) == 5 * KIB
    assert sample("pulsar_lookup_gateway_held_bytes_limit", {"pool": "unread"}) == 64 * KIB
    assert sample("pulsar_lookup_gateway_held_bytes_limit", {"pool": "watch"}) == 36 * KIB
    assert sample("pulsar_lookup_gateway_held_bytes_refusals_total", {"reason": "client"}) == 2


def test_a_hold_charges_its_owner_and_gives_everything_back_at_once() -> None:
    budget = HeldBytes(total=200 * KIB, per_owner=40 * KIB, unread=100 * KIB)
    hold = budget.hold("a")
    assert hold.add(20 * KIB) is None
    assert hold.add(30 * KIB) is not None  # its owner's bound: nothing added
    assert hold.size == 20 * KIB and budget.held_by("a") == 20 * KIB
    assert hold.keep(25 * KIB) is None  # a body a little larger than the answer it was
    assert hold.keep(10 * KIB) is None
    assert budget.held == 10 * KIB
    assert hold.keep(50 * KIB) is not None
    assert hold.size == 10 * KIB
    hold.release()
    hold.release()
    assert budget.held == 0 and hold.size == 0


def test_a_reservation_is_charged_ahead_and_taken_by_what_is_read() -> None:
    budget = HeldBytes(total=200 * KIB, per_owner=40 * KIB, unread=100 * KIB)
    hold = budget.hold("a")
    assert hold.reserve(30 * KIB) is None
    assert hold.reserve(20 * KIB) is not None  # the owner's bound: nothing reserved
    assert budget.held == 30 * KIB
    assert hold.add(20 * KIB) is None  # within the reservation: nothing more charged
    assert budget.held == 30 * KIB and hold.reserved == 10 * KIB
    assert hold.add(15 * KIB) is None  # 10 KiB of the reservation, 5 more charged
    assert budget.held == 35 * KIB and hold.read == 35 * KIB and hold.reserved == 0
    assert hold.add(10 * KIB) is not None
    assert hold.read == 35 * KIB
    hold.release()
    assert budget.held == 0
