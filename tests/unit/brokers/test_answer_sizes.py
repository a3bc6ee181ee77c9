"""What forwarded answers weighed (brokers.answer_sizes): remembered, bounded; and while a
request's size is unknown, one caller asks and the others with the same key wait for it."""

from __future__ import annotations

import asyncio

import pytest

from pulsar_lookup_gateway.brokers.answer_sizes import MAX_KEY, AnswerSizes
from pulsar_lookup_gateway.listeners.binary.requests import RequestRunner
from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure

SCHEMA = "schema persistent://public/default/big None"
WAIT = 30.0  # a deadline no test reaches (they end as soon as what they wait for happens)


def test_the_last_size_is_remembered_and_the_least_recent_goes_first() -> None:
    sizes = AnswerSizes(max_keys=2)
    assert sizes.get("schema a") == 0
    sizes.put("schema a", 10)
    sizes.put("schema b", 20)
    sizes.put("schema a", 5)
    assert sizes.get("schema a") == 5
    sizes.put("schema c", 30)  # b was the least recently used
    assert (sizes.get("schema b"), sizes.get("schema c"), len(sizes)) == (0, 30, 2)


def test_a_long_key_is_remembered_by_its_digest() -> None:
    sizes = AnswerSizes()
    long_key = "schema " + "x" * MAX_KEY
    sizes.put(long_key, 10)
    assert sizes.get(long_key) == 10
    assert sizes.get(long_key + "y") == 0
    assert len(sizes) == 1


async def _settle() -> None:
    """Let every task that can run, run (no wall-clock wait)."""
    for _ in range(10):
        await asyncio.sleep(0)


async def _asks(sizes: AnswerSizes, key: str, seen: list[int], leave: asyncio.Event) -> None:
    """Take a turn at `key`, note what was yielded, and hold the turn until `leave`."""
    async with sizes.turn(key, WAIT) as estimate:
        seen.append(estimate)
        await leave.wait()


async def test_while_the_size_is_unknown_one_asks_and_the_same_key_waits_for_its_weight() -> None:
    sizes = AnswerSizes()
    first_seen: list[int] = []
    others_seen: list[int] = []
    first_leaves, others_leave = asyncio.Event(), asyncio.Event()
    others_leave.set()
    first = asyncio.create_task(_asks(sizes, SCHEMA, first_seen, first_leaves))
    await _settle()
    assert first_seen == [0]  # it asks the broker
    others = [
        asyncio.create_task(_asks(sizes, SCHEMA, others_seen, others_leave)) for _ in range(50)
    ]
    await _settle()
    assert others_seen == []  # they wait: the broker is asked once
    assert sizes.waiting(SCHEMA) == 50
    sizes.put(SCHEMA, 5_000_000)  # the first answer weighed
    first_leaves.set()
    await asyncio.gather(first, *others)
    assert others_seen == [5_000_000] * 50  # each charged what it weighed
    assert (sizes.weighing, sizes.waiting(SCHEMA)) == (0, 0)


async def test_a_different_request_does_not_wait_on_a_strangers_unknown_one() -> None:
    sizes = AnswerSizes()
    stranger_leaves = asyncio.Event()
    strangers = [asyncio.create_task(_asks(sizes, SCHEMA, [], stranger_leaves)) for _ in range(10)]
    await _settle()
    honest_seen: list[int] = []
    honest_leaves = asyncio.Event()
    honest_leaves.set()
    await asyncio.wait_for(
        _asks(sizes, "schema persistent://public/default/mine None", honest_seen, honest_leaves),
        WAIT,
    )
    assert honest_seen == [0]
    stranger_leaves.set()
    await asyncio.gather(*strangers)


async def test_when_the_first_learns_nothing_the_next_waiting_one_asks() -> None:
    sizes = AnswerSizes()
    seen: list[int] = []
    leaves = [asyncio.Event() for _ in range(3)]
    tasks = [asyncio.create_task(_asks(sizes, SCHEMA, seen, leave)) for leave in leaves]
    await _settle()
    assert seen == [0]
    leaves[0].set()  # the first failed: no size put
    await _settle()
    assert seen == [0, 0]  # the second asks in its turn; the third still waits
    assert sizes.waiting(SCHEMA) == 1
    sizes.put(SCHEMA, 7)
    leaves[1].set()
    leaves[2].set()
    await asyncio.gather(*tasks)
    assert seen == [0, 0, 7]


