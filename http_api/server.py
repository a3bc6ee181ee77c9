"""One HTTP(S) server socket running one application (aiohttp's AppRunner and SockSite)."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from listeners.endpoints import Scheme
from listeners.socket_table import BoundSocket, SocketSpec

log = logging.getLogger(__name__)

BACKLOG = 1024
DEFAULT_HEAD_TIMEOUT = 10.0  # seconds a client may take to send one request head
KEEPALIVE_TIMEOUT = 75.0  # seconds an idle keep-alive connection stays open


class _HeadDeadline(asyncio.Protocol):
    """Wraps aiohttp's protocol to close a connection whose request head does not arrive
    within `timeout` (slowloris: a client that sends a header line every few seconds holds
    a connection for ever; aiohttp has no such timeout of its own). Idle keep-alive
    connections are aiohttp's to close (keepalive_timeout)."""

    def __init__(self, inner: RequestHandler, timeout: float) -> None:
        self._inner = inner
        self._timeout = timeout
        self._deadline: asyncio.TimerHandle | None = None
        self._transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        heads_before = self._inner._request_count
        self._inner.data_received(data)
        if self._inner._request_count != heads_before:
            self._cancel()  # a head completed
        elif self._deadline is None:
            self._deadline = asyncio.get_running_loop().call_later(
                self._timeout, self._expire, self._inner._request_count
            )

    def _expire(self, heads: int) -> None:
        self._deadline = None
        if self._inner._request_count == heads and self._transport is not None:
            log.info("closing a connection that sent no complete request in %.0fs", self._timeout)
            self._transport.close()

    def _cancel(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def eof_received(self) -> bool | None:
        self._inner.eof_received()
        return None  # close the transport: aiohttp's handler does not half-close

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
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
        reuse_port: bool = False,
    ) -> None:
        scheme = spec.endpoint.scheme
        if scheme not in (Scheme.HTTP, Scheme.HTTPS):
            raise ValueError(f"{spec.origin}: {spec.endpoint.url} is not an http(s) address")
        if scheme is Scheme.HTTPS and ssl_context is None:
            raise ValueError(f"{spec.origin}: an https socket needs an SSL context")
        if scheme is Scheme.HTTP and ssl_context is not None:
            raise ValueError(f"{spec.origin}: an http socket takes no SSL context")
        super().__init__(spec)
        self.app = app
        self.ssl_context = ssl_context
        self._access_log = access_log
        self.head_timeout = head_timeout
        self.reuse_port = reuse_port  # SO_REUSEPORT: several worker processes share the port
        self._runner: web.AppRunner | None = None
        self._listening: asyncio.Server | None = None

    async def start(self) -> None:
        if self._runner is not None:
            raise RuntimeError("the server is already started")
        sock = _bind(self.spec.endpoint.host, self.spec.endpoint.port, self.reuse_port)
        runner = web.AppRunner(
            self.app,
            handle_signals=False,
            access_log=self._access_log,
            keepalive_timeout=KEEPALIVE_TIMEOUT,
        )
        try:
            await runner.setup()
            handlers = runner.server
            assert handlers is not None
            timeout = self.head_timeout

            def guarded() -> Any:
                return _HeadDeadline(handlers(), timeout)

            listening = await asyncio.get_running_loop().create_server(
                guarded, sock=sock, ssl=self.ssl_context, backlog=BACKLOG
            )
        except BaseException:
            await runner.cleanup()
            sock.close()
            raise
        self._runner, self._listening = runner, listening
        self._bound_port = sock.getsockname()[1]
        log.info(
            "listening on %s listener=%s tls=%s",
            self.url,
            self.spec.listener if self.spec.listener is not None else "(none)",
            "yes" if self.ssl_context is not None else "no",
        )

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
            await server.shutdown(timeout)
        await runner.cleanup()  # the application's shutdown and cleanup signals
        log.info("stopped %s", self.url)


def _bind(host: str, port: int, reuse_port: bool) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=BACKLOG, reuse_port=reuse_port)
