"""`GET /lookup/v2/watch`: the ownership watch, a WebSocket (docs/protocols/ownership-watch.md).

The upgrade request is routed and authenticated as a lookup is (http_api.callers: the listener
from `listenerName`, `X-Pulsar-ListenerName`, then the socket's rules; `Authorization: Bearer`
or the TLS client certificate); each topic is authorized as a lookup of it. The answers come
from serving.ownership_watch, one per (topic, listener, role) for every stream that watches it;
a stream keeps at most one unsent message per topic (http_api.watch_stream).

Client -> server (http_api.watch_requests): `subscribe`, `unsubscribe`, `update_token` (JSON
text frames, at most `watchMaxFrameBytes`). Server -> client: `owner`, `unowned`, `error` (per
topic, or for the stream and then a close: 4001 unauthenticated or token expired, 4008 a
limit, 1008 a malformed request, 1011 a failure of ours), `update_token_response`.

What a stranger can hold is bounded: streams per client address and per role, topics per
stream, the frame size, one batch of lookups in flight per stream (its next request is read
once its topics were looked up), unsent messages per stream (one per topic), and a stream
whose client does not read what it is sent for `watchStalledReaderTimeoutSeconds` is closed
(so is one that answers no ping within half the ping interval). Any frame from the client
restarts aiohttp's ping timer, and a send blocks only once the kernel's send buffer is full,
so the kernel is asked instead: a stream's send buffer is kept small, and a stream whose
unsent bytes the client has not taken a byte of for the timeout is closed (`_SendQueue`).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import socket
import struct
import sys
import weakref
from collections import Counter
from collections.abc import Coroutine
from typing import Any

from aiohttp import WebSocketError, WSCloseCode, WSMsgType, web
from aiohttp.base_protocol import BaseProtocol
from prometheus_client import Counter as MetricCounter
from prometheus_client import Gauge

from pulsar_lookup_gateway.http_api.callers import Callers
from pulsar_lookup_gateway.http_api.errors import failure_response, json_error
from pulsar_lookup_gateway.http_api.settings import WatchSettings
from pulsar_lookup_gateway.http_api.watch_frames import text_frames
from pulsar_lookup_gateway.http_api.watch_requests import (
    LIMIT_EXCEEDED,
    UNAUTHENTICATED,
    WatchRequests,
)
from pulsar_lookup_gateway.http_api.watch_stream import StreamState, message_bytes
from pulsar_lookup_gateway.listeners.auth import Identity
from pulsar_lookup_gateway.listeners.endpoints.client_origin import ClientOrigin
from pulsar_lookup_gateway.listeners.routing import Refusal, Route
from pulsar_lookup_gateway.lookup.errors import LookupFailure
from pulsar_lookup_gateway.serving.held_bytes import UNREAD, HeldBytes
from pulsar_lookup_gateway.serving.metrics import PREFIX
from pulsar_lookup_gateway.serving.ownership_watch import OwnershipWatch
from pulsar_lookup_gateway.serving.service import LookupService

log = logging.getLogger(__name__)

PATH = "/lookup/v2/watch"
CLOSE_TIMEOUT = 2.0  # seconds a closing stream waits for the client's close frame
#: A stream's kernel send buffer (Linux doubles it): what a client that reads nothing leaves
#: queued there, so that what it does not take waits coalesced in the stream instead.
SEND_BUFFER = 64 * 1024
SIOCOUTQ = 0x5411  # Linux: bytes in a TCP socket's send queue, not yet acknowledged
TCPI_BYTES_ACKED = 120  # Linux: offset of struct tcp_info's tcpi_bytes_acked (since 4.1)
#: Streams of clients that proved no role count against watchMaxStreamsPerRole together, under
#: this key (no role a client proves is an empty string).
ANONYMOUS = ""
#: What a request holds while it is read, per byte of its text (the text, the names parsed from
#: it and their parsed forms; measured: ~3x).
REQUEST_HOLDS = 4
SEND_SLICE = 64  # messages a stream writes at a time (then waits for its next turn)


class WatchMetrics:
    def __init__(self, service: LookupService, open_streams: Any) -> None:
        registry = service.metrics.registry
        self.streams = Gauge(
            PREFIX + "watch_streams", "Ownership-watch streams open",
            registry=registry, multiprocess_mode="livesum",
        )  # fmt: skip
        service.metrics.live(self.streams, open_streams)
        self.messages = MetricCounter(
            PREFIX + "watch_messages", "Ownership-watch messages pushed to clients",
            registry=registry,
        )  # fmt: skip
        self.coalesced = MetricCounter(
            PREFIX + "watch_coalesced_updates",
            "Ownership-watch messages replaced by a newer one before a slow client read them",
            registry=registry,
        )  # fmt: skip
        self.closed = MetricCounter(
            PREFIX + "watch_streams_closed", "Ownership-watch streams closed, by reason",
            ("reason",), registry=registry,
        )  # fmt: skip


class Watches:
    """The process's watch: one per lookup service, shared by every HTTP socket (the limits
    per address and role count the streams of all of them)."""

    def __init__(
        self, service: LookupService, settings: WatchSettings, held: HeldBytes | None = None
    ) -> None:
        self.service = service
        self.settings = settings
        #: The process's one byte budget: each stream's names and state are charged to it
        #: (the stream is the owner) in its watch pool, its queued messages and the request
        #: being read in its unread pool; a stream over it is closed.
        self.held = held if held is not None else HeldBytes()
        self.hub = OwnershipWatch(service)
        self.by_address: Counter[str] = Counter()
        self.by_role: Counter[str] = Counter()
        self.open = 0
        self.endpoints = 0  # the sockets' applications that serve it
        self.metrics = WatchMetrics(service, lambda: float(self.open))

    def admit(self, address: str, role: str | None) -> str | None:
        """Count a new stream in; None, or why it may not open (a limit). Anonymous clients
        (no role) are a role of their own; under `run --workers N` this process admits its
        share of each limit (WatchSettings.share)."""
        settings = self.settings
        limit = settings.max_streams_per_address
        if limit and self.by_address[address] >= settings.share(limit):
            return f"too many streams from this address (watchMaxStreamsPerAddress={limit})"
        limit = settings.max_streams_per_role
        who = ANONYMOUS if role is None else role
        if limit and self.by_role[who] >= settings.share(limit):
            return f"too many streams of this role (watchMaxStreamsPerRole={limit})"
        self.by_address[address] += 1
        self.by_role[who] += 1
        self.open += 1
        return None

    def leave(self, address: str, role: str | None) -> None:
        self.open -= 1
        _decrement(self.by_address, address)
        _decrement(self.by_role, ANONYMOUS if role is None else role)


def _decrement(counter: Counter[str], key: str) -> None:
    counter[key] -= 1
    if counter[key] <= 0:
        del counter[key]


_WATCHES: weakref.WeakKeyDictionary[LookupService, Watches] = weakref.WeakKeyDictionary()


def watches_for(
    service: LookupService, settings: WatchSettings | None = None, held: HeldBytes | None = None
) -> Watches:
    """The watch of `service`'s process (made by the first socket's application); `held`: the
    process's one byte budget."""
    watches = _WATCHES.get(service)
    if watches is None:
        watches = _WATCHES[service] = Watches(service, settings or WatchSettings(), held)
    return watches


