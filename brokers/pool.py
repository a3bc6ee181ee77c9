"""ConnectionPool: the link's connections to the brokers, one per broker URL and principal
sent, within the link's bounds (brokers.settings): at most ``max_connections`` pooled (the least
recently used idle one closed to make room; none idle: the request is refused), at most
``max_in_flight_per_broker`` requests waiting on one broker, each within ``request_timeout``.
A broker that cannot be reached, or fails a request, is put in its cooldown."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from urllib.parse import urlsplit

from pulsar_lookup_gateway.brokers.connection import BrokerConnection
from pulsar_lookup_gateway.brokers.cooldown import Cooldown
from pulsar_lookup_gateway.brokers.failures import link_closed, unavailable
from pulsar_lookup_gateway.brokers.identity import token_bytes
from pulsar_lookup_gateway.brokers.settings import LinkSettings
from pulsar_lookup_gateway.listeners.auth import Principal
from pulsar_lookup_gateway.listeners.protocol.codec import BaseCommand
from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure
from pulsar_lookup_gateway.serving.held_bytes import Hold

__all__ = ["ConnectionPool"]

_Key = tuple[str, Principal]  # (broker URL, principal sent)


class ConnectionPool:
    def __init__(self, settings: LinkSettings) -> None:
        self.settings = settings
        self.cooldown = Cooldown(settings.failure_cooldown)
        self.closed = False
        self._ssl = settings.ssl_context()
        self._pool: OrderedDict[_Key, BrokerConnection] = OrderedDict()  # least recent first
        self._opening: dict[_Key, asyncio.Task[BrokerConnection]] = {}
        self._in_flight: dict[str, int] = {}  # requests waiting on each broker
        # Connections a fan-out opened for itself while the pool was full (closed once answered).
        self._own: set[BrokerConnection] = set()

    @property
    def count(self) -> int:
        return len(self._pool)

    def full(self, url: str) -> bool:
        """Whether `url` has as many requests waiting as one broker may."""
        return self._in_flight.get(url, 0) >= self.settings.max_in_flight_per_broker

    async def connection(self, url: str, principal: Principal) -> BrokerConnection:
        """The pooled connection to `url` for `principal`, opened (and pooled) if need be; a
        broker that cannot be reached is put in its cooldown."""
        try:
            return await self._pooled(url, principal)
        except LookupFailure as failure:
            if failure.kind is FailureKind.BROKER_UNAVAILABLE:
                self.cooldown.failed(url, failure)
            raise

    @contextlib.asynccontextmanager
    async def spare(self, url: str, principal: Principal) -> AsyncIterator[BrokerConnection]:
        """A connection to `url` that closes no other request's: the pooled one, one that
        joins the pool while it has room, or else one of its own, closed on leaving."""
        key = (url, principal)
        pooled = self._pool.get(key)
        if pooled is not None and not pooled.usable:
            del self._pool[key]
            pooled = None
        if pooled is not None:
            self._pool.move_to_end(key)
            yield pooled
            return
        if key in self._opening or self._has_room():
            yield await self.connection(url, principal)
            return
        try:
            own = await self._dial(url, principal)
        except LookupFailure as failure:
            if failure.kind is FailureKind.BROKER_UNAVAILABLE:
                self.cooldown.failed(url, failure)
            raise
        self._own.add(own)
        try:
            yield own
        finally:
            self._own.discard(own)
            own.close()

    async def send(
        self,
        url: str,
        connection: BrokerConnection,
        build: Callable[[int], bytes],
        hold: Hold | None = None,
    ) -> BaseCommand:
        """The request `build` on `connection`, counted against `url`'s in-flight limit while
        it runs, its answer charged to `hold` (BrokerConnection.request); a broker that fails
        it is put in its cooldown (an answer its client cannot take is no broker's fault)."""
        self._in_flight[url] = self._in_flight.get(url, 0) + 1
        try:
            return await connection.request(build, self.settings.request_timeout, hold)
        except LookupFailure as failure:
            if failure.kind is FailureKind.BROKER_UNAVAILABLE:
                self.cooldown.failed(url, failure)
            raise
        finally:
            left = self._in_flight[url] - 1
            if left:
                self._in_flight[url] = left
            else:
                del self._in_flight[url]

    def close(self) -> None:
        self.closed = True
        for task in list(self._opening.values()):
            task.cancel()
        for connection in [*self._pool.values(), *self._own]:
            connection.close()
        self._pool.clear()
        self._own.clear()

    # -- opening ---------------------------------------------------------------------------------

    async def _pooled(self, url: str, principal: Principal) -> BrokerConnection:
        key = (url, principal)
        connection = self._pool.get(key)
        if connection is not None and connection.usable:
            self._pool.move_to_end(key)
            return connection
        if connection is not None:
            del self._pool[key]
        opening = self._opening.get(key)
        if opening is None:
            self._make_room()
            opening = asyncio.ensure_future(self._open(url, principal))
            self._opening[key] = opening
            opening.add_done_callback(lambda task: self._opened(key, task))
        return await asyncio.shield(opening)

    def _opened(self, key: _Key, task: asyncio.Task[BrokerConnection]) -> None:
        self._opening.pop(key, None)
        if not task.cancelled():
            task.exception()  # retrieved here too: every waiter may have gone away

    def _has_room(self) -> bool:
        return len(self._pool) + len(self._opening) < self.settings.max_connections

    def _make_room(self) -> None:
        limit = self.settings.max_connections
        if self._has_room():
            return
        for key, connection in self._pool.items():  # least recently used first
            if not connection.busy:
                del self._pool[key]
                connection.close()
                return
        raise LookupFailure(
            FailureKind.TOO_MANY_REQUESTS,
            f"all {limit} connections to the brokers are busy; retry later",
        )

    async def _open(self, url: str, principal: Principal) -> BrokerConnection:
        connection = await self._dial(url, principal)
        self._pool[(url, principal)] = connection
        return connection

    async def _dial(self, url: str, principal: Principal) -> BrokerConnection:
        """A new connection to `url` for `principal`, CONNECTED (pooled by the caller, or not)."""
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
        if host is None or port is None:
            raise unavailable(
                "a broker's registration is unusable; retry later", f"{url}: no host and port"
            )
        settings = self.settings
        token = None
        if settings.token is not None:
            try:
                token = await asyncio.to_thread(token_bytes, settings.token)
            except OSError as exc:
                raise unavailable(
                    "the gateway cannot authenticate to the brokers; retry later",
                    f"cannot read the broker client token: {exc.strerror}",
                ) from None
        connection = BrokerConnection(url, token, settings)
        tls = parts.scheme == "pulsar+ssl"
        try:
            await asyncio.wait_for(
                asyncio.get_running_loop().create_connection(
                    lambda: connection,
                    host,
                    port,
                    ssl=self._ssl if tls else None,
                    server_hostname=host if tls else None,
                ),
                settings.connect_timeout,
            )
            connection.send_connect(principal, settings.forward_credentials)
            await asyncio.wait_for(connection.connected, settings.connect_timeout)
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            connection.close()
            reason = "timed out" if isinstance(exc, TimeoutError) else str(exc) or repr(exc)
            raise unavailable(
                "cannot reach the broker; retry later", f"cannot connect to {url}: {reason}"
            ) from None
        except BaseException:
            connection.close()
            raise
        if self.closed:  # (closed while it was being opened)
            connection.close()
            raise link_closed()
        return connection
