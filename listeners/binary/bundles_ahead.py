"""Bundle answers made ahead: once a LOOKUP of one bundle of a namespace was answered in full
(and kept by bundle, serving.memo.BundleAnswers), the answers of the namespace's other bundles
for the same request shape are made in the background, in slices, before their first topics
are asked.

A replica that just became ready holds every namespace's policies and ownership
(metadata_store.zk_preload), but each bundle's first LOOKUP still took the full path (a task,
admission, the service's memo, the frame): a sweep over 100,000 bundles ran at a fraction of
the warm rate. Here a bundle's answer is resolve() of a made-up topic of that bundle (a LOOKUP
answer carries no topic name, and resolve() reads nothing of a topic but its namespace, domain
and bundle: the cold table's own rule), kept exactly as the full path's own answer would be.

Bounded: one job per (table, namespace, domain, request shape, listener) at a time, at most
MAX_JOBS waiting; SLICE bundles per turn of the loop (a few ms); a bundle whose answer cannot be
made from the view (a node not read yet, a failure) is left to its first LOOKUP.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from pulsar_lookup_gateway.lookup.errors import LookupFailure, NodeNotLoaded
from pulsar_lookup_gateway.lookup.model import POLICIES_ROOT
from pulsar_lookup_gateway.lookup.resolve import LookupAnswer, ResponseKind, resolve
from pulsar_lookup_gateway.lookup.selection import ListenerChoice
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.serving.memo import BundleAnswers, place_of
from pulsar_lookup_gateway.serving.service import LookupService

log = logging.getLogger(__package__)

SLICE = 200  # bundles made per turn of the loop (a few us each, ~45 us for an owner's first)
MAX_JOBS = 4096  # namespaces (x shapes) waiting to be made ahead
TRIES_PER_BUNDLE = 32  # made-up names hashed per bundle before the rest is left to lookups
#: The request shapes primed before a socket accepts: a LOOKUP's fields after its request id
#: as the Java, C++ and Go clients send them when they name no listener (authoritative false,
#: true).
COMMON_SHAPES = (b"\x18\x00", b"\x18\x01")
PRIME_SECONDS = 30.0  # at most this long before a socket accepts; the rest on first use
#: Namespaces whose answers depend on more than the bundle (the load manager's own topics).
_SKIPPED = ("pulsar/system",)

#: (table, namespace, domain, request shapes, listener)
_Job = tuple[BundleAnswers, str, str, tuple[bytes, ...], ListenerChoice]
#: What the full path keeps for an answer: (its template, (tally, connect), place)
ValueOf = Callable[[LookupAnswer], tuple[Any, Any, Any]]


class BundlesAhead:
    def __init__(self, service: LookupService, value_of: ValueOf) -> None:
        """`value_of`: the cold-table value of an answer, as the full path makes it."""
        self._service = service
        self._value_of = value_of
        self._jobs: deque[_Job] = deque()
        self._queued: set[_Job] = set()
        self._task: asyncio.Task[None] | None = None
        self.made = 0  # answers made ahead (for tests and operators)

    async def prime(
        self,
        bundles: BundleAnswers,
        choice: ListenerChoice,
        shapes: Sequence[bytes] = COMMON_SHAPES,
        seconds: float = PRIME_SECONDS,
    ) -> int:
        """Make the answers of every bundle of every namespace the view holds (persistent
        topics, `shapes`) for `choice`; at most `seconds`. The number of namespaces done."""
        view = self._service.source.view
        namespaces: list[str] = []
        try:
            for tenant in view.children(POLICIES_ROOT):
                namespaces += (
                    f"{tenant}/{ns}" for ns in view.children(f"{POLICIES_ROOT}/{tenant}")
                )
        except NodeNotLoaded:
            pass  # (a partial view that lists no tenants yet: nothing to prime)
        deadline = time.monotonic() + seconds
        done = 0
        for namespace in namespaces:
            if time.monotonic() > deadline:
                break
            if namespace not in _SKIPPED:
                await self._make(bundles, namespace, "persistent", tuple(shapes), choice)
                done += 1
        return done

    def ask(
        self, bundles: BundleAnswers, topic: TopicName, tail: bytes, choice: ListenerChoice
    ) -> None:
        """The full path just kept `topic`'s answer by bundle: make the other bundles' ahead."""
        namespace = str(topic.namespace_name)
        if namespace in _SKIPPED:
            return
        job = (bundles, namespace, topic.domain.value, (tail,), choice)
        if job in self._queued or len(self._jobs) >= MAX_JOBS:
            return
        self._queued.add(job)
        self._jobs.append(job)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._jobs.clear()
        self._queued.clear()

    async def _run(self) -> None:
        while self._jobs:
            job = self._jobs[0]
            try:
                await self._make(*job)
            except Exception:  # (a bug must not stop the others, nor go unseen)
                log.exception("making bundle answers ahead failed")
            finally:
                self._jobs.popleft()
                self._queued.discard(job)

    async def _make(
        self,
        bundles: BundleAnswers,
        namespace: str,
        domain: str,
        tails: tuple[bytes, ...],
        choice: ListenerChoice,
    ) -> None:
        service = self._service
        base = f"{domain}://{namespace}/bundle-ahead-"
        name_of = TopicName.parse(base).namespace_name
        try:
            ranges = service.source.view.bundles(name_of)
        except (LookupFailure, NodeNotLoaded):
            return
        if ranges is None:
            return
        lowers = ranges.boundaries[:-1]
        # One made-up topic per bundle (names hashed until each bundle is hit).
        names: dict[int, bytes] = {}
        for n in range(len(lowers) * TRIES_PER_BUNDLE):
            name = f"{base}{n}".encode()
            index = bisect_right(lowers, zlib.crc32(name)) - 1
            if index not in names:
                names[index] = name
                if len(names) == len(lowers):
                    break
        todo = sorted(names.items())
        # Bundles of one owner get one answer but for their place: resolve() reads of an owned
        # bundle its namespace (the same for all) and its ownership node, which equal contents
        # share (NodeStore interns them), so while the view is unchanged (its version: no
        # write since) an owner's answer is made once.
        by_owner: dict[int, tuple[Any, Any]] = {}
        seen: tuple[object, int] | None = None
        for start in range(0, len(todo), SLICE):
            if start:
                await asyncio.sleep(0)  # (the loop serves the sockets between slices)
            view = service.source.view
            try:
                policies, current = view.policies(name_of), view.bundles(name_of)
                extensible = view.broker_registry().extensible
            except (LookupFailure, NodeNotLoaded):
                return
            if policies is None or policies.deleted or current is None:
                return  # (gone or deleted since: only system topics are answered there)
            if current.boundaries != ranges.boundaries:
                return  # (split since: its first lookups answer in full)
            service.memo.follow(view)  # (settles what lookups read of the brokers)
            if seen != (view, view.version):
                seen = (view, view.version)
                by_owner.clear()
            for index, name in todo[start : start + SLICE]:
                if all(bundles.entry(name, tail) is not None for tail in tails):
                    continue  # answered meanwhile
                bundle = ranges.ranges[index]
                owner: object = None
                if not extensible:
                    try:
                        owner = view.ownership(name_of, bundle.name)
                    except (LookupFailure, NodeNotLoaded):
                        continue  # (left to its first lookup)
                shared = by_owner.get(id(owner)) if owner is not None else None
                if shared is not None:
                    value = (*shared, place_of(namespace, bundle.lower))
                else:
                    try:
                        answer = resolve(
                            TopicName.parse(name.decode()), choice, view, service.policy
                        )
                    except (LookupFailure, NodeNotLoaded):
                        continue  # (left to its first lookup)
                    urls = answer.urls
                    if answer.needs_broker or (
                        urls.service_url is None and urls.service_url_tls is None
                    ):
                        # (an unowned bundle, which a broker may be asked about; an owner with
                        # no URL for binary clients: their first lookups answer in full)
                        continue
                    value = self._value_of(answer)
                    if owner is not None and answer.response is ResponseKind.CONNECT:
                        by_owner[id(owner)] = (value[0], value[1])
                for tail in tails:
                    bundles.remember(name, tail, ranges.boundaries, bundle.lower, value)
                self.made += 1