class WatchEndpoint:
    """The watch route of one socket's application; closes its streams when it stops."""

    def __init__(self, watches: Watches, callers: Callers) -> None:
        self.watches = watches
        self.callers = callers
        self.streams: set[_Stream] = set()
        watches.endpoints += 1

    async def route(self, request: web.Request) -> web.StreamResponse:
        """`GET /lookup/v2/watch`: its upgrade request is routed and authenticated as a
        lookup, once for the stream."""
        callers = self.callers
        unnamed, client = callers.unnamed(request)
        try:
            identity = callers.identity(request, unnamed.guard)
        except LookupFailure as failure:
            callers.log_failure(client, None, None, failure)
            return failure_response(failure)
        route = callers.decide(request, unnamed, client, None, identity)
        if isinstance(route, Refusal):
            return failure_response(route.failure)
        return await self.serve(request, route, route.identity, client)

    async def cleanup(self, app: web.Application | None = None) -> None:
        """The socket's application is done: the last one ends the process's watch."""
        watches = self.watches
        watches.endpoints -= 1
        if watches.endpoints == 0:
            if _WATCHES.get(watches.service) is watches:
                del _WATCHES[watches.service]
            await watches.hub.close()

    async def serve(
        self,
        request: web.Request,
        route: Route,
        identity: Identity | None,
        client: ClientOrigin | None,
    ) -> web.StreamResponse:
        settings = self.watches.settings
        ws = web.WebSocketResponse(
            max_msg_size=settings.max_frame_bytes,
            heartbeat=settings.stalled_reader_timeout / 2,  # a pong within a quarter of it
            compress=False,  # (inflating is work a stranger chooses the size of)
            timeout=CLOSE_TIMEOUT,
        )
        if not ws.can_prepare(request).ok:
            return json_error(426, f"{PATH} is a WebSocket: send an Upgrade request")
        await ws.prepare(request)
        address = client.address if client is not None else (request.remote or "-")
        stream = _Stream(self.watches, ws, request, route, identity, str(client or address))
        refused = self.watches.admit(address, stream.role)
        if refused is not None:
            await stream.fail("limit_exceeded", refused, LIMIT_EXCEEDED)
            return ws
        self.streams.add(stream)
        try:
            await stream.run()
        finally:
            self.streams.discard(stream)
            self.watches.leave(address, stream.role)
        return ws

    async def close_all(self, app: web.Application | None = None) -> None:
        """The socket stops: every stream closes with 1001 (going away)."""
        await asyncio.gather(
            *(stream.close(WSCloseCode.GOING_AWAY, "shutdown") for stream in list(self.streams))
        )


