"""One ZooKeeper read in flight, shared by every lookup that waits on the same node."""

from __future__ import annotations

import asyncio

from pulsar_lookup_gateway.lookup.errors import LookupFailure


class PendingRead:
    """One ZooKeeper read and the lookups waiting for it.

    Each waiter gets a future of its own, so a waiter that goes away (its connection closed)
    costs nothing to the others, and ending the read wakes N waiters in O(N).
    """

    __slots__ = ("deadline", "outcome", "path", "waiters")

    def __init__(self, path: str) -> None:
        self.path = path
        self.deadline: asyncio.TimerHandle | None = None
        self.waiters: list[asyncio.Future[None]] = []
        self.outcome: tuple[LookupFailure | None] | None = None  # set once the read ended

    async def wait(self) -> None:
        if self.outcome is None:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.waiters.append(waiter)
            await waiter
            return
        if self.outcome[0] is not None:
            raise self.outcome[0]

    def finish(self, error: LookupFailure | None) -> None:
        if self.outcome is not None:
            return
        self.outcome = (error,)
        if self.deadline is not None:
            self.deadline.cancel()
        waiters, self.waiters = self.waiters, []
        for waiter in waiters:
            if waiter.done():  # cancelled: its lookup was dropped
                continue
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(error)