async def test_a_wait_past_its_deadline_fails_and_asks_nothing() -> None:
    sizes = AnswerSizes()
    leave = asyncio.Event()
    first = asyncio.create_task(_asks(sizes, SCHEMA, [], leave))
    await _settle()
    with pytest.raises(LookupFailure) as failure:
        async with sizes.turn(SCHEMA, 0.01):
            raise AssertionError("a caller whose wait ended asks nothing")
    assert failure.value.kind is FailureKind.BROKER_UNAVAILABLE
    assert sizes.waiting(SCHEMA) == 0
    leave.set()
    await first


async def test_waiters_on_one_key_are_bounded() -> None:
    sizes = AnswerSizes(max_waiting=2)
    leave = asyncio.Event()
    tasks = [asyncio.create_task(_asks(sizes, SCHEMA, [], leave)) for _ in range(3)]
    await _settle()
    assert sizes.waiting(SCHEMA) == 2
    with pytest.raises(LookupFailure) as failure:
        async with sizes.turn(SCHEMA, WAIT):
            raise AssertionError("refused at once")
    assert failure.value.kind is FailureKind.TOO_MANY_REQUESTS
    sizes.put(SCHEMA, 1)
    leave.set()
    await asyncio.gather(*tasks)


async def test_past_the_keys_being_weighed_a_new_key_asks_unweighed() -> None:
    """The table of keys being weighed is bounded; a stranger who fills it does not make a
    different request wait (it asks as before the table)."""
    sizes = AnswerSizes(max_weighing=2)
    leave = asyncio.Event()
    held = [asyncio.create_task(_asks(sizes, f"schema t{n} None", [], leave)) for n in range(2)]
    await _settle()
    assert sizes.weighing == 2
    seen: list[int] = []
    go = asyncio.Event()
    go.set()
    await asyncio.wait_for(
        asyncio.gather(*(_asks(sizes, "schema other None", seen, go) for _ in range(2))), WAIT
    )
    assert seen == [0, 0]
    assert sizes.weighing == 2
    leave.set()
    await asyncio.gather(*held)


async def test_a_cancelled_first_asker_wakes_the_waiters() -> None:
    sizes = AnswerSizes()
    never = asyncio.Event()
    first = asyncio.create_task(_asks(sizes, SCHEMA, [], never))
    await _settle()
    seen: list[int] = []
    go = asyncio.Event()
    go.set()
    second = asyncio.create_task(_asks(sizes, SCHEMA, seen, go))
    await _settle()
    assert seen == []
    first.cancel()  # (its client went away)
    await asyncio.wait_for(second, WAIT)
    assert seen == [0]
    assert sizes.weighing == 0


async def test_a_binary_request_waits_from_its_first_step_outside_any_task() -> None:
    """A binary request runs to its first suspension outside any task
    (listeners.binary.requests.RequestRunner): waiting for the size must work there too."""
    sizes = AnswerSizes()
    leave = asyncio.Event()
    first = asyncio.create_task(_asks(sizes, SCHEMA, [], leave))
    await _settle()
    answered: list[bytes] = []

    async def request() -> bytes:
        async with sizes.turn(SCHEMA, WAIT) as estimate:
            return estimate.to_bytes(4, "big")

    def on_error(request_id: int, exc: Exception) -> bytes:
        return f"failed: {exc!r}".encode()

    runner = RequestRunner(answered.extend, lambda: None)
    out: list[bytes] = []
    runner.run(request(), 1, on_error, out)
    assert out == []  # it waits (a failure would be answered at once)
    assert sizes.waiting(SCHEMA) == 1
    sizes.put(SCHEMA, 5)
    leave.set()
    await first
    await asyncio.wait_for(asyncio.gather(*runner.tasks), WAIT)
    assert answered == [(5).to_bytes(4, "big")]