def _error_reason(error: BaseException | None) -> str:
    """The closed-stream reason of what aiohttp's reader failed with."""
    if isinstance(error, TimeoutError):
        return "stalled"  # (no pong within a quarter of the timeout)
    if isinstance(error, WebSocketError):
        if error.code == WSCloseCode.MESSAGE_TOO_BIG:
            return "limit_exceeded"  # (a frame over watchMaxFrameBytes: closed with 1009)
        return "bad_request"  # (not RFC 6455)
    return "client"


class _SendQueue:
    """What the client's kernel took of a stream: a stream with bytes waiting in its send
    queue, none of which the client acknowledged for the stalled-reader timeout, is stalled
    (a client that reads nothing closes its window, and its pongs acknowledge nothing).
    Linux only; elsewhere a send that blocks for the timeout is the only sign."""

    def __init__(self, transport: asyncio.BaseTransport | None) -> None:
        raw = transport.get_extra_info("socket") if transport is not None else None
        self.socket = None
        if raw is not None and sys.platform.startswith("linux"):
            with contextlib.suppress(OSError):
                raw.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
                self.socket = raw
        self.queued = 0
        self.acked = -1
        self.still_for = 0.0  # seconds with bytes waiting and none acknowledged

    def stalled(self, elapsed: float, timeout: float) -> bool:
        """Sampled every `elapsed` seconds: has the client taken nothing for `timeout`?"""
        if self.socket is None:
            return False
        try:
            queued = struct.unpack("i", fcntl.ioctl(self.socket.fileno(), SIOCOUTQ, bytes(4)))[0]
            info = self.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
        except (OSError, ValueError):  # (closed meanwhile)
            return False
        # (a kernel older than 4.1 has no tcpi_bytes_acked: a shorter queue is progress then)
        acked = -1
        if len(info) >= TCPI_BYTES_ACKED + 8:
            acked = struct.unpack_from("Q", info, TCPI_BYTES_ACKED)[0]
        took = acked != self.acked if acked >= 0 else queued < self.queued
        self.queued, self.acked = queued, acked
        if queued == 0 or took:
            self.still_for = 0.0
            return False
        self.still_for += elapsed
        return self.still_for >= timeout


