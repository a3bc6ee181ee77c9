"""The bytes of answers waiting in binary connections' send buffers, charged to the one byte
budget (serving.held_bytes) as the buffers fill and drain.

A client that asks and does not read makes the gateway hold its answers. Lookups are small and
a connection that stops reading is no longer read (flow control), but an answer forwarded from
a broker (a schema, a topic list) can be megabytes, and the requests already in flight answer
anyway. So every write is weighed first: a connection whose buffer would pass its own bound
in the budget, or the budget's total, is closed instead of written to. A client that reads its
answers keeps its buffer near empty and is never touched by the total.

Only buffers above `floor` are counted: they are over asyncio's high-water mark, so their
connections are paused and told when they drain (`drained`), which keeps the sum current."""

from __future__ import annotations

from pulsar_lookup_gateway.serving.held_bytes import HeldBytes

FLOOR = 1024 * 1024


class ReplyBudget:
    """Shared by every binary socket of a gateway; `held`: the process's one byte budget
    (None: one of its own, with the default bounds)."""

    def __init__(self, held: HeldBytes | None = None, floor: int = FLOOR) -> None:
        self.bytes = held if held is not None else HeldBytes()
        self.floor = floor
        self._level: dict[object, int] = {}  # each counted buffer's bytes, as last weighed

    @property
    def held(self) -> int:
        """All bytes the budget holds (buffers and whatever else is charged to it)."""
        return self.bytes.held

    @property
    def peak(self) -> int:
        return self.bytes.peak

    def refusal(self, owner: object, buffered: int) -> str | None:
        """Weigh a write that leaves `owner`'s send buffer at `buffered` bytes: None when it
        may go (and is counted), else why the connection is to be closed instead."""
        counted = buffered if buffered > self.floor else 0
        before = self._level.get(owner, 0)
        if counted > before:
            refused = self.bytes.charge(owner, counted - before)
            if refused is not None:
                return f"its unread answers cannot be held: {refused}"
        elif counted < before:
            self.bytes.release(owner, before - counted)
        if counted:
            self._level[owner] = counted
        else:
            self._level.pop(owner, None)
        return None

    def drained(self, owner: object) -> None:
        """`owner`'s buffer fell below the floor."""
        self.bytes.release(owner, self._level.pop(owner, 0))

    def gone(self, owner: object) -> None:
        """`owner`'s connection is gone: its buffer and every other charge of its are given
        back."""
        self._level.pop(owner, None)
        self.bytes.forget(owner)
