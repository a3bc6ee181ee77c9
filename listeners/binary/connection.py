"""One client connection: the asyncio protocol shell. It frames bytes, keeps the connection's
state (listeners.binary.state), flow control and keep-alive, and hands each request to the
handler of its command family; it answers nothing itself but PING and refusals."""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol, cast

from pulsar_lookup_gateway.listeners.binary.handlers import Handlers
from pulsar_lookup_gateway.listeners.binary.replies import (
    NOT_ALLOWED,
    PING,
    PONG,
    UNKNOWN_ERROR,
    not_supported,
)
from pulsar_lookup_gateway.listeners.binary.reply_budget import ReplyBudget
from pulsar_lookup_gateway.listeners.binary.requests import RequestRunner
from pulsar_lookup_gateway.listeners.binary.session import Memo, Session
from pulsar_lookup_gateway.listeners.binary.settings import PRE_CONNECT_MAX_FRAME, BinarySettings
from pulsar_lookup_gateway.listeners.binary.state import ConnectionState, move
from pulsar_lookup_gateway.listeners.endpoints.client_origin import ClientOrigin
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import (
    BaseCommand,
    Command,
    FrameDecoder,
    RemoteProtocolError,
    UnknownCommand,
)
from pulsar_lookup_gateway.listeners.protocol.lookup_frames import is_canonical
from pulsar_lookup_gateway.listeners.routing import Route
from pulsar_lookup_gateway.serving.log_throttle import LogThrottle

log = logging.getLogger(__package__)
_BUDGET_LOG = LogThrottle(log, logging.WARNING)  # connections closed for unread answers
#: Bytes of answers one read may make before they are sent (and weighed): see _requests.
OUT_FLUSH = 256 * 1024

AWAITING_CONNECT = ConnectionState.AWAITING_CONNECT
AUTHENTICATING = ConnectionState.AUTHENTICATING
CONNECTED = ConnectionState.CONNECTED
CLOSING = ConnectionState.CLOSING


class Host(Protocol):
    """What a connection asks of the socket that accepted it (BinaryServer): its handlers and
    settings, the route of a new client, and the count of open and refused connections."""

    handlers: Handlers
    settings: BinarySettings
    reply_budget: ReplyBudget

    @property
    def url(self) -> str: ...

    def route_for(self, origin: ClientOrigin, transport: asyncio.BaseTransport) -> Route: ...

    def admit(self, conn: Connection, transport: asyncio.BaseTransport) -> bool: ...

    def forget(self, conn: Connection) -> None: ...

    def count_refused(self, reason: str) -> None: ...


