"""serving.watch_turns: the watch's work runs in turns of at most a budget of (measured) time
per loop iteration, and the tasks that ask are served first come first served. The clock is
the test's own: each piece of work advances it by what it says it cost."""

from __future__ import annotations

import asyncio

from pulsar_lookup_gateway.serving.watch_turns import FIRST_GRANTS, Turns


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Iterations:
    """Counts the loop's iterations (a task that yields once per iteration)."""

    def __init__(self) -> None:
        self.count = 0
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(0)
            self.count += 1

    def stop(self) -> None:
        self._task.cancel()


async def _work(
    turns: Turns, clock: Clock, pieces: int, cost: float, ran: list[int], it: Iterations
) -> None:
    """`pieces` pieces of work costing `cost` seconds each, in turns, as the watch's tasks do."""
    await turns.take()
    for _ in range(pieces):
        if not turns.more():
            await turns.take()
        clock.now += cost
        ran.append(it.count)


def _per_iteration(ran: list[int]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for at in ran:
        counts[at] = counts.get(at, 0) + 1
    return counts


async def test_an_iteration_does_its_budget_of_time_and_the_loop_turns_between() -> None:
    clock = Clock()
    turns = Turns(budget=0.003, clock=clock)
    iterations = Iterations()
    ran: list[int] = []
    # 50 tasks of 20 pieces of 0.5 ms: 500 ms of work, 3 ms an iteration (6 pieces)
    await asyncio.gather(*(_work(turns, clock, 20, 0.0005, ran, iterations) for _ in range(50)))
    iterations.stop()
    per_iteration = _per_iteration(ran)
    assert len(ran) == 1000
    # Every piece starts within the budget: 6 pieces an iteration at most (the one that
    # starts at 2.5 ms ends at 3 ms), at least one.
    assert max(per_iteration.values()) <= 6
    assert len(per_iteration) >= 1000 // 6


async def test_a_piece_longer_than_the_budget_runs_alone() -> None:
    clock = Clock()
    turns = Turns(budget=0.001, clock=clock)
    iterations = Iterations()
    ran: list[int] = []
    await asyncio.gather(*(_work(turns, clock, 3, 0.005, ran, iterations) for _ in range(4)))
    iterations.stop()
    assert len(ran) == 12
    assert set(_per_iteration(ran).values()) == {1}  # (each made progress, one per iteration)


async def test_tasks_take_turns_first_come_first_served() -> None:
    clock = Clock()
    turns = Turns(budget=0.001, clock=clock)
    order: list[str] = []

    async def stream(name: str, slices: int) -> None:
        for _ in range(slices):
            await turns.take()
            clock.now += 0.001  # (a whole turn each)
            order.append(name)

    big = asyncio.create_task(stream("big", 6))
    await asyncio.sleep(0)  # (the big one asks first)
    small = [asyncio.create_task(stream(f"s{n}", 1)) for n in range(3)]
    await asyncio.gather(big, *small)
    # The small streams are not served after all of the big one's slices: each is served
    # within a slice or two of asking, in the order they asked.
    assert order.index("s2") <= 4
    assert [name for name in order if name != "big"] == ["s0", "s1", "s2"]
    assert order.count("big") == 6


async def test_a_waiter_woken_after_the_time_was_spent_keeps_its_place() -> None:
    """More waiters are woken for an iteration than its time allows (how many is guessed from
    the last one): those too late go first in the next iteration, in their order, ahead of
    those who asked after them."""
    clock = Clock()
    turns = Turns(budget=0.001, clock=clock)
    order: list[int] = []
    await turns.take()
    clock.now += 0.002  # (this iteration's time is spent: the others wait)

    async def piece(number: int, cost: float) -> None:
        await turns.take()
        clock.now += cost
        order.append(number)

    # The first woken spends the whole turn: the others are woken too late and wait again.
    tasks = [asyncio.create_task(piece(0, 0.002))]
    tasks += [asyncio.create_task(piece(n, 0.0001)) for n in range(1, FIRST_GRANTS + 4)]
    await asyncio.sleep(0)
    late = [asyncio.create_task(piece(100 + n, 0.0001)) for n in range(3)]
    await asyncio.gather(*tasks, *late)
    assert order == sorted(order)


async def _hog(turns: Turns, clock: Clock) -> None:
    """Spends a whole iteration's time (the tasks that ask after it in that iteration wait)."""
    await turns.take()
    clock.now += 1.0


async def test_a_cancelled_wait_is_skipped() -> None:
    clock = Clock()
    turns = Turns(budget=0.001, clock=clock)
    hog = asyncio.create_task(_hog(turns, clock))
    _first, second, third = (asyncio.create_task(turns.take()) for _ in range(3))
    await asyncio.sleep(0)  # (they ask after the hog: all wait for later turns)
    assert hog.done()
    assert turns.waiting == 3
    second.cancel()
    await asyncio.wait_for(third, 1)
    assert second.cancelled()
    assert turns.waiting == 0


async def test_work_that_gives_memory_back_goes_first() -> None:
    clock = Clock()
    turns = Turns(budget=0.001, clock=clock)
    order: list[str] = []

    async def slice_of(name: str, first: bool) -> None:
        await turns.take(first=first)
        clock.now += 0.001
        order.append(name)

    tasks = [asyncio.create_task(_hog(turns, clock))]
    tasks += [asyncio.create_task(slice_of(f"work{n}", False)) for n in range(3)]
    tasks.append(asyncio.create_task(slice_of("send", True)))
    await asyncio.gather(*tasks)
    assert order[0] == "send"  # (the others asked before it)
    assert order[1:] == ["work0", "work1", "work2"]


async def test_a_task_back_from_elsewhere_asks_for_a_new_turn() -> None:
    """A task that was away (awaiting a read) past its iteration is out of its turn."""
    clock = Clock()
    turns = Turns(budget=0.001, clock=clock)
    await turns.take()
    assert turns.more()
    for _ in range(3):
        await asyncio.sleep(0)  # (later iterations: the turn's time is over)
    assert not turns.more()
