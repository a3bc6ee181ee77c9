"""The ownership watch's share of each event-loop turn: the work its streams ask for (reading
subscribes, taking topics in, first lookups, sending messages) is cut into slices, and the
slices run in one loop iteration weigh TURN_BUDGET units at most, the rest waiting for the next
iterations, first come first served.

Why: asyncio runs every callback that is ready in one iteration before it polls the sockets
again. A herd of 1,000 streams that each subscribe 100 topics readies 1,000 tasks at once, and
each doing its own bounded slice still adds up to seconds in one iteration: every other
socket's lookups wait that long. With one budget per iteration shared by all of them, an
iteration does a few milliseconds of the watch's work, then the loop polls (the binary and HTTP
sockets' lookups are answered), and the streams are served in the order they asked, a slice
each (fair: a stream that asks for 10,000 topics goes back to the end of the line after each).

Units are rough microseconds of this machine's CPU (the constants below); what matters is that
every slice is bounded and weighed before it runs. No I/O here.
"""

from __future__ import annotations

import asyncio
from collections import deque

#: Units the watch may spend in one loop iteration (~2 ms of CPU).
TURN_BUDGET = 2_000
#: What a unit of each kind of work weighs.
LOOKUP = 100  # one lookup and the telling of its state
NAME = 5  # one topic name parsed and taken into the watch
MESSAGE = 10  # one message written to a stream
REQUEST_BYTES = 100  # a request's bytes per unit (its JSON parsed)


class Turns:
    """Bounded work per loop iteration, shared first come first served."""

    def __init__(self, budget: int = TURN_BUDGET) -> None:
        self.budget = budget
        self.spent = 0  # units given in this iteration
        self._waiting: deque[tuple[asyncio.Future[None], int]] = deque()
        self._turn: asyncio.Handle | None = None  # the next iteration's start
        self.turns = 0  # iterations that gave units (tests read it)
        self.largest = 0  # the most units given in one iteration (tests read it)

    async def take(self, units: int, *, first: bool = False) -> None:
        """Wait until `units` of work may run: at once when nothing else ran in this iteration
        and nobody waits, else in a later iteration, after those who asked before (a slice
        over the whole budget runs alone). `first`: ahead of those who wait (work that gives
        memory back: writing queued messages out)."""
        units = max(1, units)
        if self.spent == 0 and not self._waiting:
            self._count(units)
            self._schedule()
            return
        future = asyncio.get_running_loop().create_future()
        if first:
            self._waiting.appendleft((future, units))
        else:
            self._waiting.append((future, units))
        self._schedule()
        await future  # (cancelled: skipped when its turn comes)

    def _count(self, units: int) -> None:
        if self.spent == 0:
            self.turns += 1
        self.spent += units
        self.largest = max(self.largest, self.spent)

    def _schedule(self) -> None:
        if self._turn is None:
            self._turn = asyncio.get_running_loop().call_soon(self._next_turn)

    def _next_turn(self) -> None:
        """The next iteration's share: the waiters first in line, up to the budget. Their
        tasks run in the next iteration, and this runs again after them (scheduled last)."""
        self._turn = None
        self.spent = 0
        waiting = self._waiting
        while waiting:
            future, units = waiting[0]
            if future.done():  # (cancelled meanwhile)
                waiting.popleft()
                continue
            if self.spent and self.spent + units > self.budget:
                break
            waiting.popleft()
            future.set_result(None)
            self._count(units)
        if self.spent or waiting:
            self._schedule()

    @property
    def waiting(self) -> int:
        return len(self._waiting)
