"""The gateway process: one metadata source, one lookup service, one server per socket."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import logging
import resource
import signal
import ssl
from typing import Any, Protocol

from pulsar_lookup_gateway.brokers.binary_forwarder import BinaryForwarder
from pulsar_lookup_gateway.brokers.link import BrokerLink
from pulsar_lookup_gateway.brokers.lookup_forwarder import BrokerLookupForwarder
from pulsar_lookup_gateway.gateway import factories
from pulsar_lookup_gateway.gateway.logs import ACCESS_LOGGER
from pulsar_lookup_gateway.gateway.socket_names import CannotListen
from pulsar_lookup_gateway.gateway.version import gateway_version
from pulsar_lookup_gateway.http_api.app import build_app
from pulsar_lookup_gateway.http_api.server import HttpServer
from pulsar_lookup_gateway.listeners.auth import Authenticator
from pulsar_lookup_gateway.listeners.binary import BinaryServer
from pulsar_lookup_gateway.listeners.binary.reply_budget import ReplyBudget
from pulsar_lookup_gateway.listeners.config.model import GatewayConfig
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.lookup.authorization import LookupAuthorizer
from pulsar_lookup_gateway.lookup.source import MetadataSource
from pulsar_lookup_gateway.lookup.topic_list import TopicLister
from pulsar_lookup_gateway.metadata_store.open import open_source
from pulsar_lookup_gateway.serving.forwarded_lookups import ForwardedLookups
from pulsar_lookup_gateway.serving.log_throttle import LogThrottle
from pulsar_lookup_gateway.serving.service import LookupService
from pulsar_lookup_gateway.tls.metrics import TlsMetrics
from pulsar_lookup_gateway.tls.reload import GatewayTls

log = logging.getLogger(__name__)

METRICS_REFRESH_INTERVAL = 1.0  # seconds; multiprocess mode only (see LookupMetrics)


class Server(Protocol):
    @property
    def port(self) -> int: ...

    async def start(self) -> None: ...

    async def stop(self, timeout: float) -> None: ...


class Gateway:
    def __init__(
        self,
        config: GatewayConfig,
        source: MetadataSource | None = None,
        *,
        reuse_port: bool = False,
        access_log: bool = False,
    ) -> None:
        self.config = config
        self.reuse_port = reuse_port  # SO_REUSEPORT on every socket (`run --workers N`)
        # aiohttp's access log (`--access-log`): one line per HTTP request, on `aiohttp.access`.
        self.access_log = logging.getLogger(ACCESS_LOGGER) if access_log else None
        self.source = source or open_source(
            config.metadata_store_url, configuration=config.configuration_metadata_store_url
        )
        self.service = LookupService(
            self.source,
            policy=config.resolve_policy(),
            internal_listener=config.internal_listener_name,
            max_concurrent=config.max_concurrent_lookup_request,
            declared_listeners=[listener.name for listener in config.advertised_listeners],
            authorizer=(
                LookupAuthorizer(frozenset(config.super_user_roles))
                if config.authorization_enabled
                else None
            ),
            routes=config.client_routes(),
        )
        self.service.metrics.set_build_info(gateway_version())
        # Topic lists and partitioned metadata as the broker answers them; what only a broker
        # can answer goes over the broker link (Pulsar's proxy keys).
        self.service.configure_topics(
            config.auto_creation(),
            TopicLister(
                pattern_max_length=config.subscription_pattern_max_length,
                evaluate_patterns=config.enable_broker_side_subscription_pattern_evaluation,
            ),
        )
        # The one byte budget: what is held for clients (forwarded answers, unread send
        # buffers, watch streams), bounded per client, per pool and in all (heldBytes* keys).
        self.held_bytes = factories.held_bytes(config)
        self.held_bytes.expose(self.service.metrics)
        self.broker_link = BrokerLink(
            self.service, factories.link_settings(config), held=self.held_bytes
        )
        # A lookup the metadata can only answer with a redirect within the cluster is asked of
        # a broker, for the listener the gateway chose (serving.forwarded_lookups).
        self.service.forwarded = ForwardedLookups(
            self.service.memo,
            lambda: self.service.source.view,
            BrokerLookupForwarder(self.broker_link),
        )
        self.service.forwarded.expose(self.service.metrics)
        self.reply_budget = ReplyBudget(self.held_bytes)
        self._metrics_refresh: asyncio.Task[None] | None = None
        self.servers: list[tuple[SocketSpec, Server]] = []
        # Authentication: providers and keys are loaded by start().
        self.authenticator: Authenticator | None = None
        # TLS: one context per listener with TLS sockets, re-checked while serving.
        self.tls_metrics = TlsMetrics(self.service.metrics.registry)
        self.tls = GatewayTls({}, 0)
        self.listener_table: list[dict[str, Any]] = []  # filled in once ports are known
        self.accepting = False  # every socket accepts (what /ready waits for)

    async def start(self) -> None:
        specs = self.config.sockets()
        # All TLS material first: a TLS problem stops the start before anything listens.
        self.tls = await asyncio.to_thread(
            GatewayTls.load, self.config.tls_settings(), self.tls_metrics
        )
        if self.service.routes.uses_sni:
            self.tls.route_server_names(self.service.routes.by_server_name)
        # Token keys too (AuthConfigError names the key that does not load).
        if self.authenticator is None:
            self.authenticator = await asyncio.to_thread(
                factories.authenticator, self.config, registry=self.service.metrics.registry
            )
        if self.config.cluster_name is None:
            log.warning(
                "clusterName is not set: geo-replication checks are skipped (a namespace "
                "another cluster serves is looked up here)"
            )
        else:
            cluster = self.config.cluster_name
            log.info("clusterName=%s: namespaces it does not serve go to a peer or fail", cluster)
        await self.source.start()
        try:
            for spec in specs:
                context = self.tls.context_for(spec.listener) if spec.tls else None
                server = self._server_for(spec, context)
                try:
                    await server.start()
                except OSError as exc:  # its entry named, not only the address
                    raise CannotListen(spec, exc) from exc
                self.servers.append((spec, server))
        except BaseException:
            await self.stop()
            raise
        self.tls.start()
        self.listener_table[:] = self._table()
        self.accepting = True
        if self.service.metrics.multiprocess and self._metrics_refresh is None:
            self._metrics_refresh = asyncio.create_task(self._refresh_metrics())

    async def _refresh_metrics(self) -> None:
        """Multiprocess mode (`run --workers N`): copy the gauges that mirror our state into
        the shared files once a second (a scrape reads the files of every worker)."""
        while True:
            self.service.metrics.refresh()
            await asyncio.sleep(METRICS_REFRESH_INTERVAL)

    def _server_for(self, spec: SocketSpec, context: ssl.SSLContext | None) -> Server:
        if spec.endpoint.scheme.is_binary:
            settings = factories.binary_settings(self.config, spec.listener)
            if self.reuse_port:
                settings = dataclasses.replace(settings, reuse_port=True)
            return BinaryServer(
                spec,
                self.service,
                settings,
                ssl_context=context,
                authenticator=self.authenticator,
                forwarding=BinaryForwarder(self.broker_link),
                reply_budget=self.reply_budget,
            )
        http_settings = factories.http_settings(
            self.config, spec.listener, self.authenticator, lambda: self.listener_table
        )
        http_settings = dataclasses.replace(http_settings, accepting=lambda: self.accepting)
        app = build_app(self.service, http_settings, broker_link=self.broker_link)
        return HttpServer(
            spec,
            app,
            ssl_context=context,
            head_timeout=self.config.connection_handshake_timeout_seconds,
            max_connections=self.config.max_http_server_connections,
            reuse_port=self.reuse_port,
            proxy_protocol=self.config.settings_for(spec.listener).proxy_protocol,
            trusted_proxies=self.config.trusted_proxies(),
            access_log=self.access_log,
            metrics=self.service.metrics,
        )

    def port_of(self, listener: str | None, scheme: str) -> int:
        for spec, server in self.servers:
            if spec.listener == listener and spec.endpoint.scheme.value == scheme:
                return server.port
        raise KeyError(f"no {scheme} socket for listener {listener}")

    def _table(self) -> list[dict[str, Any]]:
        rows = []
        for spec, server in self.servers:
            listener = self.config.listener(spec.listener) if spec.listener else None
            rows.append(
                {
                    "address": f"{spec.endpoint.host}:{server.port}",
                    "scheme": spec.endpoint.scheme.value,
                    "listener": spec.listener,
                    "tls": spec.tls,
                    "origin": spec.origin,
                    "advertised": [e.url for e in listener.endpoints] if listener else [],
                    "proxyThroughServiceUrl": self.config.settings_for(
                        spec.listener
                    ).proxy_through_service_url,
                    "authenticationRequired": self.config.authentication_required(spec.listener),
                    "allowedListenerNames": self.config.settings_for(
                        spec.listener
                    ).allowed_listener_names,
                }
            )
        return rows

    async def stop(self) -> None:
        """Stop accepting everywhere at once, let in-flight lookups finish, then close."""
        self.accepting = False
        timeout = self.config.shutdown_timeout_seconds
        if self._metrics_refresh is not None:
            self._metrics_refresh.cancel()
            self._metrics_refresh = None
        await self.tls.stop()
        servers, self.servers = self.servers, []
        results = await asyncio.gather(
            *(server.stop(timeout) for _spec, server in servers), return_exceptions=True
        )
        for (spec, _server), result in zip(servers, results, strict=True):
            if isinstance(result, BaseException):
                log.error("stopping %s failed: %r", spec.endpoint.url, result)
        await self.broker_link.close()
        await self.source.close()


async def serve(gateway: Gateway, stop: asyncio.Event | None = None) -> None:
    """Run until SIGTERM/SIGINT (or `stop` is set), then stop gracefully."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    open_files = raise_open_files_limit()
    accept_errors = AcceptErrors(loop.get_exception_handler(), open_files=open_files)
    loop.set_exception_handler(accept_errors)
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await gateway.start()
        log.info("gateway started; metadata %s", gateway.config.metadata_store_url)
        try:
            await stop.wait()
        finally:
            log.info("stopping: no new connections; finishing lookups in flight")
            await gateway.stop()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)
        # The handler stays: retries of failed accepts scheduled before the sockets closed
        # still fire while the loop winds down (see AcceptErrors).
        if accept_errors.failures:
            log.info("%d accepts failed for want of resources", accept_errors.failures)