class Connection(asyncio.Protocol):
    """Every callback catches what a peer's bytes can cause."""

    def __init__(self, server: Host, origin: ClientOrigin | None = None) -> None:
        """`origin`: where the client is, when a PROXY header said so (None: the peer)."""
        self.state = AWAITING_CONNECT
        self._server = server
        self._handlers = server.handlers
        self._settings = server.settings
        self._budget = server.reply_budget
        self._origin = origin
        self.session: Session | None = None  # made when the connection is
        self._decoder = FrameDecoder(min(server.settings.max_frame_size, PRE_CONNECT_MAX_FRAME))
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self.address = "?"  # the client's IP address, for maxConnectionsPerIp
        self.peer = "?"
        self._flow = _FlowControl()
        self._liveness = _Liveness()
        self._handshake_timer: asyncio.TimerHandle | None = None
        self.runner = RequestRunner(self._send, self._update_reading)
        self.lost: asyncio.Future[None] = self._loop.create_future()

    def _move(self, to: ConnectionState) -> None:
        self.state = move(self.state, to)

    # -- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it: no isinstance.
        self._transport = cast(asyncio.Transport, transport)
        origin = self._origin
        if origin is None:
            origin = ClientOrigin.of_peer(transport.get_extra_info("peername"), self._server.url)
        self.peer = origin.client
        self.address = origin.address
        ssl_object = transport.get_extra_info("ssl_object")
        self.session = Session(origin, self._server.route_for(origin, transport), ssl_object)
        if not self._server.admit(self, transport):
            self._move(CLOSING)
            self._transport.abort()
            return
        self._handshake_timer = self._loop.call_later(
            self._settings.handshake_timeout, self._handshake_expired
        )

    def data_received(self, data: bytes) -> None:
        if self.state is CLOSING or self._flow.stopped:
            return
        self._liveness.heard()
        out: list[bytes] = []
        try:
            self._read(data, out)
        except RemoteProtocolError as exc:
            log.info("closing connection from %s: %s", self.peer, exc)
            out.append(codec.error(0, UNKNOWN_ERROR, f"protocol error: {exc}"))
            self._send(out)
            self.close()
            return
        except Exception:  # a bug of ours: lose this connection, never the process
            log.exception("closing connection from %s after an internal error", self.peer)
            self._send(out)
            self.close()
            return
        self._send(out)
        if self.state is CLOSING:  # a command asked for it: answers first, then close
            self.close()

    def _read(self, data: bytes, out: list[bytes]) -> None:
        decoder, session = self._decoder, self.session
        assert session is not None  # (set by connection_made, before any read)
        lookups = self._handlers.lookups
        memo = lookups.usable_memo(session) if self.state is CONNECTED else None
        if memo is not None and not decoder.buffered_size and type(data) is bytes:
            answered = lookups.answer_read(data, memo, session.bundles, decoder.max_frame_size, out)
            if answered:
                data = data[answered:]
                if not data:  # (the whole read was memoised answers: nothing more to do)
                    return
        decoder.feed(data)
        if self.state is CONNECTED:
            self._requests(memo, out)
        while self.state is not CLOSING:  # (before CONNECTED: the frame cap changes with it)
            command = decoder.next_command()
            if command is None:
                break
            self._dispatch(command, out)

    def _requests(self, memo: Memo | None, out: list[bytes]) -> None:
        """Answer every complete frame of a connected client: a LOOKUP answered before with
        the same bytes but for its request id from the memo, anything else in full.

        Answers made at once pile up in `out` while the read lasts; one read of small
        requests with large answers (cached topic lists) could make hundreds of megabytes
        of them. So every OUT_FLUSH bytes they are sent, which weighs them against the
        reply budget (a client that does not read is closed there, ending the loop)."""
        decoder, session, dispatch = self._decoder, self.session, self._dispatch
        decode, memoised = codec.decode_command, self._handlers.lookups.answer_body
        assert session is not None
        bundles = session.bundles
        weighed = 0  # frames of `out` counted in `weight`
        weight = 0
        while self.state is CONNECTED:
            bodies = decoder.bodies()
            if not bodies:
                return
            for body in bodies:
                if self.state is not CONNECTED:
                    return
                key = None
                if memo is not None:
                    answered, key = memoised(body, memo, bundles, out)
                    if answered:
                        continue
                command = decode(body)
                if key is not None and not is_canonical(command, body):
                    key = None  # (its answer is not kept under a key that reads it otherwise)
                dispatch(command, out, key)
                made = len(out)
                while weighed < made:
                    weight += len(out[weighed])
                    weighed += 1
                if weight > OUT_FLUSH:
                    self._send(out)
                    out.clear()
                    weighed = weight = 0

    def eof_received(self) -> bool:
        # A Pulsar client never half-closes; close our side too (lookups in flight are dropped).
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._move(CLOSING)  # (from any state: the peer went away)
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
        self.runner.cancel()
        self._budget.gone(self.session)
        self._server.forget(self)
        if not self.lost.done():
            self.lost.set_result(None)

    def pause_writing(self) -> None:
        # The client does not read its answers: stop reading its questions until it does.
        self._flow.write_paused = True
        self._budget.bytes.stalled(self.session, self._closed_to_make_room)
        self._update_reading()

    def resume_writing(self) -> None:
        self._flow.write_paused = False
        self._budget.bytes.reading(self.session)
        self._budget.drained(self.session)
        self._update_reading()

    def _closed_to_make_room(self, reason: str) -> None:
        self._server.count_refused("reply-budget")
        _BUDGET_LOG.event("closing connection from %s: %s", self.peer, reason)
        self.abort()

    # -- control (server) ----------------------------------------------------------------

    def stop_reading(self) -> None:
        self._flow.stopped = True
        self._update_reading()

    def close(self) -> None:
        self._move(CLOSING)
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    def abort(self) -> None:
        self._move(CLOSING)
        if self._transport is not None:
            self._transport.abort()

    def keep_alive_tick(self) -> None:
        if self.state is not CONNECTED:
            return
        verdict = self._liveness.tick(self._flow)
        if verdict is _Liveness.PING:
            self._send([PING])
        elif verdict is not None:
            log.info("closing connection from %s: %s", self.peer, verdict)
            self.abort()

    # -- commands ------------------------------------------------------------------------

    def _dispatch(self, command: Command, out: list[bytes], memo_key: bytes | None = None) -> None:
        """`memo_key`: a LOOKUP's key in the memo, when its answer may be kept there."""
        if self.state is not CONNECTED:
            self._before_connected(command, out)
            return
        if isinstance(command, UnknownCommand):
            message = f"command type {command.type_number} is not supported by the lookup gateway"
            out.append(codec.error(0, NOT_ALLOWED, message))
            return
        kind, session, handlers = command.type, self.session, self._handlers
        assert session is not None
        if kind in handlers.requests:
            if session.credentials_expired():
                log.info(
                    "closing connection from %s: the credentials of role %r expired",
                    self.peer,
                    session.role,
                )
                self._move(CLOSING)
            elif kind == BaseCommand.LOOKUP:
                handlers.lookups.lookup(session, command.lookupTopic, self.runner, out, memo_key)
            elif kind == BaseCommand.PARTITIONED_METADATA:
                handlers.partitions.handle(session, command.partitionMetadata, self.runner, out)
            elif kind == BaseCommand.GET_TOPICS_OF_NAMESPACE:
                handlers.topics.handle(session, command.getTopicsOfNamespace, self.runner, out)
            else:
                handlers.schemas.handle(session, command.getSchema, self.runner, out)
        elif kind == BaseCommand.PING:
            out.append(PONG)
        elif kind == BaseCommand.PONG:
            pass  # any frame counts as a sign of life (data_received)
        elif kind == BaseCommand.CONNECT:
            log.info("closing connection from %s: a second CONNECT", self.peer)
            self._move(CLOSING)
        else:
            out.append(not_supported(command))

    def _before_connected(self, command: Command, out: list[bytes]) -> None:
        if isinstance(command, UnknownCommand) or command.type != BaseCommand.CONNECT:
            what = (
                f"command type {command.type_number}"
                if isinstance(command, UnknownCommand)
                else BaseCommand.Type.Name(command.type)
            )
            log.info("closing connection from %s: %s before CONNECT", self.peer, what)
            self._move(CLOSING)
            return
        handshake = self._handlers.handshake
        assert self.session is not None and self._transport is not None
        if handshake.requires_credentials(self.session):
            self._move(AUTHENTICATING)
        ssl_object = self._transport.get_extra_info("ssl_object")
        self._move(handshake.connect(self.session, command, ssl_object, out))
        if self.state is CONNECTED:
            self._decoder.max_frame_size = self._settings.max_frame_size
            if self._handshake_timer is not None:
                self._handshake_timer.cancel()
                self._handshake_timer = None

    def _handshake_expired(self) -> None:
        self._handshake_timer = None
        if self.state is AWAITING_CONNECT or self.state is AUTHENTICATING:
            self._server.count_refused("handshake-timeout")
            log.info(
                "closing connection from %s: no CONNECT within %ss",
                self.peer,
                self._settings.handshake_timeout,
            )
            self.abort()

    # -- writing and flow control ----------------------------------------------------------

    def _send(self, frames: list[bytes]) -> None:
        transport = self._transport
        if not frames or transport is None or transport.is_closing():
            return
        data = frames[0] if len(frames) == 1 else b"".join(frames)
        # (charged to the session: its forwarded answers in flight are, too)
        refused = self._budget.refusal(self.session, transport.get_write_buffer_size() + len(data))
        if refused is not None:
            self._server.count_refused("reply-budget")
            _BUDGET_LOG.event("closing connection from %s: %s", self.peer, refused)
            self.abort()
            return
        transport.write(data)

    def _update_reading(self) -> None:
        want = not (self._flow.write_paused or self._flow.stopped or self.runner.busy)
        if want == self._flow.reading or self._transport is None or self._transport.is_closing():
            return
        self._flow.reading = want
        if want:
            self._transport.resume_reading()
        else:
            self._transport.pause_reading()


