"""The first lookups of one subscribe's new topics, counted together: the subscribe waits for
one future, done once the last of them was made (not a future per topic: a herd of 100,000
topics made 100,000 futures and as many callbacks). No I/O."""

from __future__ import annotations

import asyncio


class FirstLookups:
    __slots__ = ("done", "left")

    def __init__(self) -> None:
        self.left = 1  # first lookups not made yet, and the subscribe until it queued them all
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def add(self) -> None:
        self.left += 1

    def made(self) -> None:
        """One of them was made (or is not needed any more), or the subscribe queued all."""
        self.left -= 1
        if self.left <= 0 and not self.done.done():
            self.done.set_result(None)
