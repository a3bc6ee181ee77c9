"""The bound on unread answers (listeners.binary.reply_budget), write by write."""

from __future__ import annotations

from pulsar_lookup_gateway.listeners.binary.reply_budget import ReplyBudget
from pulsar_lookup_gateway.serving.held_bytes import HeldBytes

KIB = 1024


def budget_of(total: int, per_connection: int, floor: int) -> ReplyBudget:
    return ReplyBudget(
        HeldBytes(total=2 * total, per_owner=per_connection, unread=total), floor=floor
    )


def test_a_connection_over_its_own_bound_is_refused() -> None:
    budget = budget_of(total=100 * KIB, per_connection=40 * KIB, floor=10 * KIB)
    assert budget.refusal("a", 40 * KIB) is None
    assert budget.refusal("a", 40 * KIB + 1) is not None
    assert budget.held == 40 * KIB


def test_the_total_refuses_only_connections_holding_more_than_the_floor() -> None:
    budget = budget_of(total=100 * KIB, per_connection=40 * KIB, floor=10 * KIB)
    assert budget.refusal("a", 40 * KIB) is None
    assert budget.refusal("b", 40 * KIB) is None
    assert budget.refusal("c", 30 * KIB) is not None  # 110 KiB in all
    # a client that reads its answers (buffer under the floor) is never refused
    for n in range(100):
        assert budget.refusal(f"reader{n}", 10 * KIB) is None
    assert budget.held == 80 * KIB and budget.peak == 80 * KIB
    # a buffer that drains gives its bytes back
    budget.drained("a")
    assert budget.refusal("c", 30 * KIB) is None
    assert budget.held == 70 * KIB
    # a buffer seen under the floor again is not counted any more
    assert budget.refusal("b", 5 * KIB) is None
    assert budget.held == 30 * KIB
    budget.drained("c")
    budget.drained("unknown")
    assert budget.held == 0


def test_the_buffer_shares_its_connection_bound_with_its_other_charges() -> None:
    budget = budget_of(total=100 * KIB, per_connection=40 * KIB, floor=10 * KIB)
    assert budget.bytes.charge("a", 25 * KIB) is None  # a forwarded answer, not yet written
    assert budget.refusal("a", 20 * KIB) is not None
    assert budget.refusal("a", 15 * KIB) is None
    assert budget.held == 40 * KIB
    budget.gone("a")
    assert budget.held == 0