class _Stream:
    """One WebSocket stream: reads its requests (WatchRequests), sends what the hub hands it,
    closes it (a limit, an expired token, a client that reads nothing, shutdown)."""

    def __init__(
        self,
        watches: Watches,
        ws: web.WebSocketResponse,
        request: web.Request,
        route: Route,
        identity: Identity | None,
        client: str,
    ) -> None:
        self.watches = watches
        self.hub = watches.hub
        self.metrics = watches.metrics
        self.ws = ws
        self.transport = request.transport
        self._protocol = request.protocol
        self.route = route
        self.identity = identity
        self.role = identity.role if identity is not None else None
        self.client = client
        self.state = StreamState(watches.settings.max_topics)
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._send_queue = _SendQueue(self.transport)
        self._expiry: asyncio.TimerHandle | None = None
        self._closing = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._requests = WatchRequests(self, self.hub)
        self.held = watches.held
        self._request_text = self._request_held = 0  # the request being read: its bytes
        self.reason = "client"

    @property
    def closing(self) -> bool:
        return self._closing

    def __str__(self) -> str:
        return self.client  # (who a refused lookup of its topics is logged for)

    # -- the hub's sink -----------------------------------------------------------------------

    def watching(self, topic: str) -> None:
        self.state.add(topic)

    def deliver(self, topic: str, message: str) -> None:
        self.deliver_many([(topic, message)])

    def deliver_many(self, messages: list[tuple[str, str]]) -> None:
        """Queue each (topic, message) in order: one charge for them all, one wake."""
        state = self.state
        before, queued = state.coalesced, state.queued_bytes
        if state.offer_all(messages):
            if state.coalesced != before:
                self.metrics.coalesced.inc(state.coalesced - before)
            if self._held(state.queued_bytes - queued):
                self._wake.set()

    # -- the byte budget ----------------------------------------------------------------------

    def charge(self, size: int, pool: str = UNREAD) -> bool:
        """Charge `size` more bytes held for this stream to the process's budget (`pool`:
        WATCH for its names and state, UNREAD for what it was not sent yet); over it, the
        stream is closed (told why) and False returned."""
        if self._closing:
            return False
        refused = self.held.charge(self, size, pool)
        if refused is None:
            return True
        self._closing = True  # (the reader stops; the client is told)
        message = f"the gateway holds too much for this stream: {refused}"
        self._later(self.fail("limit_exceeded", message, LIMIT_EXCEEDED, reason="over_budget"))
        return False

    def release(self, size: int, pool: str = UNREAD) -> None:
        self.held.release(self, size, pool)

    def parsing(self) -> bool:
        """The request is about to be parsed: what that holds is charged first (False: over
        the budget, the stream is closing)."""
        more = (REQUEST_HOLDS - 1) * self._request_text
        if not self.charge(more):
            return False
        self._request_held += more
        return True

    def names_taken(self) -> None:
        """A subscribe's names were taken in: of the request, only its text is held now."""
        if self._request_held > self._request_text:
            self.release(self._request_held - self._request_text)
            self._request_held = self._request_text

    def _held(self, change: int) -> bool:
        if change >= 0:
            return self.charge(change)
        self.release(-change)
        return True

    # -- the stream -----------------------------------------------------------------------------

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self._writer = loop.create_task(self._write())
        watchdog = loop.create_task(self._watch_send_queue())
        self._schedule_expiry()
        try:
            async for message in self.ws:
                if message.type is WSMsgType.ERROR:
                    if self.reason == "client":  # (not cut off by us already)
                        self.reason = _error_reason(self.ws.exception())
                    break
                if message.type is not WSMsgType.TEXT:
                    await self.fail("bad_request", "requests are JSON text frames", 1003)
                    break
                # What the request holds: its text while it waits for its turn, what parsing
                # it makes once parsed (parsing), its text again once its names were taken in
                # (names_taken), nothing once it was acted on.
                self._request_text = self._request_held = len(message.data)
                if not self.charge(self._request_held):
                    break
                try:
                    await self._requests.handle(message.data)
                finally:
                    self.release(self._request_held)
                    self._request_held = 0
                if self._closing:
                    break
        except Exception:  # a bug of ours: the client is told, the process goes on
            log.exception("ownership watch: stream of %s failed", self.client)
            await self.fail("internal", "the gateway failed", WSCloseCode.INTERNAL_ERROR)
        finally:
            self._closing = True
            if self._expiry is not None:
                self._expiry.cancel()
            for task in (self._writer, watchdog):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if self._tasks:  # (a close decided meanwhile tells the client why before it ends)
                await asyncio.gather(*self._tasks, return_exceptions=True)
            self.hub.unsubscribe(self, list(self.state.topics), self.route.choice, self.role)
            self.held.forget(self)
            self.metrics.closed.labels(self.reason).inc()

    def reauthenticated(self, identity: Identity) -> None:
        """A token of the same role was accepted: it expires when that one does."""
        self.identity = identity
        self._schedule_expiry()

    def control(self, body: dict[str, object]) -> None:
        if self._closing:
            return  # (told why already, or about to be: once)
        state = self.state
        queued = state.queued_bytes
        if not state.offer_control(json.dumps(body)):
            self._closing = True  # (the reader stops; the client is told)
            self._later(self.fail("limit_exceeded", "too many answers unread", LIMIT_EXCEEDED))
            return
        if self._held(state.queued_bytes - queued):
            self._wake.set()

    def _later(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)  # (a reference, or the loop may collect it while it runs)
        task.add_done_callback(self._tasks.discard)

    def _schedule_expiry(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        expires = self.identity.expires_at if self.identity is not None else None
        if expires is None:
            return
        clock = self.route.guard.authenticator.clock
        delay = max(0.0, expires - clock())
        self._expiry = asyncio.get_running_loop().call_later(delay, self._expired)

    def _expired(self) -> None:
        self._expiry = None
        message = "the token expired; send update_token before it does"
        self._later(self.fail("token_expired", message, UNAUTHENTICATED))

    async def _write(self) -> None:
        """Send what is pending; a client that takes nothing for the stalled-reader timeout is
        cut off (a close frame could not reach it either)."""
        timeout = self.watches.settings.stalled_reader_timeout
        turns = self.hub.turns
        while True:
            await self._wake.wait()
            # (ahead of the watch's other work: sending gives the queued bytes back; what is
            # queued is taken once the turn comes: a herd's first answers go out together)
            await turns.take(first=True)
            self._wake.clear()
            messages = self.state.take()
            # In slices, each in the stream's turn, written together (one write and one TCP
            # segment for many small frames instead of one each)
            for start in range(0, len(messages), SEND_SLICE):
                batch = messages[start : start + SEND_SLICE]
                if start:
                    await turns.take(first=True)
                # While a send waits for the client to take what was written, the stream holds
                # what it did not take: it may be closed to make room for a client that reads.
                self.held.stalled(self, self._closed_for_room)
                try:
                    drained = self._send(batch)
                    if drained is not None:
                        await asyncio.wait_for(drained, timeout)
                except TimeoutError:
                    self._stalled()
                    return
                except ConnectionError:
                    return
                self.held.reading(self)
                self.release(sum(message_bytes(message) for message in batch))
                self.metrics.messages.inc(len(batch))
                # What was sent is given back and dropped (not kept by the taken list until
                # its last slice is sent, nor by these names until the next wake)
                messages[start : start + len(batch)] = [""] * len(batch)
                del batch
            del messages

    def _send(self, batch: list[str]) -> Coroutine[Any, Any, None] | None:
        """Write the batch's frames with one write (not one per message); what to await
        while the transport's buffer is full (None: nothing)."""
        transport = self.transport
        if self.ws.closed or transport is None or transport.is_closing():
            raise ConnectionError("the stream is closing")  # (no frame after a close frame)
        transport.write(text_frames(batch))
        # (aiohttp's own protocol: the transport's may be a wrapper, http_api.server's guard,
        # which passes pause_writing on and is never paused itself)
        protocol = self._protocol
        if isinstance(protocol, BaseProtocol) and protocol.writing_paused:
            return protocol._drain_helper()
        return None

    async def _watch_send_queue(self) -> None:
        """Close the stream once the client has taken nothing of its send queue for the
        stalled-reader timeout (sampled every half of it)."""
        timeout = self.watches.settings.stalled_reader_timeout
        queue = self._send_queue
        while not queue.stalled(timeout / 2, timeout):
            # A stream that takes nothing of what waits for it may be closed early to make
            # room in the byte budget for a client that reads (serving.held_bytes); it is
            # marked reading again once a send completes (_write).
            if queue.still_for > 0:
                self.held.stalled(self, self._closed_for_room)
            await asyncio.sleep(timeout / 2)
        self._stalled()

    def _closed_for_room(self, _why: str) -> None:
        self._stalled()  # (its bytes were given back by the budget)

    def _stalled(self) -> None:
        log.info("ownership watch: closing the stream of %s: it reads nothing", self.client)
        self.reason = "stalled"
        self._closing = True
        if self.transport is not None:
            self.transport.abort()  # (a close frame could not reach it either)

    async def fail(
        self, code: str, message: str, close_code: int, *, reason: str | None = None
    ) -> None:
        """Tell the client why (an error for the stream), then close with `close_code`;
        `reason`: the closed-streams metric's label (the code if None)."""
        if self.ws.closed:
            return
        self._closing = True
        self.reason = reason or code
        with contextlib.suppress(ConnectionError, TimeoutError):
            body = json.dumps({"type": "error", "code": code, "message": message})
            await asyncio.wait_for(self.ws.send_str(body), CLOSE_TIMEOUT)
        await self.close(close_code, code)

    async def close(self, close_code: int, reason: str) -> None:
        if self.ws.closed:
            return
        self._closing = True
        if self.reason == "client":
            self.reason = reason
        try:
            # (the close frame waits behind what a client that reads nothing did not take)
            await asyncio.wait_for(
                self.ws.close(code=close_code, message=reason.encode()[:120]), CLOSE_TIMEOUT * 2
            )
        except (ConnectionError, TimeoutError):
            if self.transport is not None:
                self.transport.abort()
