"""The bytes of answers waiting in connections' send buffers, bounded per connection and in all.

A client that asks and does not read makes the gateway hold its answers. Lookups are small and
a connection that stops reading is no longer read (flow control), but an answer forwarded from
a broker (a schema, a topic list) can be megabytes, and the requests already in flight answer
anyway. So every write is weighed first: a connection whose send buffer would pass
`per_connection` bytes, or one holding more than `floor` bytes while all such connections
together would pass `total`, is closed instead of written to. A client that reads its answers
keeps its buffer near empty and is never touched by the total.

Only buffers above `floor` are counted: they are over asyncio's high-water mark, so their
connections are paused and told when they drain (`drained`), which keeps the sum current."""

from __future__ import annotations

PER_CONNECTION = 16 * 1024 * 1024
TOTAL = 256 * 1024 * 1024
FLOOR = 1024 * 1024


class ReplyBudget:
    """Shared by every binary socket of a gateway."""

    def __init__(
        self, total: int = TOTAL, per_connection: int = PER_CONNECTION, floor: int = FLOOR
    ) -> None:
        self.total = total
        self.per_connection = per_connection
        self.floor = floor
        self._held: dict[object, int] = {}
        self.held = 0  # bytes in the counted buffers
        self.peak = 0  # the most they ever held

    def refusal(self, owner: object, buffered: int) -> str | None:
        """Weigh a write that leaves `owner`'s send buffer at `buffered` bytes: None when it
        may go (and is counted), else why the connection is to be closed instead."""
        if buffered > self.per_connection:
            return f"its unread answers would pass {self.per_connection} bytes"
        before = self._held.get(owner, 0)
        if buffered <= self.floor:
            if before:
                self.drained(owner)
            return None
        held = self.held - before + buffered
        if held > self.total:
            return f"the unread answers of all clients would pass {self.total} bytes"
        self._held[owner] = buffered
        self.held = held
        self.peak = max(self.peak, held)
        return None

    def drained(self, owner: object) -> None:
        """`owner`'s buffer fell below the floor, or its connection is gone."""
        self.held -= self._held.pop(owner, 0)
