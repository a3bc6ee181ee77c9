"""The REST topic list's fan-out: the non-persistent topics of a namespace, asked of each
broker that holds its bundles (lookup.bundle_owners), as NamespacesBase.
internalGetNonPersistentTopics asks each bundle's owner.

Each broker is asked once, at most ``fan_out`` at a time per list and ``fan_out_total`` over
all lists (the rest wait, within the list's deadline), the whole list within one
``request_timeout``; counted against maxConcurrentLookupRequest. A broker in its failure
cooldown fails the list at once (no connect is tried), and a broker that had not answered by
the deadline is put in it; a broker's refusal or failure fails the whole list. A fan-out never
closes another request's connection (ConnectionPool.spare): at most ``fan_out_total``
connections of its own besides the pool's ``max_connections``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Sequence

from pulsar_lookup_gateway.brokers.addresses import BrokerAddresses
from pulsar_lookup_gateway.brokers.answers import BrokerRefusal, TopicList, topics_of
from pulsar_lookup_gateway.brokers.failures import cooling_down, too_many_waiting, unavailable
from pulsar_lookup_gateway.brokers.pool import ConnectionPool
from pulsar_lookup_gateway.listeners.auth import Principal
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import BaseCommand
from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import CommandGetTopicsOfNamespace
from pulsar_lookup_gateway.lookup.errors import LookupFailure
from pulsar_lookup_gateway.serving.held_bytes import Hold
from pulsar_lookup_gateway.serving.service import LookupService

__all__ = ["TopicFanOut"]


class _Refused(Exception):
    """A broker refused a fan-out's request: the other requests are cancelled."""


class TopicFanOut:
    def __init__(
        self, service: LookupService, addresses: BrokerAddresses, pool: ConnectionPool
    ) -> None:
        self._service = service
        self._addresses = addresses
        self._pool = pool
        self._slots = asyncio.Semaphore(max(1, pool.settings.fan_out_total))

    async def non_persistent_topics(
        self,
        namespace: str,
        holders: Collection[str] | None,
        principal: Principal,
        hold: Hold | None = None,
    ) -> TopicList | BrokerRefusal:
        """The topics the brokers `holders` (ids; None: every live broker) have loaded,
        joined and sorted, asked for the principal sent (brokers.identity), each broker's
        answer charged to `hold`. No holder: no topic, and no broker is asked."""
        addresses = self._addresses
        urls = addresses.holder_urls(await addresses.registry(), holders)
        if not urls:
            return TopicList(())
        if any(self._pool.cooldown.active(url) for url in urls):  # (before any other is asked)
            raise cooling_down()

        def build(request_id: int) -> bytes:
            return codec.get_topics_of_namespace(
                namespace, request_id, CommandGetTopicsOfNamespace.NON_PERSISTENT
            )

        with self._service.admitted():
            listed = await self._each(urls, build, principal, hold)
        if isinstance(listed, BrokerRefusal):
            return listed
        return TopicList(tuple(sorted({topic for one in listed for topic in one.topics})))

    async def _each(
        self,
        urls: Sequence[str],
        build: Callable[[int], bytes],
        principal: Principal,
        hold: Hold | None,
    ) -> list[TopicList] | BrokerRefusal:
        """Each broker of `urls` asked `build` once, within one deadline."""
        waiting = iter(urls)
        lists: list[TopicList] = []
        refusals: list[BrokerRefusal] = []
        asking: set[str] = set()

        async def ask_in_turn() -> None:
            for url in waiting:  # (one iterator shared by the workers: each URL asked once)
                async with self._slots:
                    asking.add(url)
                    listed = topics_of(await self._ask(url, build, principal, hold))
                    asking.discard(url)
                if isinstance(listed, BrokerRefusal):
                    refusals.append(listed)
                    raise _Refused  # the others are cancelled: the list is refused
                lists.append(listed)

        settings = self._pool.settings
        timeout = settings.request_timeout
        try:
            async with asyncio.timeout(timeout), asyncio.TaskGroup() as group:
                for _ in range(min(max(1, settings.fan_out), len(urls))):
                    group.create_task(ask_in_turn())
        except TimeoutError:
            failure = unavailable(f"the brokers did not answer within {timeout:g}s; retry")
            for url in asking:
                self._pool.cooldown.failed(
                    url, unavailable(failure.message, f"{url}: no answer in time")
                )
            raise failure from None
        except BaseExceptionGroup as errors:
            if refusals:
                return refusals[0]
            failures = [e for e in errors.exceptions if isinstance(e, LookupFailure)]
            if failures:
                raise failures[0] from None
            raise
        return lists

    async def _ask(
        self, url: str, build: Callable[[int], bytes], principal: Principal, hold: Hold | None
    ) -> BaseCommand:
        """One fan-out request to `url`: refused at once while it is in its failure cooldown
        (or has too many requests waiting)."""
        pool = self._pool
        if pool.cooldown.active(url):
            raise cooling_down()
        if pool.full(url):
            raise too_many_waiting()
        async with pool.spare(url, principal) as connection:
            return await pool.send(url, connection, build, hold)
