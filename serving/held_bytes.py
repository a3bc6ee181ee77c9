"""The one byte budget: every byte the gateway holds on a client's behalf, bounded per client
and in all.

A stranger who asks and does not read makes the gateway hold data for it: a forwarded answer
(a schema, a topic list) read from a broker and not yet written out, a binary connection's
unread send buffer, a watch stream's names, state and queued messages. Each of these is charged
here, to its *owner* (the client connection it is held for; any hashable object), from the
moment it is held until it is written out or dropped. Two limits hold at every charge:

- ``per_owner``: one client never holds more than this (a 5 MB schema fits; a hundred do not);
- ``total``: all clients together never hold more than this: the figure the process never
  exceeds whatever strangers send (docs: operating/reliability.md).

A charge that would pass either is refused (nothing is charged): the caller drops what it was
about to hold and refuses or closes the client with the reason returned. Before refusing for the
total, the budget makes room by closing *stalled* owners (clients that hold bytes and do not
read them; they say so with `stalled`), longest stalled first: a client that reads is not
refused because strangers that never read filled the budget.

API (used from the event loop's thread only)::

    budget = HeldBytes(total=64 * MIB, per_owner=16 * MIB)
    reason = budget.charge(owner, n)   # None: charged; else why not (a sentence, no client text)
    budget.release(owner, n)           # n bytes given back (never below zero)
    budget.forget(owner)               # the owner is gone: all its bytes given back
    budget.stalled(owner, close)       # owner holds bytes it does not read; close(reason)
    budget.reading(owner)              # ... it reads again (no longer closed to make room)
    budget.held, budget.peak, budget.held_by(owner), budget.refusals  # {kind: count}
    budget.expose(metrics)             # gauges and the refusal counter on /metrics

    hold = budget.hold(owner)          # one thing held for owner (a forwarded answer):
    reason = hold.reserve(n)           #   n bytes charged ahead (an estimate), taken by add
    reason = hold.add(n)               #   n bytes of it read (None, or why not: nothing added)
    reason = hold.keep(n)              #   it is now n bytes (a body made from what it was)
    hold.release()                     #   written out or dropped: all given back (idempotent)

Refusal kinds (the metric's ``reason`` label): ``client`` (per_owner), ``total``, and
``stalled`` (an owner closed to make room). Under ``run --workers N`` each worker has its own
budget: the process total is per worker (N x total in all).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pulsar_lookup_gateway.serving.metrics import LookupMetrics

__all__ = ["PER_OWNER", "TOTAL", "HeldBytes", "Hold"]

MIB = 1024 * 1024
#: One client's bound: a 5 MB schema and its encoded answer fit, with room to spare.
PER_OWNER = 16 * MIB
#: All clients' bound (one process): the most the gateway holds for them, whatever they send.
TOTAL = 64 * MIB

CLIENT, ALL, STALLED = "client", "total", "stalled"


class HeldBytes:
    """Bytes held for clients, by owner. A refused charge charges nothing."""

    def __init__(self, total: int = TOTAL, per_owner: int = PER_OWNER) -> None:
        if per_owner > total:
            raise ValueError(f"per_owner ({per_owner}) is more than total ({total})")
        self.total = total
        self.per_owner = per_owner
        self.held = 0  # bytes charged now, all owners
        self.peak = 0  # the most ever charged at once
        self.refusals: dict[str, int] = {CLIENT: 0, ALL: 0, STALLED: 0}
        self._by_owner: dict[object, int] = {}
        # Owners that hold bytes they do not read, oldest first (dicts keep insertion order).
        self._stalled: dict[object, Callable[[str], None]] = {}
        self._counter: Callable[[str], None] | None = None

    def held_by(self, owner: object) -> int:
        return self._by_owner.get(owner, 0)

    def charge(self, owner: object, size: int) -> str | None:
        """Charge `size` bytes to `owner`: None when they may be held, else why not."""
        if size <= 0:
            return None
        mine = self._by_owner.get(owner, 0) + size
        if mine > self.per_owner:
            return self._refuse(CLIENT, f"it would hold more than {self.per_owner} bytes")
        if self.held + size > self.total:
            self._make_room(owner, size)
            if self.held + size > self.total:
                return self._refuse(
                    ALL, f"the gateway holds {self.total} bytes for its clients already"
                )
        self._by_owner[owner] = mine
        self.held += size
        if self.held > self.peak:
            self.peak = self.held
        return None

    def release(self, owner: object, size: int) -> None:
        """Give back `size` of `owner`'s bytes (what was never charged is not given back)."""
        mine = self._by_owner.get(owner)
        if mine is None or size <= 0:
            return
        size = min(size, mine)
        self.held -= size
        if mine == size:
            del self._by_owner[owner]
        else:
            self._by_owner[owner] = mine - size

    def forget(self, owner: object) -> None:
        """`owner` is gone: every byte it held is given back."""
        self.held -= self._by_owner.pop(owner, 0)
        self._stalled.pop(owner, None)

    def stalled(self, owner: object, close: Callable[[str], None]) -> None:
        """`owner` does not read what it is sent: while it holds bytes it may be closed
        (`close(reason)`, which must drop what it holds) to make room for a client that reads.
        It stays marked until `reading` or `forget`."""
        if owner not in self._stalled:
            self._stalled[owner] = close

    def reading(self, owner: object) -> None:
        """`owner` reads again."""
        self._stalled.pop(owner, None)

    def hold(self, owner: object) -> Hold:
        """A new, empty hold of `owner`'s, for one thing held on its behalf."""
        return Hold(self, owner)

    def expose(self, metrics: LookupMetrics) -> None:
        """Show the budget on /metrics: bytes held (and the total), refusals by kind."""
        from prometheus_client import Counter, Gauge

        from pulsar_lookup_gateway.serving.metrics import PREFIX

        registry = metrics.registry
        held = Gauge(
            PREFIX + "held_bytes",
            "Bytes held on clients' behalf (forwarded answers, unread send buffers, watch "
            "streams), charged to the one byte budget",
            registry=registry,
            multiprocess_mode="livesum",
        )
        limit = Gauge(
            PREFIX + "held_bytes_limit",
            "The one byte budget's total: the most the process holds for its clients",
            registry=registry,
            multiprocess_mode="livesum",
        )
        refused = Counter(
            PREFIX + "held_bytes_refusals",
            "Clients refused or closed by the byte budget, by reason (client: its own bound; "
            "total: all clients' bound; stalled: closed to make room, it did not read)",
            ("reason",),
            registry=registry,
        )
        metrics.live(held, lambda: float(self.held))
        metrics.live(limit, lambda: float(self.total))
        series = {kind: refused.labels(kind) for kind in self.refusals}
        for kind, count in self.refusals.items():
            series[kind].inc(count)
        self._counter = lambda kind: series[kind].inc()

    # -- inside --------------------------------------------------------------------------------

    def _refuse(self, kind: str, reason: str) -> str:
        self.refusals[kind] += 1
        if self._counter is not None:
            self._counter(kind)
        return reason

    def _make_room(self, asking: object, size: int) -> None:
        """Close stalled owners that hold bytes, longest stalled first, until `size` more fit."""
        for owner, close in list(self._stalled.items()):
            if self.held + size <= self.total:
                return
            if owner is asking or not self._by_owner.get(owner):
                continue
            del self._stalled[owner]
            self.forget(owner)
            self._refuse(STALLED, "")
            close("it did not read what the gateway held for it; a client that reads needed room")


