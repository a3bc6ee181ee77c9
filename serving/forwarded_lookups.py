"""Lookups the metadata cannot answer with Connect, asked of a broker (as Pulsar's proxy does).

A bundle the metadata shows no owner for (the modular load manager's unowned bundle; under the
extensible load manager every bundle whose ownership is in its system topic) would be answered
with a Redirect, and a client re-sends its LOOKUP to the broker named there with only its own
listener name, usually none: it lands on the owner's internal address. Instead the gateway asks
a broker itself (a `LookupForwarder`, wired by gateway/ over the broker link), naming the
listener it chose, and answers the client with the owner's URLs for that listener.

Coalesced and bounded: one forwarded lookup per (bundle, listener) in flight, the others wait
for its answer (at most `MAX_IN_FLIGHT` bundles at once). The answer is kept in the process's
answer memo (a table of its own, filed under the bundle's place), so the memo's one rule
forgets it when the gateway's view of that bundle changes (the ownership node appears or
changes) and its one byte budget bounds it; and for at most `watched_ttl` seconds, or
`unwatched_ttl` where nothing the gateway watches would tell (the system-topic table view).

A client that asks again for a topic it was given a kept answer for (the owner refused it:
the broker has let the bundle go since) is not given the same answer again: the bundle is
asked anew, so a client is never sent round in circles to a broker that let go.

Each client lookup that comes here ends in one outcome, counted (`outcomes`, and on /metrics as
`pulsar_lookup_gateway_forwarded_lookups_total{outcome}` once `expose` was called): ``asked``
(its bundle asked of a broker for it), ``joined`` (it waited for another client's ask),
``kept`` (answered from a kept answer), ``failed`` (the ask failed: ServiceNotReady and the
like) and ``refused`` (too many bundles in flight).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Protocol

from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure
from pulsar_lookup_gateway.lookup.resolve import LookupAnswer
from pulsar_lookup_gateway.lookup.selection import ListenerChoice
from pulsar_lookup_gateway.serving.memo import AnswerMemo, ObservedView, place_of

if TYPE_CHECKING:
    from pulsar_lookup_gateway.serving.metrics import LookupMetrics

__all__ = [
    "MAX_IN_FLIGHT",
    "UNWATCHED_TTL",
    "WATCHED_TTL",
    "ForwardedLookups",
    "LookupForwarder",
]

#: Seconds an answer is kept where no watched write would tell that it changed (the
#: extensible load manager's system-topic table view): a bundle moved by the load manager is
#: found again within this time, and a storm of clients of one bundle costs one hop per this.
UNWATCHED_TTL = 5.0
#: Seconds at most an answer is kept where the ownership node's write forgets it (the modular
#: load manager): a bound in case the node never shows up in the gateway's view.
WATCHED_TTL = 30.0
#: Bundles forwarded at once; beyond, TooManyRequests at once (every waiter holds a client).
MAX_IN_FLIGHT = 10_000
#: Clients remembered per kept answer (who was handed it, to tell one that comes back).
MAX_HANDED = 64
#: What a kept answer holds (the answer, its keys, the set of clients handed it).
KEPT_BYTES = 1_200

_Key = tuple[str, str, ListenerChoice]  # (namespace, bundle name, listener choice)

ASKED, JOINED, KEPT, FAILED, REFUSED = "asked", "joined", "kept", "failed", "refused"


class LookupForwarder(Protocol):
    """Asks a broker where a topic is, for the chosen listener (gateway/ wires the broker
    link's): a Connect answer with the owner's URLs, or a LookupFailure."""

    async def owner(
        self,
        answer: LookupAnswer,
        properties: Sequence[tuple[str, str]],
        principal: Hashable,
    ) -> LookupAnswer: ...


@dataclasses.dataclass(slots=True)
class _Kept:
    answer: LookupAnswer
    expires: float
    handed: set[tuple[str, str]]  # (client address, topic) given this answer


class ForwardedLookups:
    def __init__(
        self,
        memo: AnswerMemo,
        view: Callable[[], ObservedView],
        forwarder: LookupForwarder,
        *,
        unwatched_ttl: float = UNWATCHED_TTL,
        watched_ttl: float = WATCHED_TTL,
        max_in_flight: int = MAX_IN_FLIGHT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`view`: the metadata source's current view (the memo follows it)."""
        self._memo = memo
        self._view = view
        self._forwarder = forwarder
        self._unwatched_ttl = unwatched_ttl
        self._watched_ttl = watched_ttl
        self._max_in_flight = max_in_flight
        self._clock = clock
        self._kept: dict[_Key, _Kept] = memo.table(("service", "forwarded"))
        self._flying: dict[_Key, asyncio.Future[LookupAnswer]] = {}
        self.forwarded = 0  # lookups sent to a broker (each answering many clients)
        self.outcomes = dict.fromkeys((ASKED, JOINED, KEPT, FAILED, REFUSED), 0)
        self._counter: Callable[[str], None] | None = None

    @property
    def in_flight(self) -> int:
        return len(self._flying)

    def expose(self, metrics: LookupMetrics) -> None:
        """Count the outcomes on /metrics too (those so far included)."""
        from prometheus_client import Counter

        from pulsar_lookup_gateway.serving.metrics import PREFIX

        counter = Counter(
            PREFIX + "forwarded_lookups",
            "Lookups the metadata could not answer with Connect, asked of a broker by the "
            "gateway, by outcome (asked: a broker was asked for it; joined: it waited for "
            "another client's ask of the same bundle; kept: a kept answer; failed: the ask "
            "failed; refused: too many bundles in flight)",
            ("outcome",),
            registry=metrics.registry,
        )
        series = {outcome: counter.labels(outcome) for outcome in self.outcomes}
        for outcome, count in self.outcomes.items():
            series[outcome].inc(count)
        self._counter = lambda outcome: series[outcome].inc()

    def _count(self, outcome: str) -> None:
        self.outcomes[outcome] += 1
        if self._counter is not None:
            self._counter(outcome)

    async def answer(
        self,
        answer: LookupAnswer,
        *,
        watched: bool,
        properties: Sequence[tuple[str, str]] = (),
        principal: Hashable = None,
        client: object = None,
    ) -> LookupAnswer:
        """The Connect answer for the topic of `answer` (a redirect the metadata gave):
        kept, joined, or asked of a broker. `watched`: whether a write the gateway watches
        (the bundle's ownership node) shows when the bundle gets its owner."""
        topic = answer.topic
        key: _Key = (str(topic.namespace_name), answer.bundle.name, answer.listener)
        who = _address(client)
        self._memo.follow(self._view())
        kept = self._kept.get(key)
        if kept is not None and self._clock() < kept.expires:
            handed = (who, topic.full) if who is not None else None
            if handed is None or handed not in kept.handed:
                if handed is not None and len(kept.handed) < MAX_HANDED:
                    kept.handed.add(handed)
                self._count(KEPT)
                return dataclasses.replace(kept.answer, topic=topic)
            kept.expires = 0.0  # it came back: the owner refused it; ask again
        flying = self._flying.get(key)
        outcome = JOINED
        if flying is None:
            if len(self._flying) >= self._max_in_flight:
                self._count(REFUSED)
                raise LookupFailure(
                    FailureKind.TOO_MANY_REQUESTS,
                    f"{self._max_in_flight} bundles are being looked up at the brokers; retry",
                )
            flying = asyncio.ensure_future(
                self._ask(key, answer, properties, principal, watched, who)
            )
            self._flying[key] = flying
            flying.add_done_callback(lambda done: self._landed(key, done))
            outcome = ASKED
        try:
            owner = await asyncio.shield(flying)
        except LookupFailure:
            self._count(FAILED)
            raise
        self._count(outcome)
        joined = self._kept.get(key)
        if joined is not None and who is not None and len(joined.handed) < MAX_HANDED:
            joined.handed.add((who, topic.full))
        return dataclasses.replace(owner, topic=topic)

    async def _ask(
        self,
        key: _Key,
        answer: LookupAnswer,
        properties: Sequence[tuple[str, str]],
        principal: Hashable,
        watched: bool,
        who: str | None,
    ) -> LookupAnswer:
        self.forwarded += 1
        owner = await self._forwarder.owner(answer, properties, principal)
        owner = dataclasses.replace(owner, forwarded=True)
        ttl = self._watched_ttl if watched else self._unwatched_ttl
        handed = {(who, answer.topic.full)} if who is not None else set()
        kept = _Kept(owner, self._clock() + ttl, handed)
        self._memo.follow(self._view())
        place = place_of(key[0], answer.bundle.lower)
        self._memo.remember(None, self._kept, key, kept, place, KEPT_BYTES)
        return owner

    def _landed(self, key: _Key, task: asyncio.Future[LookupAnswer]) -> None:
        if self._flying.get(key) is task:
            del self._flying[key]
        if not task.cancelled():
            task.exception()  # retrieved here too: every waiter may have gone away


def _address(client: object) -> str | None:
    """The address of the client that asks (a front end's client origin), if it has one."""
    address = getattr(client, "address", None)
    return address if isinstance(address, str) else None
