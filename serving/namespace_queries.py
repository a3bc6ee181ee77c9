"""A namespace's topics as the metadata store knows them: the binary GET_TOPICS_OF_NAMESPACE
list (mode PERSISTENT), the REST topic list's persistent part and the brokers holding the
namespace's bundles, and the permission to list them. Read through the lookup service (its
admission, its fetch-and-retry reads, its authorizer); the front ends forward to a broker
what only a broker knows (non-persistent topics)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from pulsar_lookup_gateway.lookup.authorization import LookupAuthorizer
from pulsar_lookup_gateway.lookup.bundle_owners import bundles_with_owners, holder_of
from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure
from pulsar_lookup_gateway.lookup.resolve import ResolvePolicy
from pulsar_lookup_gateway.lookup.topic_list import (
    ListingWork,
    TopicLister,
    TopicListing,
    parse_namespace,
)
from pulsar_lookup_gateway.lookup.topics import NamespaceName, is_system_service_namespace
from pulsar_lookup_gateway.lookup.view import ClusterView

T = TypeVar("T")


class Reads(Protocol):
    """What the queries take of the lookup service."""

    authorizer: LookupAuthorizer | None
    policy: ResolvePolicy  # (its table_view: whether /service_unit_state tells the owners)

    def admitted(self) -> contextlib.AbstractContextManager[None]: ...

    async def read(self, read: Callable[[ClusterView], T]) -> T: ...


class NamespaceQueries:
    def __init__(self, reads: Reads) -> None:
        self._reads = reads
        self.lister = TopicLister()  # (replaced by the gateway's, with its configured bounds)

    async def topics_of_namespace(
        self,
        namespace: str,
        *,
        pattern: str | None = None,
        client_hash: str | None = None,
        role: str | None = None,
    ) -> TopicListing:
        """The namespace's persistent topics (GET_TOPICS_OF_NAMESPACE, mode PERSISTENT). A
        namespace that does not exist lists no topics, as the broker's binary answer does."""
        name = await self.access(namespace, role=role)
        with self._reads.admitted():
            lister = self.lister
            work = await self._reads.read(
                lambda view: lister.begin(view, name, pattern, client_hash)
            )
            return await made(lister, work)

    async def rest_topics(
        self,
        namespace: str,
        *,
        role: str | None = None,
        system: bool = False,
        persistent: bool = True,
        holders: bool = False,
    ) -> RestTopics:
        """What the REST topic list (Namespaces.getTopics) reads from the metadata store:
        NAMESPACE_NOT_FOUND for a namespace that does not exist; with `persistent`, its
        persistent topics (through the lister's cache: a repeated request costs no rebuild),
        system topics only when `system` (includeSystemTopic), and none at all of a system
        service namespace without it (BrokerService.isSystemTopic); with `holders`, the
        brokers to ask for its non-persistent topics (lookup.bundle_owners)."""
        name = await self.access(namespace, role=role)
        with self._reads.admitted():
            if not await self._reads.read(lambda v: v.policies(name) is not None):
                raise LookupFailure(FailureKind.NAMESPACE_NOT_FOUND, "Namespace does not exist")
            topics: tuple[str, ...] = ()
            if persistent and (system or not is_system_service_namespace(str(name))):
                lister = self.lister
                work = await self._reads.read(lambda v: lister.begin(v, name, system=system))
                topics = (await made(lister, work)).topics
            brokers = await self._holders(name) if holders else frozenset()
        return RestTopics(name, topics, brokers)

    async def _holders(self, name: NamespaceName) -> frozenset[str] | None:
        """The brokers holding `name`'s bundles (None: unknown); each bundle is its own read,
        so a namespace of many bundles may fetch as many ownership nodes."""
        table_view = self._reads.policy.table_view
        bundles = await self._reads.read(lambda view: bundles_with_owners(view, name, table_view))
        if bundles is None:
            return None
        brokers: set[str] = set()
        for bundle in bundles.ranges:
            holder = await self._reads.read(
                functools.partial(holder_of, namespace=name, bundle=bundle)
            )
            if holder is not None:
                brokers.add(holder)
        return frozenset(brokers)

    async def access(self, namespace: str, *, role: str | None = None) -> NamespaceName:
        """The parsed namespace, once `role` (None: no authentication) may list its topics."""
        name = parse_namespace(namespace)
        authorizer = self._reads.authorizer
        if role is not None and authorizer is not None:
            await self._reads.read(lambda view: authorizer.check_namespace(role, name, view))
        return name


async def made(lister: TopicLister, work: ListingWork) -> TopicListing:
    """The listing `work` makes, a step at a time with the loop's other work in between (a
    big namespace's first list, or a pattern over it, never holds the loop longer than a
    step), waiting between steps while all listings have taken their share of the CPU."""
    pause = lister.pause()
    if pause > 0:
        await asyncio.sleep(pause)
    while (done := work.step(lister.pattern_budget)) is None:
        await asyncio.sleep(lister.pause())  # (0: a turn of the loop for every other socket)
    return done


@dataclass(frozen=True, slots=True)
class RestTopics:
    """The metadata store's part of a REST topic list: the namespace, its persistent topics
    (sorted), and the brokers (ids) that hold its bundles, None where the gateway cannot
    tell (every live broker is asked then)."""

    namespace: NamespaceName
    persistent: tuple[str, ...]
    holders: frozenset[str] | None