class Hold:
    """The bytes of one thing held for one owner (a forwarded answer from the moment its
    bytes are read until it is written out), charged to the budget and given back at once.
    `read`: the bytes added so far (what the thing weighed)."""

    __slots__ = ("budget", "owner", "read", "reserved", "size")

    def __init__(self, budget: HeldBytes, owner: object) -> None:
        self.budget = budget
        self.owner = owner
        self.size = 0  # charged now
        self.reserved = 0  # of which charged ahead of bytes not read yet
        self.read = 0

    def reserve(self, size: int) -> str | None:
        """Charge `size` bytes ahead of reading them (what such an answer weighed last
        time): refused, nothing is asked of anyone. `add` takes from the reservation first."""
        refused = self.budget.charge(self.owner, size)
        if refused is None and size > 0:
            self.size += size
            self.reserved += size
        return refused

    def add(self, size: int) -> str | None:
        """`size` more bytes read: None when charged, else why not (the hold keeps what it
        had)."""
        covered = min(self.reserved, max(size, 0))
        refused = self.budget.charge(self.owner, size - covered)
        if refused is None:
            self.reserved -= covered
            self.size += max(size - covered, 0)
            self.read += max(size, 0)
        return refused

    def keep(self, size: int) -> str | None:
        """The thing is now `size` bytes (say, a body made from an answer that is dropped):
        the difference charged or given back; refused, the hold keeps what it had."""
        self.reserved = 0
        if size > self.size:
            refused = self.budget.charge(self.owner, size - self.size)
            if refused is None:
                self.size = size
            return refused
        self.budget.release(self.owner, self.size - size)
        self.size = size
        return None

    def release(self) -> None:
        self.budget.release(self.owner, self.size)
        self.size = self.reserved = 0
