"""Accepting on a socket whose clients arrive through a load balancer speaking the PROXY
protocol (`listener.<name>.proxyProtocol=true`).

asyncio's own accept loop hands a connection to its protocol (and starts TLS) at once, so the
header, which precedes a TLS handshake, cannot be taken off first. Here each accepted socket is
read by hand up to exactly the end of the header (peeking, then taking no byte beyond it), and
only then given to asyncio with the listener's TLS context. Only peers in trustedProxyCidrs may
connect; a missing, malformed or late header closes the connection. Bounded: headers being read
at once, each within the handshake deadline counted from accept (the TLS handshake spends
from the same budget).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Callable

from pulsar_lookup_gateway.listeners.endpoints.client_origin import AddressSource, ClientOrigin
from pulsar_lookup_gateway.listeners.endpoints.proxy_protocol import (
    ProxyHeader,
    ProxyProtocolError,
    limit,
    parse,
)
from pulsar_lookup_gateway.lookup.networks import NetworkTable, parse_address
from pulsar_lookup_gateway.serving.log_throttle import LogThrottle

log = logging.getLogger(__name__)

MAX_PENDING = 1024  # connections whose header or TLS handshake is under way, per socket
ACCEPT_PAUSE = 0.1  # after a failed accept (out of file descriptors): let some close first

#: Why a connection was closed before reaching the server (a metric label).
UNTRUSTED_PEER = "untrusted-proxy"
BAD_HEADER = "proxy-header"
LATE_HEADER = "proxy-header-timeout"
TOO_MANY_PENDING = "pending-proxy-headers"

_SOURCES = {1: AddressSource.PROXY_V1, 2: AddressSource.PROXY_V2}


class ProxiedAcceptor:
    """Serves a bound, listening `sock`: the stand-in for the asyncio.Server it replaces
    (`sockets`, `close`, `wait_closed`)."""

    def __init__(
        self,
        sock: socket.socket,
        make_protocol: Callable[[ClientOrigin], asyncio.BaseProtocol],
        *,
        trusted: NetworkTable[bool],
        deadline: float,
        ssl_context: ssl.SSLContext | None = None,
        on_refused: Callable[[str], None] | None = None,
        max_pending: int = MAX_PENDING,
    ) -> None:
        sock.setblocking(False)
        self.sockets = [sock]
        self._sock = sock
        self._make_protocol = make_protocol
        self._trusted = trusted
        self._deadline = deadline
        self._ssl_context = ssl_context
        self._on_refused = on_refused
        self._max_pending = max_pending
        self._pending: set[asyncio.Task[None]] = set()
        self._task: asyncio.Task[None] | None = None
        self.refused = LogThrottle(log, logging.WARNING)
        self.name = "?"

    def start(self, name: str) -> None:
        """Start accepting; `name` (the socket's URL) is for log lines."""
        self.name = name
        self._task = asyncio.get_running_loop().create_task(self._accept_loop())

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for task in self._pending:
            task.cancel()
        self._sock.close()

    async def wait_closed(self) -> None:
        waiting = [t for t in (self._task, *self._pending) if t is not None]
        if waiting:
            await asyncio.wait(waiting, timeout=1.0)

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, address = await loop.sock_accept(self._sock)
            except OSError as exc:  # EMFILE and the like: the process's limits, not the peer's
                self.refused.event("accepting on %s failed: %s", self.name, exc)
                await asyncio.sleep(ACCEPT_PAUSE)
                continue
            peer = ClientOrigin.of_peer(address, self.name)
            if not self._trusted.holds(parse_address(peer.address)):
                self._refuse(conn, peer, UNTRUSTED_PEER, "not in trustedProxyCidrs")
            elif len(self._pending) >= self._max_pending:
                self._refuse(conn, peer, TOO_MANY_PENDING, f"{self._max_pending} headers pending")
            else:
                task = loop.create_task(self._take(conn, peer, loop.time()))
                self._pending.add(task)
                task.add_done_callback(self._pending.discard)

    async def _take(self, conn: socket.socket, peer: ClientOrigin, accepted: float) -> None:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout_at(accepted + self._deadline):
                header = await read_proxy_header(loop, conn)
        except TimeoutError:
            self._refuse(conn, peer, LATE_HEADER, f"no PROXY header within {self._deadline}s")
            return
        except (ProxyProtocolError, OSError) as exc:
            self._refuse(conn, peer, BAD_HEADER, str(exc))
            return
        except BaseException:
            conn.close()
            raise
        origin = peer
        if header.address is not None:
            origin = peer.via(_SOURCES[header.version], header.address, header.port)
        remaining = max(accepted + self._deadline - loop.time(), 0.001)
        try:
            await loop.connect_accepted_socket(
                lambda: self._make_protocol(origin),
                conn,
                ssl=self._ssl_context,
                ssl_handshake_timeout=remaining if self._ssl_context is not None else None,
            )
        except (OSError, ssl.SSLError, TimeoutError) as exc:  # asyncio closed the socket
            log.debug("TLS handshake with %s failed: %s", origin, exc)

    def _refuse(self, conn: socket.socket, peer: ClientOrigin, reason: str, why: str) -> None:
        self.refused.event("closing a connection from %s: %s", peer, why)
        if self._on_refused is not None:
            self._on_refused(reason)
        with contextlib.suppress(OSError):
            conn.close()


async def read_proxy_header(loop: asyncio.AbstractEventLoop, conn: socket.socket) -> ProxyHeader:
    """Read the PROXY header off `conn` (non-blocking) and not one byte more: each round peeks
    at what arrived, and takes only what belongs to the header. Linear in the header's size."""
    data = bytearray()
    while True:
        await _readable(loop, conn)
        try:
            peeked = conn.recv(limit(data) - len(data), socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            continue
        if not peeked:
            raise ProxyProtocolError("the connection closed before its PROXY header ended")
        before = len(data)
        data += peeked
        result = parse(data)
        if result is None:
            _consume(conn, len(peeked))
            continue
        header, used = result
        _consume(conn, used - before)
        return header


def _consume(conn: socket.socket, count: int) -> None:
    """Take `count` bytes that a peek has shown are there."""
    while count > 0:
        taken = len(conn.recv(count))
        if taken == 0:
            raise ProxyProtocolError("the connection closed within its PROXY header")
        count -= taken


async def _readable(loop: asyncio.AbstractEventLoop, conn: socket.socket) -> None:
    ready: asyncio.Future[None] = loop.create_future()
    fd = conn.fileno()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)
