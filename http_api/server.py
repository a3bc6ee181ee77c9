"""One HTTP(S) server socket running one application (aiohttp's AppRunner on a socket of ours).

What a stranger can do to a socket is bounded here: connections beyond the cap are closed at
accept, a connection must send its first request head (after the TLS handshake, on https)
within the handshake deadline counted from accept, malformed requests get a generic JSON 400
that echoes none of their bytes, and the Server header names no version.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Mapping
from http import HTTPStatus
from types import MappingProxyType
from typing import Any, cast

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest
from aiohttp.web_response import StreamResponse

from pulsar_lookup_gateway.http_api.errors import json_error
from pulsar_lookup_gateway.listeners.endpoints.addresses import Scheme
from pulsar_lookup_gateway.listeners.endpoints.client_origin import ClientOrigin
from pulsar_lookup_gateway.listeners.endpoints.proxied_accept import ProxiedAcceptor
from pulsar_lookup_gateway.listeners.endpoints.socket_table import (
    BACKLOG,
    BoundSocket,
    SocketSpec,
    bind_listening,
)
from pulsar_lookup_gateway.lookup.networks import NetworkTable
from pulsar_lookup_gateway.serving.log_throttle import LogThrottle
from pulsar_lookup_gateway.serving.metrics import LookupMetrics
from pulsar_lookup_gateway.tls.server_names import (
    CERTIFICATE_MISSING,
    client_certificate_missing,
    server_name_of,
)

log = logging.getLogger(__name__)

DEFAULT_HEAD_TIMEOUT = 10.0  # seconds from accept to a complete first request head
KEEPALIVE_TIMEOUT = 75.0  # seconds an idle keep-alive connection stays open
SERVER_NAME = "pulsar-lookup-gateway"  # the Server header: no version for a stranger to match


class _Handler(RequestHandler):
    """aiohttp's connection handler, with error answers that echo nothing of the request:
    aiohttp's own 400 quotes the offending line (an `Authorization` header, token included)
    and logs a traceback per malformed request, which a client can repeat at will. It also
    carries where its client is (`client_of` reads it in a request)."""

    __slots__ = ("origin", "server_name")

    origin: ClientOrigin
    server_name: str | None

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> StreamResponse:
        if status >= 500:  # a failure of ours: its traceback is what the operator needs
            log.error("request failed with status %d", status, exc_info=exc)
        else:  # the parser's message quotes the request: name the kind of mistake only
            log.debug("malformed request from %s: %s", request.remote, type(exc).__name__)
        if request.writer.output_size > 0:  # as aiohttp: part of an answer went out already
            raise ConnectionError("a response was already started; cannot send an error")
        phrase = HTTPStatus(status).phrase if status in _STATUSES else "Error"
        response = json_error(status, phrase, headers=SERVER_HEADERS)
        response.force_close()
        return response


_STATUSES = {status.value for status in HTTPStatus}
SERVER_HEADERS: Mapping[str, str] = MappingProxyType({"Server": SERVER_NAME})


class _NamedRequest(web.Request):
    """aiohttp's request, whose every response (a WebSocket's 101 too) names the server as it
    is prepared. An `on_response_prepare` signal did it before: two more coroutines a request,
    ~2% of a cached lookup's CPU."""

    async def _prepare_hook(self, response: StreamResponse) -> None:
        response.headers["Server"] = SERVER_NAME
        await super()._prepare_hook(response)  # the application's own signals, if any


def client_of(request: web.BaseRequest) -> tuple[ClientOrigin | None, str | None]:
    """Where the request's connection comes from (its peer, or the client a PROXY header
    named) and the TLS server name it dialled; (None, None) for a handler not made here."""
    handler = request.protocol
    if isinstance(handler, _Handler):
        return handler.origin, handler.server_name
    return None, None


class _Admission:
    """One socket's connection count and cap (0: no cap), and the throttled logs of the
    connections it refused or closed for sending no request head in time."""

    def __init__(
        self,
        url: str,
        limit: int,
        head_timeout: float,
        on_refused: Callable[[str], None] | None = None,
    ) -> None:
        """`on_refused`: told the reason of every connection closed here (a metric label)."""
        self.url = url
        self.on_refused = on_refused
        self.limit = limit
        self.head_timeout = head_timeout
        self.open = 0
        self.refused = LogThrottle(log, logging.WARNING)
        self.timed_out = LogThrottle(log, logging.INFO)

    def admit(self, ssl_object: object) -> bool:
        if client_certificate_missing(ssl_object):
            if self.on_refused is not None:
                self.on_refused("client-certificate")
            self.refused.event("refusing a connection on %s: %s", self.url, CERTIFICATE_MISSING)
            return False
        if self.limit and self.open >= self.limit:
            if self.on_refused is not None:
                self.on_refused("max-connections")
            self.refused.event(
                "refusing a connection on %s: maxHttpServerConnections=%d reached",
                self.url,
                self.limit,
            )
            return False
        self.open += 1
        return True


