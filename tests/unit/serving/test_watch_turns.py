"""serving.watch_turns: the watch's work is weighed, at most a budget of it runs in one loop
iteration, and the tasks that ask are served first come first served, a slice each."""

from __future__ import annotations

import asyncio

from pulsar_lookup_gateway.serving.watch_turns import Turns


async def test_one_iteration_runs_at_most_the_budget_and_the_loop_turns_between() -> None:
    turns = Turns(budget=100)
    iteration = 0
    ran: list[tuple[int, int]] = []  # (iteration, units) of every slice that ran

    async def count_iterations() -> None:
        nonlocal iteration
        while True:
            await asyncio.sleep(0)
            iteration += 1

    async def herd(units: int, slices: int) -> None:
        for _ in range(slices):
            await turns.take(units)
            ran.append((iteration, units))

    counter = asyncio.create_task(count_iterations())
    await asyncio.gather(*(herd(30, 5) for _ in range(40)))
    counter.cancel()
    per_iteration: dict[int, int] = {}
    for at, units in ran:
        per_iteration[at] = per_iteration.get(at, 0) + units
    assert len(ran) == 200
    assert max(per_iteration.values()) <= 100  # (3 slices of 30 per iteration)
    assert len(per_iteration) >= 200 * 30 // 100
    assert turns.largest <= 100


async def test_tasks_take_turns_first_come_first_served() -> None:
    turns = Turns(budget=10)
    order: list[str] = []

    async def stream(name: str, slices: int) -> None:
        for _ in range(slices):
            await turns.take(10)  # (a whole turn each)
            order.append(name)

    big = asyncio.create_task(stream("big", 6))
    await asyncio.sleep(0)  # (the big one asks first)
    small = [asyncio.create_task(stream(f"s{n}", 1)) for n in range(3)]
    await asyncio.gather(big, *small)
    # The small streams are not served after all of the big one's slices: each is served
    # within a slice or two of asking.
    assert order.index("s2") <= 4
    assert order.count("big") == 6


async def test_a_slice_over_the_budget_runs_alone_and_a_cancelled_wait_is_skipped() -> None:
    turns = Turns(budget=10)
    await turns.take(50)  # (alone: runs)
    _first, second, third = (asyncio.create_task(turns.take(10)) for _ in range(3))
    await asyncio.sleep(0)  # (they ask: the first is served, the others wait for later turns)
    assert turns.waiting == 2
    second.cancel()
    await asyncio.wait_for(third, 1)
    assert second.cancelled()


async def test_work_that_gives_memory_back_goes_first() -> None:
    turns = Turns(budget=10)
    order: list[str] = []

    async def slice_of(name: str, first: bool) -> None:
        await turns.take(10, first=first)
        order.append(name)

    await turns.take(10)  # (this iteration's budget is spent: the others wait)
    tasks = [asyncio.create_task(slice_of(f"work{n}", False)) for n in range(3)]
    await asyncio.sleep(0)
    tasks.append(asyncio.create_task(slice_of("send", True)))
    await asyncio.gather(*tasks)
    assert order.index("send") < order.index("work2")  # (work2 asked before it)