def raise_open_files_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (every connection costs a descriptor, and
    distributions start processes with a soft limit of 1024); the limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:  # an unlimited hard limit cannot be the soft one
            log.warning("cannot raise the open files limit from %d to %d: %s", soft, hard, exc)
    shown = "unlimited" if soft == resource.RLIM_INFINITY else str(soft)
    log.info("open files limit (RLIMIT_NOFILE): %s", shown)
    return soft


# What asyncio's accept loop reports when descriptors or buffers run out; it retries a second
# later by itself, but reports every failed accept (with a traceback) up to `backlog` times per
# try, on every listening socket: megabytes of log a second while an attack lasts. Each of
# those failures also schedules a retry (`_start_serving`) that no server close cancels: on a
# socket closed meanwhile it raises "Invalid file descriptor", once per failure.
_ACCEPT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_ACCEPT_RETRY = "_start_serving"


class AcceptErrors:
    """An event-loop exception handler: accept failures for want of resources are logged once
    per interval with a count and no traceback, retries of them on a socket closed since are
    dropped; anything else goes to `previous` (or the loop's default handler)."""

    def __init__(
        self,
        previous: Any = None,
        throttle: LogThrottle | None = None,
        open_files: int | None = None,
    ) -> None:
        """`open_files`: the RLIMIT_NOFILE in force, named in the log line (read now if None)."""
        self.previous = previous
        self.throttle = throttle or LogThrottle(log, logging.ERROR)
        # Read once: failures come thousands a second in a storm, the limit does not change.
        self.open_files = (
            open_files if open_files is not None else resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        )

    @property
    def failures(self) -> int:
        return self.throttle.total

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if (
            isinstance(exc, OSError)
            and exc.errno in _ACCEPT_ERRNOS
            and "accept" in str(context.get("message", ""))
        ):
            self.throttle.event(
                "cannot accept connections: %s (open files limit %s)",
                exc.strerror,
                self.open_files,
            )
        elif isinstance(exc, ValueError | OSError) and _is_accept_retry(context.get("handle")):
            log.debug("dropped a retry of accept on a closed socket: %s", exc)
        elif self.previous is not None:
            self.previous(loop, context)
        else:
            loop.default_exception_handler(context)


def _is_accept_retry(handle: object) -> bool:
    callback = getattr(handle, "_callback", None)  # asyncio.Handle keeps it private
    return getattr(callback, "__name__", "") == _ACCEPT_RETRY