class _Guarded(asyncio.Protocol):
    """Wraps aiohttp's protocol with what aiohttp lacks: the connection cap, and a deadline
    for each request head. The first head must arrive within `head_timeout` of accept (this
    object is made at accept, before a TLS handshake, which spends from the same budget);
    a later one within `head_timeout` of its first byte (slowloris: a client that sends a
    header line every few seconds would hold a connection for ever). Idle keep-alive
    connections between requests are aiohttp's to close (keepalive_timeout)."""

    def __init__(
        self,
        admission: _Admission,
        make_handler: Callable[[], _Handler],
        origin: ClientOrigin | None = None,
    ) -> None:
        """`origin`: the client a PROXY header named (None: the peer is the client)."""
        self._origin = origin
        self._loop = asyncio.get_running_loop()
        self._accepted = self._loop.time()
        self._admission = admission
        self._make_handler = make_handler
        self._inner: _Handler | None = None  # made only for an admitted connection
        self._deadline: asyncio.TimerHandle | None = None
        self._transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        if not self._admission.admit(transport.get_extra_info("ssl_object")):
            cast(asyncio.Transport, transport).abort()  # at once: nothing to flush
            return
        self._inner = inner = self._make_handler()
        origin = self._origin
        if origin is None:
            origin = ClientOrigin.of_peer(transport.get_extra_info("peername"), self._admission.url)
        inner.origin = origin
        inner.server_name = server_name_of(transport.get_extra_info("ssl_object"))
        inner.connection_made(transport)
        self._deadline = self._loop.call_at(
            self._accepted + self._admission.head_timeout, self._expire, 0
        )

    def data_received(self, data: bytes) -> None:
        inner = self._inner
        if inner is None:
            return
        heads_before = inner._request_count
        inner.data_received(data)
        if inner._upgraded or inner._request_count != heads_before:
            # A head completed (a WebSocket, the ownership watch, keeps deadlines of its own).
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None
        elif self._deadline is None:
            self._deadline = self._loop.call_later(
                self._admission.head_timeout, self._expire, inner._request_count
            )

    def _expire(self, heads: int) -> None:
        self._deadline = None
        inner, transport = self._inner, self._transport
        if inner is not None and inner._request_count == heads and transport is not None:
            if self._admission.on_refused is not None and heads == 0:
                self._admission.on_refused("request-head-timeout")
            self._admission.timed_out.event(
                "closing a connection on %s that sent no complete request head in %.0fs",
                self._admission.url,
                self._admission.head_timeout,
            )
            transport.close()

    def _cancel(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def eof_received(self) -> bool | None:
        if self._inner is not None:
            self._inner.eof_received()
        return None  # close the transport: aiohttp's handler does not half-close

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        if self._inner is not None:
            self._admission.open -= 1
            self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()


class HttpServer(BoundSocket):
    """Serves `app` on the socket `spec` describes; TLS is terminated here when `ssl_context`
    is given (an `https://` socket needs one, an `http://` socket must not have one)."""

    def __init__(
        self,
        spec: SocketSpec,
        app: web.Application,
        ssl_context: ssl.SSLContext | None = None,
        *,
        access_log: logging.Logger | None = None,
        head_timeout: float = DEFAULT_HEAD_TIMEOUT,
        max_connections: int = 0,
        reuse_port: bool = False,
        proxy_protocol: bool = False,
        trusted_proxies: NetworkTable[bool] | None = None,
        metrics: LookupMetrics | None = None,
    ) -> None:
        """`head_timeout`: seconds from accept to a complete first request head (and to the
        end of the TLS handshake); `max_connections`: open connections beyond which a new one
        is closed at once (0: no cap); `proxy_protocol`: every connection starts with a PROXY
        header, accepted from `trusted_proxies` only; `metrics`: where connections closed for
        their PROXY header are counted (None: only in `proxy_refusals`)."""
        scheme = spec.endpoint.scheme
        if scheme not in (Scheme.HTTP, Scheme.HTTPS):
            raise ValueError(f"{spec.origin}: {spec.endpoint.url} is not an http(s) address")
        if scheme is Scheme.HTTPS and ssl_context is None:
            raise ValueError(f"{spec.origin}: an https socket needs an SSL context")
        if scheme is Scheme.HTTP and ssl_context is not None:
            raise ValueError(f"{spec.origin}: an http socket takes no SSL context")
        if head_timeout <= 0 or max_connections < 0:
            raise ValueError("head_timeout must be > 0 and max_connections >= 0")
        super().__init__(spec)
        self.app = app
        self.ssl_context = ssl_context
        self._access_log = access_log
        self.head_timeout = head_timeout
        self.max_connections = max_connections
        self.reuse_port = reuse_port  # SO_REUSEPORT: several worker processes share the port
        self.proxy_protocol = proxy_protocol
        self.trusted_proxies = trusted_proxies or NetworkTable()
        self.proxy_refusals: dict[str, int] = {}  # connections closed for their PROXY header
        self.metrics = metrics
        self._runner: web.AppRunner | None = None
        self._listening: asyncio.Server | ProxiedAcceptor | None = None
        self._admission = _Admission(
            spec.endpoint.url, max_connections, head_timeout, self._count_refused
        )

    @property
    def connection_count(self) -> int:
        return self._admission.open

    @property
    def refused_connections(self) -> int:
        """Connections closed at accept because the socket had max_connections open."""
        return self._admission.refused.total

    @property
    def timed_out_connections(self) -> int:
        """Connections closed for sending no complete request head in time."""
        return self._admission.timed_out.total

    async def start(self) -> None:
        if self._runner is not None:
            raise RuntimeError("the server is already started")
        sock = bind_listening(self.spec.endpoint.host, self.spec.endpoint.port, self.reuse_port)
        self._bound_port = sock.getsockname()[1]
        self._admission.url = self.url  # with the bound port, for its log lines
        loop = asyncio.get_running_loop()
        options: dict[str, Any] = {
            "access_log": self._access_log,
            "keepalive_timeout": KEEPALIVE_TIMEOUT,
        }
        runner = web.AppRunner(self.app, handle_signals=False, **options)
        try:
            await runner.setup()
            manager = runner.server
            assert manager is not None
            admission = self._admission
            make_request = self.app._make_request

            def named_request(
                message: Any, payload: Any, protocol: Any, writer: Any, task: Any
            ) -> web.Request:
                return make_request(message, payload, protocol, writer, task, _NamedRequest)

            def make_handler() -> _Handler:
                # What web.Server() does, with our error answers and requests.
                handler = _Handler(manager, loop=loop, **options)
                handler._request_factory = named_request
                return handler

            def guarded(origin: ClientOrigin | None = None) -> asyncio.Protocol:
                return _Guarded(admission, make_handler, origin)

            listening: asyncio.Server | ProxiedAcceptor
            if self.proxy_protocol:
                listening = ProxiedAcceptor(
                    sock,
                    guarded,
                    trusted=self.trusted_proxies,
                    deadline=self.head_timeout,
                    ssl_context=self.ssl_context,
                    on_refused=self._proxy_refused,
                )
                listening.start(self.url)
            else:
                listening = await loop.create_server(
                    guarded,
                    sock=sock,
                    ssl=self.ssl_context,
                    backlog=BACKLOG,
                    ssl_handshake_timeout=self.head_timeout if self.ssl_context else None,
                )
        except BaseException:
            await runner.cleanup()
            sock.close()
            raise
        self._runner, self._listening = runner, listening
        log.info(
            "listening on %s listener=%s tls=%s",
            self.url,
            self.spec.listener if self.spec.listener is not None else "(none)",
            "yes" if self.ssl_context is not None else "no",
        )

    def _proxy_refused(self, reason: str) -> None:
        self.proxy_refusals[reason] = self.proxy_refusals.get(reason, 0) + 1
        self._count_refused(reason)

    def _count_refused(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.refused(self.spec.listener, reason)

    async def stop(self, timeout: float) -> None:
        """Stop accepting, let requests in flight finish (cancelled after `timeout` seconds),
        close idle keep-alive connections."""
        runner, listening = self._runner, self._listening
        if runner is None or listening is None:
            return
        self._runner, self._listening = None, None
        listening.close()  # no new connections
        server = runner.server
        if server is not None:
            server.pre_shutdown()  # idle connections close now, busy ones after their response
            await runner.shutdown()  # the application's on_shutdown: WebSocket streams close
            await server.shutdown(timeout)
        await runner.cleanup()  # the application's shutdown and cleanup signals
        log.info("stopped %s", self.url)
