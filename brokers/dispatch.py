"""Where one forwarded request goes: to the next broker in turn (a broker whose connection
cannot be opened is skipped for the next, up to CONNECT_ATTEMPTS; one with too many requests
waiting too), or to one named broker. The answer is the broker's response command, with the
broker's request id (the caller puts the client's back)."""

from __future__ import annotations

from collections.abc import Callable

from pulsar_lookup_gateway.brokers.addresses import BrokerAddresses
from pulsar_lookup_gateway.brokers.failures import too_many_waiting, unavailable
from pulsar_lookup_gateway.brokers.pool import ConnectionPool
from pulsar_lookup_gateway.brokers.settings import CONNECT_ATTEMPTS
from pulsar_lookup_gateway.listeners.auth import Principal
from pulsar_lookup_gateway.listeners.protocol.codec import BaseCommand
from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure
from pulsar_lookup_gateway.serving.held_bytes import Hold

__all__ = ["Dispatcher"]


class Dispatcher:
    def __init__(self, addresses: BrokerAddresses, pool: ConnectionPool) -> None:
        self._addresses = addresses
        self._pool = pool

    async def to_any(
        self,
        build: Callable[[int], bytes],
        principal: Principal,
        *,
        needs_no_creation_flag: bool = False,
        hold: Hold | None = None,
    ) -> BaseCommand:
        """`build(request_id)` sent to the next broker in turn that can take it, for the
        principal sent (brokers.identity). `needs_no_creation_flag`: only to a broker that
        announced supports_get_partitioned_metadata_without_auto_creation. `hold`: what the
        answer is charged to (serving.held_bytes)."""
        pool = self._pool
        attempts = 0
        last: LookupFailure | None = None
        for url in await self._addresses.in_turn():
            if pool.full(url):
                last = too_many_waiting()
                continue
            attempts += 1
            try:
                connection = await pool.connection(url, principal)
            except LookupFailure as failure:
                if failure.kind is not FailureKind.BROKER_UNAVAILABLE:
                    raise  # the pool is full: no broker's fault
                last = failure
                if attempts >= CONNECT_ATTEMPTS:
                    break
                continue
            if needs_no_creation_flag and not connection.supports_no_creation:
                raise unavailable(
                    "the broker cannot answer partitioned metadata without creating the topic "
                    "(supports_get_partitioned_metadata_without_auto_creation); retry later"
                )
            return await pool.send(url, connection, build, hold)
        if last is not None:
            raise last
        raise LookupFailure(FailureKind.NO_BROKER, "No broker was available")

    async def to(
        self, url: str, build: Callable[[int], bytes], principal: Principal
    ) -> BaseCommand:
        """`build(request_id)` sent to the broker at `url` (no other broker is tried), within
        the link's bounds: the in-flight limit, the request timeout, a failed broker's
        cooldown."""
        if self._pool.full(url):
            raise too_many_waiting()
        connection = await self._pool.connection(url, principal)
        return await self._pool.send(url, connection, build)
