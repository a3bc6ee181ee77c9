"""BinaryServer: one ``pulsar://`` or ``pulsar+ssl://`` bind address. It accepts (capping
connections per socket and per client address), keeps the connections alive, stops them
gracefully, and holds what its connections share: the handlers of each command family."""

from __future__ import annotations

import asyncio
import logging
import ssl

from pulsar_lookup_gateway.listeners.auth import Authenticator
from pulsar_lookup_gateway.listeners.binary.broker_requests import (
    PartitionedMetadata,
    Schemas,
    TopicsOfNamespace,
)
from pulsar_lookup_gateway.listeners.binary.connection import Connection
from pulsar_lookup_gateway.listeners.binary.forwarding import BrokerForwarding
from pulsar_lookup_gateway.listeners.binary.handlers import Handlers
from pulsar_lookup_gateway.listeners.binary.handshake import Handshake
from pulsar_lookup_gateway.listeners.binary.lookups import Lookups
from pulsar_lookup_gateway.listeners.binary.reply_budget import ReplyBudget
from pulsar_lookup_gateway.listeners.binary.settings import BinarySettings
from pulsar_lookup_gateway.listeners.endpoints.client_origin import ClientOrigin
from pulsar_lookup_gateway.listeners.endpoints.proxied_accept import ProxiedAcceptor
from pulsar_lookup_gateway.listeners.endpoints.socket_table import (
    BACKLOG,
    BoundSocket,
    SocketSpec,
    bind_listening,
)
from pulsar_lookup_gateway.listeners.routing import Route, Router
from pulsar_lookup_gateway.lookup.selection import ListenerChoice
from pulsar_lookup_gateway.serving.log_throttle import LogThrottle
from pulsar_lookup_gateway.serving.service import LookupService
from pulsar_lookup_gateway.tls.server_names import (
    CERTIFICATE_MISSING,
    client_certificate_missing,
    server_name_of,
)

log = logging.getLogger(__package__)


