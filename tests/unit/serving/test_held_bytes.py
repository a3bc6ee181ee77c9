"""The one byte budget (serving.held_bytes): charges, releases, both bounds, room made by
closing stalled owners."""

from __future__ import annotations

import pytest

from pulsar_lookup_gateway.serving.held_bytes import HeldBytes
from pulsar_lookup_gateway.serving.metrics import LookupMetrics

KIB = 1024


def test_charges_within_both_bounds_are_held_and_given_back() -> None:
    budget = HeldBytes(total=100 * KIB, per_owner=40 * KIB)
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
    budget = HeldBytes(total=100 * KIB, per_owner=40 * KIB)
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
    budget = HeldBytes(total=100 * KIB, per_owner=40 * KIB)
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
        HeldBytes(total=10, per_owner=20)


def test_the_budget_shows_on_metrics() -> None:
    metrics = LookupMetrics()
    budget = HeldBytes(total=100 * KIB, per_owner=40 * KIB)
    assert budget.charge("a", 50 * KIB) is not None
    budget.expose(metrics)
    assert budget.charge("a", 30 * KIB) is None
    assert budget.charge("b", 80 * KIB) is not None
    sample = metrics.registry.get_sample_value
    assert sample("pulsar_lookup_gateway_held_bytes") == 30 * KIB
    assert sample("pulsar_lookup_gateway_held_bytes_limit") == 100 * KIB
    assert sample("pulsar_lookup_gateway_held_bytes_refusals_total", {"reason": "client"}) == 2


def test_a_hold_charges_its_owner_and_gives_everything_back_at_once() -> None:
    budget = HeldBytes(total=100 * KIB, per_owner=40 * KIB)
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
    budget = HeldBytes(total=100 * KIB, per_owner=40 * KIB)
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