class _FlowControl:
    """Why the socket is not read: the client does not read its answers, the server stops."""

    __slots__ = ("reading", "stopped", "write_paused")

    def __init__(self) -> None:
        self.reading = True
        self.write_paused = False
        self.stopped = False


class _Liveness:
    """Keep-alive: a connection quiet for a whole interval is pinged, and dropped if nothing
    comes back by the next tick; one that does not read its answers gets one tick to drain."""

    PING = "ping"
    __slots__ = ("_active", "_awaiting_pong", "_stalled")

    def __init__(self) -> None:
        self._active = True  # bytes arrived since the last tick
        self._awaiting_pong = False
        self._stalled = False  # writes were paused at the last tick

    def heard(self) -> None:
        self._active = True
        self._awaiting_pong = False

    def tick(self, flow: _FlowControl) -> str | None:
        """PING to send one, a reason to drop the connection, or None."""
        if flow.write_paused:
            # The client does not read its answers (full send buffer): it cannot answer a PING
            # either. Give it one tick to drain, then free its slot.
            stalled, self._stalled = self._stalled, True
            return "it does not read its answers" if stalled else None
        self._stalled = False
        if not flow.reading:  # stopping, or at the in-flight cap: answers are on their way
            return None
        if self._awaiting_pong:
            return "no answer to PING"
        # Every connected client is pinged, whatever version it claims: a client that cannot
        # answer a PING cannot hold a connection for ever either.
        active, self._active = self._active, False
        if active:
            return None
        self._awaiting_pong = True
        return self.PING