class BinaryServer(BoundSocket):
    """Serves Pulsar binary lookups on one bind address (``spec``)."""

    def __init__(
        self,
        spec: SocketSpec,
        service: LookupService,
        settings: BinarySettings,
        ssl_context: ssl.SSLContext | None = None,
        authenticator: Authenticator | None = None,
        forwarding: BrokerForwarding | None = None,
        reply_budget: ReplyBudget | None = None,
    ) -> None:
        """`authenticator`: who must authenticate, and how (None: nobody, any listener name);
        `forwarding`: where requests only a broker can answer go (None: they fail);
        `reply_budget`: the bound on unread answers, shared by the gateway's binary sockets
        (None: one of this socket's own)."""
        if not spec.endpoint.scheme.is_binary:
            raise ValueError(f"{spec.origin}: {spec.endpoint.url} is not a pulsar:// address")
        if spec.tls and ssl_context is None:
            raise ValueError(f"{spec.origin}: a pulsar+ssl:// socket needs an SSL context")
        if not spec.tls and ssl_context is not None:
            raise ValueError(f"{spec.origin}: a pulsar:// socket cannot take an SSL context")
        super().__init__(spec)
        self.service = service
        self.settings = settings
        self._ssl_context = ssl_context
        self._server: asyncio.Server | ProxiedAcceptor | None = None
        self._keep_alive_task: asyncio.Task[None] | None = None
        self._connections: set[Connection] = set()
        self._per_address: dict[str, int] = {}  # open connections by client address
        self.proxy_refusals: dict[str, int] = {}  # connections closed for their PROXY header
        self.refused = LogThrottle(log, logging.WARNING)  # a flood must not flood the log
        self.reply_budget = reply_budget or ReplyBudget()
        self._stopping = False
        guard = (authenticator or Authenticator()).for_listener(spec.listener)
        self.router = Router.of_service(service, guard)
        lookups = Lookups(service, self.router)
        self.handlers = Handlers(
            handshake=Handshake(settings, lookups.tables, self.url),
            lookups=lookups,
            partitions=PartitionedMetadata(service, forwarding),
            topics=TopicsOfNamespace(service, forwarding),
            schemas=Schemas(service, forwarding),
        )

    @property
    def socket_choice(self) -> ListenerChoice:
        """What a request naming no listener gets where clients' places choose nothing."""
        return self.router.socket_route.choice

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("the server is already started")
        loop = asyncio.get_running_loop()
        endpoint = self.spec.endpoint
        if self.settings.memoise_lookups:
            # Before the socket accepts: every bundle's answer for the socket's own listener
            # and the common request shapes (a replica that just started answers its first
            # sweep over the bundles as a warm one does).
            lookups = self.handlers.lookups
            started = loop.time()
            done = await lookups.ahead.prime(
                lookups.tables(self.socket_choice)[1], self.socket_choice
            )
            log.info("%s: %d bundle answers of %d namespaces made ahead in %.1fs", self.url,
                     lookups.ahead.made, done, loop.time() - started)  # fmt: skip
        if self.settings.proxy_protocol:
            sock = bind_listening(endpoint.host, endpoint.port, self.settings.reuse_port)
            acceptor = ProxiedAcceptor(
                sock,
                lambda origin: Connection(self, origin),
                trusted=self.settings.trusted_proxies,
                deadline=self.settings.handshake_timeout,
                ssl_context=self._ssl_context,
                on_refused=self._proxy_refused,
            )
            self._bound_port = sock.getsockname()[1]
            acceptor.start(self.url)
            self._server = acceptor
        else:
            self._server = await loop.create_server(
                lambda: Connection(self),
                host=endpoint.host or None,
                port=endpoint.port,
                ssl=self._ssl_context,
                ssl_handshake_timeout=(
                    self.settings.handshake_timeout if self._ssl_context else None
                ),
                backlog=BACKLOG,
                reuse_port=self.settings.reuse_port or None,
            )
            self._bound_port = self._server.sockets[0].getsockname()[1]
        if self.settings.keep_alive_interval > 0:
            self._keep_alive_task = loop.create_task(self._keep_alive())
        log.info(
            "listening on %s listener=%s tls=%s",
            self.url,
            self.spec.listener or "-",
            "yes" if self.spec.tls else "no",
        )

    async def stop(self, timeout: float) -> None:
        """Stop accepting, let the lookups in flight finish (up to ``timeout`` seconds), then
        close every connection."""
        if self._server is None or self._stopping:
            return
        self._stopping = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout, 0.0)
        self._server.close()
        if self._keep_alive_task is not None:
            self._keep_alive_task.cancel()
        connections = list(self._connections)
        for conn in connections:
            conn.stop_reading()
        in_flight = [task for conn in connections for task in conn.runner.tasks]
        if in_flight:
            await asyncio.wait(in_flight, timeout=max(deadline - loop.time(), 0.0))
        for conn in connections:
            conn.close()
        # close() flushes what is buffered; a peer that does not read gets aborted.
        lost = [conn.lost for conn in connections]
        if lost:
            _, pending = await asyncio.wait(lost, timeout=max(deadline - loop.time(), 0.1))
            for conn in connections:
                if not conn.lost.done():
                    conn.abort()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        if self._keep_alive_task is not None:
            await asyncio.wait([self._keep_alive_task], timeout=1.0)
        await self._server.wait_closed()
        self.handlers.lookups.close()
        log.info("stopped listening on %s listener=%s", self.url, self.spec.listener or "-")

    # -- called by connections ---------------------------------------------------------

    def route_for(self, origin: ClientOrigin, transport: asyncio.BaseTransport) -> Route:
        """Where requests naming no listener go on a connection from `origin` (over TLS, by
        the server name the client dialled: its handshake is done by now)."""
        return self.router.route(origin, server_name_of(transport.get_extra_info("ssl_object")))

    def admit(self, conn: Connection, transport: asyncio.BaseTransport) -> bool:
        """Count a new connection in, or refuse it (False: the caller aborts it)."""
        refused = self._refusal(conn.address, transport.get_extra_info("ssl_object"))
        if refused is not None:
            reason, why = refused
            self.count_refused(reason)
            self.refused.event("refusing connection from %s on %s: %s", conn.peer, self.url, why)
            return False
        self._connections.add(conn)
        self._per_address[conn.address] = self._per_address.get(conn.address, 0) + 1
        return True

    def forget(self, conn: Connection) -> None:
        if conn not in self._connections:
            return  # (refused at accept: never counted)
        self._connections.discard(conn)
        left = self._per_address.get(conn.address, 0) - 1
        if left > 0:
            self._per_address[conn.address] = left
        else:
            self._per_address.pop(conn.address, None)

    def count_refused(self, reason: str) -> None:
        """A connection of this socket refused or closed before CONNECTED, by metric reason."""
        self.service.metrics.refused(self.spec.listener, reason)

    def _proxy_refused(self, reason: str) -> None:
        self.proxy_refusals[reason] = self.proxy_refusals.get(reason, 0) + 1
        self.count_refused(reason)

    def _refusal(self, address: str, ssl_object: object) -> tuple[str, str] | None:
        """Why a new connection from `address` is refused, as (metric reason, log text); None:
        admitted."""
        if self._stopping:
            return "stopping", "stopping"
        if client_certificate_missing(ssl_object):
            return "client-certificate", CERTIFICATE_MISSING
        limit = self.settings.max_connections
        if limit and len(self._connections) >= limit:
            return "max-connections", f"brokerMaxConnections={limit} reached"
        per_ip = self.settings.max_connections_per_ip
        if per_ip and self._per_address.get(address, 0) >= per_ip:
            return "max-connections-per-ip", f"maxConnectionsPerIp={per_ip} reached for {address}"
        return None

    async def _keep_alive(self) -> None:
        interval = self.settings.keep_alive_interval
        while True:
            await asyncio.sleep(interval)
            for conn in list(self._connections):
                conn.keep_alive_tick()
