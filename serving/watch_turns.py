"""The ownership watch's share of each event-loop turn: the work its streams ask for (reading
subscribes, taking topics in, first lookups, sending messages) runs in turns of at most
TURN_SECONDS of measured time per loop iteration, the rest waiting for the next iterations,
first come first served.

Why: asyncio runs every callback that is ready in one iteration before it polls the sockets
again. A herd of 1,000 streams that each subscribe 100 topics readies 1,000 tasks at once, and
each doing its own bounded slice still adds up to seconds in one iteration: every other
socket's lookups wait that long. With one budget per iteration shared by all of them, an
iteration does a few milliseconds of the watch's work, then the loop polls (the binary and HTTP
sockets' lookups are answered), and the streams are served in the order they asked.

The budget is time, read off the clock: a task given a turn works while `more()` says its
iteration has time left (a slice of work at least, so everyone makes progress), then asks for
its next turn and goes to the back of the line (fair: a stream that asks for 10,000 topics
waits behind the others after each turn). Weighing work by guessed costs throttled herds for
nothing (a lookup weighed 100 "units" and cost ~25 us) or let them overrun; the clock is right
on any machine. An iteration wakes twice as many waiters as the last one if all of those ran
in its time, else as many as ran and a few more (a waiter woken after the iteration's time was
spent keeps its place for the next). No I/O here.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

#: Seconds of the watch's work in one loop iteration (then the loop polls its sockets).
TURN_SECONDS = 0.003
#: Waiters woken for one iteration at first, and at most (grown while all of them fit).
FIRST_GRANTS = 8
MAX_GRANTS = 1024


class Turns:
    """Work of at most `budget` seconds per loop iteration, first come first served."""

    def __init__(
        self, budget: float = TURN_SECONDS, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.budget = budget
        self._clock = clock
        self._deadline: float | None = None  # the current iteration's end of work (None: none)
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._first: deque[asyncio.Future[None]] = deque()  # (ahead of the others)
        self._bounced: deque[asyncio.Future[None]] = deque()  # woken too late: next, in order
        self._woken = 0  # woken and not run yet
        self._grants = FIRST_GRANTS  # waiters to wake for the next iteration
        self._ran = 0  # turns given in the current iteration
        self._turn: asyncio.Handle | None = None  # the next iteration's start
        self.turns = 0  # iterations the watch worked in (tests and the benchmark read it)

    def more(self) -> bool:
        """For a task in its turn: whether its iteration's time lasts (go on with the next
        piece of work; else ask for another turn). False once that iteration is over (the
        task was away meanwhile: awaiting a read of the metadata, say)."""
        deadline = self._deadline
        return deadline is not None and self._clock() < deadline

    def _open(self) -> bool:
        """Whether a turn may start in this iteration (its time not spent yet)."""
        deadline = self._deadline
        return deadline is None or self._clock() < deadline

    async def take(self, *, first: bool = False) -> None:
        """Wait for a turn: at once while this iteration's time lasts and nobody waits, else
        in a later iteration, after those who asked before. `first`: ahead of those who wait
        (work that gives memory back: writing queued messages out)."""
        if not (self._waiting or self._first or self._bounced or self._woken) and self._open():
            self._start()
            return
        queue = self._first if first else self._waiting
        loop = asyncio.get_running_loop()
        while True:
            future = loop.create_future()
            queue.append(future)
            self._schedule()
            try:
                await future
            except asyncio.CancelledError:
                if future.done() and not future.cancelled():
                    self._woken -= 1  # (woken, then cancelled before it ran)
                raise
            self._woken -= 1
            if self._open():
                self._start()
                return
            queue = self._bounced  # (woken after the time was spent: first in the next)

    def _start(self) -> None:
        """A turn starts (and the iteration's time, at the first)."""
        if self._deadline is None:
            self._deadline = self._clock() + self.budget
            self.turns += 1
            self._schedule()  # (the next iteration starts a new budget)
        self._ran += 1

    def _schedule(self) -> None:
        if self._turn is None:
            self._turn = asyncio.get_running_loop().call_soon(self._next_turn)

    def _next_turn(self) -> None:
        """The next iteration's share: the waiters first in line are woken (their tasks run
        in the next iteration, this again after them: scheduled last). Twice as many as last
        time if all of those ran in time, else as many as did and a few more."""
        self._turn = None
        if self._ran >= self._grants:
            self._grants = min(MAX_GRANTS, 2 * self._grants)
        elif self._ran:
            self._grants = min(MAX_GRANTS, self._ran + FIRST_GRANTS)
        self._deadline = None
        self._ran = 0
        woken = 0
        for queue in (self._bounced, self._first, self._waiting):
            while queue and woken < self._grants:
                future = queue.popleft()
                if future.done():  # (cancelled meanwhile)
                    continue
                future.set_result(None)
                woken += 1
        self._woken += woken
        if woken or self.waiting:
            self._schedule()

    @property
    def waiting(self) -> int:
        return len(self._waiting) + len(self._first) + len(self._bounced)
