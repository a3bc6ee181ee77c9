"""The one byte budget: every byte the gateway holds on a client's behalf, bounded per client,
per pool and in all.

A stranger who asks and does not read makes the gateway hold data for it: a forwarded answer
(a schema, a topic list) read from a broker and not yet written out, a binary connection's
unread send buffer, a watch stream's queued messages. An honest watch stream holds data too,
for as long as it watches: its names and their state. Each is charged here, to its *owner*
(the client connection it is held for; any hashable object), from the moment it is held until
it is written out or dropped, in one of two pools:

- ``unread`` (UNREAD): what a client asked for and has not read (forwarded answers, unread
  send buffers, queued watch messages, a watch request being read): what a stranger can pin
  by asking and not reading;
- ``watch`` (WATCH): what watch streams hold while they watch (names, state).

So strangers who ask and do not read fill their pool, never the names an honest herd watches,
and a herd of watches never leaves a forwarded answer no room. Three limits hold at every
charge:

- ``per_owner``: one client never holds more than this in a pool (a 5 MB schema fits; a
  hundred do not; a watch stream's names fill their own, its queued first answers the
  other);
- each pool's share (``unread``; the watch pool is ``total - unread``);
- so ``total``, the sum of the shares, is the figure the process never exceeds whatever
  strangers send (docs: operating/reliability.md).

A charge that would pass one is refused (nothing is charged): the caller drops what it was
about to hold and refuses or closes the client with the reason returned. Before refusing for a
pool's share, the budget makes room by closing *stalled* owners that hold bytes in that pool
(clients that hold bytes and do not read them; they say so with `stalled`), longest stalled
first: a client that reads is not refused because strangers that never read filled its pool.

API (used from the event loop's thread only)::

    budget = HeldBytes(total=192 * MIB, per_owner=16 * MIB, unread=64 * MIB)
    reason = budget.charge(owner, n)         # None: charged (pool UNREAD); else why not
    reason = budget.charge(owner, n, WATCH)  # ... in the watch pool
    budget.release(owner, n[, pool])        # n bytes given back (never below zero)
    budget.forget(owner)                    # the owner is gone: all its bytes given back
    budget.stalled(owner, close)            # owner holds bytes it does not read; close(reason)
    budget.reading(owner)                   # ... it reads again (no longer closed for room)
    budget.held, budget.peak, budget.held_by(owner), budget.refusals  # {kind: count}
    budget.pools[UNREAD].held, .limit       # one pool's
    budget.expose(metrics)                  # gauges (by pool) and the refusal counter

    hold = budget.hold(owner)          # one thing held for owner (a forwarded answer), UNREAD:
    reason = hold.reserve(n)           #   n bytes charged ahead (an estimate), taken by add
    reason = hold.add(n)               #   n bytes of it read (None, or why not: nothing added)
    reason = hold.keep(n)              #   it is now n bytes (a body made from what it was)
    hold.release()                     #   written out or dropped: all given back (idempotent)

Refusal kinds (the metric's ``reason`` label): ``client`` (per_owner), ``total`` (a pool's
share; the reason's sentence names the pool), and ``stalled`` (an owner closed to make room).
The figures are the configured ones (heldBytesMax, heldBytesMaxUnread, heldBytesMaxPerClient:
gateway.factories.held_bytes); under ``run --workers N`` each worker holds 1/N of the total and
of each share, so the process's total in all is the configured one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pulsar_lookup_gateway.serving.metrics import LookupMetrics

__all__ = ["PER_OWNER", "TOTAL", "UNREAD", "UNREAD_SHARE", "WATCH", "HeldBytes", "Hold"]

MIB = 1024 * 1024
#: One client's bound: a 5 MB schema and its encoded answer fit, with room to spare.
PER_OWNER = 16 * MIB
#: What clients asked for and have not read, all of them together: 60 strangers that ask for a
#: 5 MB schema and never read pin this much, not 424 MiB.
UNREAD_SHARE = 64 * MIB
#: What watch streams hold while they watch (names and state): ~240,000 topics of 40-byte
#: names (each charged its bytes + 512), a 1,000 x 100 subscribe herd with room to spare.
WATCH_SHARE = 128 * MIB
#: All clients' bound (one process): the most the gateway holds for them, whatever they send.
TOTAL = UNREAD_SHARE + WATCH_SHARE

UNREAD, WATCH = "unread", "watch"
CLIENT, ALL, STALLED = "client", "total", "stalled"
#: What each pool holds, for a refusal's sentence.
_HOLDS = {UNREAD: "of unread answers", WATCH: "of watched names"}


class Pool:
    """One share of the budget: its limit, what it holds now, and by whom."""

    __slots__ = ("by_owner", "held", "limit", "name")

    def __init__(self, name: str, limit: int) -> None:
        self.name = name
        self.limit = limit
        self.held = 0
        self.by_owner: dict[object, int] = {}


class HeldBytes:
    """Bytes held for clients, by owner and pool. A refused charge charges nothing."""

    def __init__(
        self, total: int = TOTAL, per_owner: int = PER_OWNER, unread: int = UNREAD_SHARE
    ) -> None:
        if not 0 < unread < total:
            raise ValueError(f"unread ({unread}) is not a part of total ({total})")
        if per_owner > total:
            raise ValueError(f"per_owner ({per_owner}) is more than total ({total})")
        self.total = total
        self.per_owner = per_owner
        self.pools = {UNREAD: Pool(UNREAD, unread), WATCH: Pool(WATCH, total - unread)}
        self._unread, self._watch = self.pools[UNREAD], self.pools[WATCH]
        self.held = 0  # bytes charged now, all owners, both pools
        self.peak = 0  # the most ever charged at once
        self.refusals: dict[str, int] = {CLIENT: 0, ALL: 0, STALLED: 0}
        # Owners that hold bytes they do not read, oldest first (dicts keep insertion order).
        self._stalled: dict[object, Callable[[str], None]] = {}
        self._counter: Callable[[str], None] | None = None

    def held_by(self, owner: object) -> int:
        return self._unread.by_owner.get(owner, 0) + self._watch.by_owner.get(owner, 0)

    def charge(self, owner: object, size: int, pool: str = UNREAD) -> str | None:
        """Charge `size` bytes to `owner` in `pool`: None when they may be held, else why
        not."""
        if size <= 0:
            return None
        share = self.pools[pool]
        mine = share.by_owner.get(owner, 0) + size
        if mine > self.per_owner:
            return self._refuse(
                CLIENT, f"it would hold more than {self.per_owner} bytes {_HOLDS[pool]}"
            )
        if share.held + size > share.limit:
            self._make_room(owner, size, share)
            if share.held + size > share.limit:
                return self._refuse(
                    ALL,
                    f"the gateway holds {share.limit} bytes {_HOLDS[pool]} for its clients already",
                )
        share.by_owner[owner] = mine
        share.held += size
        self.held += size
        if self.held > self.peak:
            self.peak = self.held
        return None

    def release(self, owner: object, size: int, pool: str = UNREAD) -> None:
        """Give back `size` of `owner`'s bytes in `pool` (what was never charged is not given
        back)."""
        share = self.pools[pool]
        mine = share.by_owner.get(owner)
        if mine is None or size <= 0:
            return
        size = min(size, mine)
        share.held -= size
        self.held -= size
        if mine == size:
            del share.by_owner[owner]
        else:
            share.by_owner[owner] = mine - size

    def forget(self, owner: object) -> None:
        """`owner` is gone: every byte it held, in every pool, is given back."""
        for share in (self._unread, self._watch):
            mine = share.by_owner.pop(owner, 0)
            share.held -= mine
            self.held -= mine
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
        """A new, empty hold of `owner`'s, for one thing held on its behalf (pool UNREAD)."""
        return Hold(self, owner)

    def expose(self, metrics: LookupMetrics) -> None:
        """Show the budget on /metrics: bytes held and each pool's limit (label ``pool``),
        refusals by kind."""
        from prometheus_client import Counter, Gauge

        from pulsar_lookup_gateway.serving.metrics import PREFIX

        registry = metrics.registry
        held = Gauge(
            PREFIX + "held_bytes",
            "Bytes held on clients' behalf, charged to the one byte budget, by pool (unread: "
            "forwarded answers, unread send buffers, queued watch messages; watch: watched "
            "names and state)",
            ("pool",),
            registry=registry,
            multiprocess_mode="livesum",
        )
        limit = Gauge(
            PREFIX + "held_bytes_limit",
            "The one byte budget's share of each pool: their sum is the most the process "
            "holds for its clients",
            ("pool",),
            registry=registry,
            multiprocess_mode="livesum",
        )
        refused = Counter(
            PREFIX + "held_bytes_refusals",
            "Clients refused or closed by the byte budget, by reason (client: its own bound; "
            "total: a pool's share; stalled: closed to make room, it did not read)",
            ("reason",),
            registry=registry,
        )
        for name, share in self.pools.items():
            metrics.live(held.labels(name), _reader(share, "held"))
            metrics.live(limit.labels(name), _reader(share, "limit"))
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

    def _make_room(self, asking: object, size: int, share: Pool) -> None:
        """Close stalled owners that hold bytes in `share`, longest stalled first, until `size`
        more fit."""
        for owner, close in list(self._stalled.items()):
            if share.held + size <= share.limit:
                return
            if owner is asking or not share.by_owner.get(owner):
                continue
            del self._stalled[owner]
            self.forget(owner)
            self._refuse(STALLED, "")
            close("it did not read what the gateway held for it; a client that reads needed room")


def _reader(share: Pool, field: str) -> Callable[[], float]:
    return lambda: float(getattr(share, field))


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
