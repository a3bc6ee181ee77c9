"""One HTTP(S) server socket running one application (aiohttp's AppRunner and SockSite)."""

from __future__ import annotations

import logging
import socket
import ssl

from aiohttp import web

from listeners.endpoints import Scheme
from listeners.socket_table import SocketSpec

log = logging.getLogger(__name__)

BACKLOG = 1024


class HttpServer:
    """Serves `app` on the socket `spec` describes; TLS is terminated here when `ssl_context`
    is given (an `https://` socket needs one, an `http://` socket must not have one)."""

    def __init__(
        self,
        spec: SocketSpec,
        app: web.Application,
        ssl_context: ssl.SSLContext | None = None,
        *,
        access_log: logging.Logger | None = None,
    ) -> None:
        scheme = spec.endpoint.scheme
        if scheme not in (Scheme.HTTP, Scheme.HTTPS):
            raise ValueError(f"{spec.origin}: {spec.endpoint.url} is not an http(s) address")
        if scheme is Scheme.HTTPS and ssl_context is None:
            raise ValueError(f"{spec.origin}: an https socket needs an SSL context")
        if scheme is Scheme.HTTP and ssl_context is not None:
            raise ValueError(f"{spec.origin}: an http socket takes no SSL context")
        self.spec = spec
        self.app = app
        self.ssl_context = ssl_context
        self._access_log = access_log
        self._runner: web.AppRunner | None = None
        self._site: web.SockSite | None = None
        self._port: int | None = None

    @property
    def port(self) -> int:
        """The bound port (the kernel's choice when the spec asks for port 0)."""
        if self._port is None:
            raise RuntimeError("the server is not started")
        return self._port

    @property
    def url(self) -> str:
        host = self.spec.endpoint.host
        host = f"[{host}]" if ":" in host else host
        return f"{self.spec.endpoint.scheme.value}://{host}:{self.port}"

    async def start(self) -> None:
        if self._runner is not None:
            raise RuntimeError("the server is already started")
        sock = _bind(self.spec.endpoint.host, self.spec.endpoint.port)
        runner = web.AppRunner(self.app, handle_signals=False, access_log=self._access_log)
        try:
            await runner.setup()
            site = web.SockSite(runner, sock, ssl_context=self.ssl_context)
            await site.start()
        except BaseException:
            await runner.cleanup()
            sock.close()
            raise
        self._runner, self._site = runner, site
        self._port = sock.getsockname()[1]
        log.info(
            "listening on %s listener=%s tls=%s",
            self.url,
            self.spec.listener if self.spec.listener is not None else "(none)",
            "yes" if self.ssl_context is not None else "no",
        )

    async def stop(self, timeout: float) -> None:
        """Stop accepting, let requests in flight finish (cancelled after `timeout` seconds),
        close idle keep-alive connections."""
        runner, site = self._runner, self._site
        if runner is None or site is None:
            return
        self._runner = self._site = None
        await site.stop()
        server = runner.server
        if server is not None:
            server.pre_shutdown()  # idle connections close now, busy ones after their response
            await server.shutdown(timeout)
        await runner.cleanup()  # the application's shutdown and cleanup signals
        log.info("stopped %s", self.url)


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=BACKLOG)
