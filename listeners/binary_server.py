"""The Pulsar binary protocol server: one per ``pulsar://`` or ``pulsar+ssl://`` bind address.

A thin asyncio shell around the sans-IO codec (:mod:`listeners.protocol.codec`): bytes from the
socket go into a :class:`FrameDecoder`, each command is answered from the
:class:`~lookup.service.LookupService`, and the answer frames go back out. Every connection is
tagged with the listener of the socket it arrived on; a non-blank ``advertised_listener_name``
in LOOKUP overrides it.

What a connection may do:

- CONNECT first, within the handshake deadline, in a frame of at most 64 KiB; anything else
  before it closes the connection. CONNECTED carries the client's protocol version clamped to
  ``[0, ours]`` and the cluster's maxMessageSize, which from then on bounds frames. A CONNECT
  that asks to be proxied to a broker (``proxy_to_broker_url``) gets ERROR ``NotAllowedError``
  and the connection is closed: the gateway relays nothing.
- Connections are capped per socket (brokerMaxConnections) and per client address
  (maxConnectionsPerIp); the excess is closed at accept, logged at most once per interval.
- LOOKUP, PARTITIONED_METADATA, GET_TOPICS_OF_NAMESPACE and GET_SCHEMA are answered
  concurrently (pipelined): a slow lookup does not hold up later ones; answers carry the request
  id. Persistent topic lists and partitioned metadata come from the metadata store, with the
  broker's auto-creation rules (lookup.topic_list, lookup.auto_creation); what only a broker can
  answer (schemas, non-persistent topics, creating a partitioned topic) goes over the broker
  link (listeners.broker_link) and the broker's answer is relayed under the client's request id.
  CONNECTED announces supports_get_partitioned_metadata_without_auto_creation, as a broker does.
- PING is answered with PONG; idle clients (whatever their version) are pinged every keep-alive
  interval and dropped if nothing comes back by the next tick.
- Any other command gets ERROR ``NotAllowedError`` naming it, and the connection stays usable.
- A frame that does not decode (RemoteProtocolError) closes that connection only.

Authentication: on a socket whose listener requires it, CONNECT's ``auth_method_name``
/ ``auth_data`` (and the verified client certificate of a ``pulsar+ssl://`` socket) must prove a
role before CONNECTED; otherwise ERROR ``AuthenticationError`` and the connection is closed. The
role stays with the connection: every LOOKUP and PARTITIONED_METADATA is authorized for it (when
authorization is on). A connection whose token has expired is closed at its next request; the
client reconnects with fresh credentials. A listener name the client asks for outside the
socket's ``allowedListenerNames`` answers Failed ``NotAllowedError``.

No exception raised by a peer's bytes escapes into the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import types
from collections import Counter
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass, field
from importlib import metadata
from time import perf_counter
from typing import Any, TypeVar, cast

from google.protobuf.unknown_fields import UnknownFieldSet

from pulsar_lookup_gateway.listeners.auth import (
    AuthenticationFailed,
    Authenticator,
    Credentials,
    Identity,
    verified_peer_certificate,
)
from pulsar_lookup_gateway.listeners.broker_link import ANONYMOUS, BrokerLink, Principal, relay
from pulsar_lookup_gateway.listeners.client_origin import ClientOrigin
from pulsar_lookup_gateway.listeners.config import GatewayConfig
from pulsar_lookup_gateway.listeners.lookup_memo import (
    AnswerTemplate,
    LookupMemo,
    answer_run,
    split_lookup,
)
from pulsar_lookup_gateway.listeners.protocol import codec, wire
from pulsar_lookup_gateway.listeners.protocol.codec import (
    DEFAULT_MAX_FRAME_SIZE,
    BaseCommand,
    Command,
    FeatureFlags,
    FrameDecoder,
    LookupType,
    RemoteProtocolError,
    UnknownCommand,
)
from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import (
    CommandGetSchema,
    CommandGetTopicsOfNamespace,
)
from pulsar_lookup_gateway.listeners.proxied_accept import ProxiedAcceptor
from pulsar_lookup_gateway.listeners.socket_table import (
    BACKLOG,
    BoundSocket,
    SocketSpec,
    bind_listening,
)
from pulsar_lookup_gateway.lookup.auto_creation import Partitions, TopicNotFound, topic_not_found
from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure
from pulsar_lookup_gateway.lookup.errors import ServerError as LookupServerError
from pulsar_lookup_gateway.lookup.log_throttle import LogThrottle
from pulsar_lookup_gateway.lookup.networks import NetworkTable
from pulsar_lookup_gateway.lookup.resolve import LookupAnswer, ResponseKind
from pulsar_lookup_gateway.lookup.selection import ListenerChoice
from pulsar_lookup_gateway.lookup.service import LookupService
from pulsar_lookup_gateway.lookup.service import log as service_log
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.tls.server_names import server_name_of

__all__ = ["PROTOCOL_VERSION", "SERVER_VERSION", "BinaryServer", "BinarySettings"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The newest protocol version this server speaks; CONNECTED answers min(client's, this).
PROTOCOL_VERSION = 21
#: Pulsar's frame limit is maxMessageSize plus this much room for the command and metadata.
FRAME_PADDING = 10 * 1024
#: Requests of one connection waiting on metadata reads; beyond this its socket is not read until
#: some are answered (maxConcurrentLookupRequest bounds lookups across connections; this also
#: bounds PARTITIONED_METADATA, which that limit does not count).
MAX_IN_FLIGHT_PER_CONNECTION = 1024
#: Largest frame accepted before CONNECTED: a CONNECT with a large token fits many times over,
#: and a stranger cannot make the gateway buffer maxMessageSize per connection.
PRE_CONNECT_MAX_FRAME = 64 * 1024
#: The ERROR a CONNECT with proxy_to_broker_url gets before the connection is closed.
PROXY_REFUSAL = (
    "the lookup gateway does not proxy connections to brokers (proxy_to_broker_url): "
    "connect to the broker address the lookup answered"
)


def _package_version() -> str:
    try:
        return metadata.version("pulsar-lookup-gateway")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0+unknown"


SERVER_VERSION = f"pulsar-lookup-gateway-{_package_version()}"


@dataclass(frozen=True, slots=True)
class BinarySettings:
    """Per-socket connection settings. ``max_message_size`` (announced in CONNECTED) defaults to
    ``max_frame_size`` minus Pulsar's 10 KiB of frame padding."""

    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    max_connections: int = 0  # 0: unlimited
    max_connections_per_ip: int = 0  # 0: no cap per client address
    keep_alive_interval: float = 30.0  # 0: never ping
    handshake_timeout: float = 10.0
    max_message_size: int | None = None
    reuse_port: bool = False  # SO_REUSEPORT: worker processes share the port (`--workers`)
    # Answer a repeated LOOKUP from its bytes (listeners.lookup_memo); off: always in full
    # (the reference the memo is tested and measured against).
    memoise_lookups: bool = True
    # Clients come through balancers that write a PROXY header first; believed only from these.
    proxy_protocol: bool = False
    trusted_proxies: NetworkTable[bool] = field(default_factory=NetworkTable)

    def __post_init__(self) -> None:
        if self.max_frame_size < 8:
            raise ValueError("max_frame_size must be at least 8 (the frame header)")
        if self.max_connections < 0:
            raise ValueError("max_connections must be >= 0 (0: unlimited)")
        if self.max_connections_per_ip < 0:
            raise ValueError("max_connections_per_ip must be >= 0 (0: no cap)")
        if self.keep_alive_interval < 0:
            raise ValueError("keep_alive_interval must be >= 0 (0: never ping)")
        if self.handshake_timeout <= 0:
            raise ValueError("handshake_timeout must be > 0")

    @property
    def announced_message_size(self) -> int:
        if self.max_message_size is not None:
            return self.max_message_size
        # A frame cap too small for Pulsar's padding (tests) announces the frame cap itself.
        padded = self.max_frame_size - FRAME_PADDING
        return padded if padded > 0 else self.max_frame_size

    @classmethod
    def from_config(cls, config: GatewayConfig, listener: str | None) -> BinarySettings:
        return cls(
            max_frame_size=config.max_message_size + FRAME_PADDING,
            max_connections=config.broker_max_connections,
            max_connections_per_ip=config.max_connections_per_ip,
            keep_alive_interval=float(config.keep_alive_interval_seconds),
            handshake_timeout=config.connection_handshake_timeout_seconds,
            max_message_size=config.max_message_size,
            proxy_protocol=config.settings_for(listener).proxy_protocol,
            trusted_proxies=config.trusted_proxies(),
        )


class BinaryServer(BoundSocket):
    """Serves Pulsar binary lookups on one bind address (``spec``)."""

    def __init__(
        self,
        spec: SocketSpec,
        service: LookupService,
        settings: BinarySettings,
        ssl_context: ssl.SSLContext | None = None,
        authenticator: Authenticator | None = None,
        broker_link: BrokerLink | None = None,
    ) -> None:
        """`authenticator`: who must authenticate, and how (None: nobody, any listener name);
        `broker_link`: where requests only a broker can answer go (None: they fail)."""
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
        self._connections: set[_Connection] = set()
        self._per_address: dict[str, int] = {}  # open connections by client address
        self.proxy_refusals: dict[str, int] = {}  # connections closed for their PROXY header
        self.refused = LogThrottle(log, logging.WARNING)  # a flood must not flood the log
        self._stopping = False
        self.answers = _AnswerFrames()
        self.memo = LookupMemo()  # warm LOOKUPs of unauthenticated connections, by their bytes
        self.authenticator = authenticator or Authenticator()
        self.guard = self.authenticator.for_listener(spec.listener)
        # The choice for every lookup that names no listener: made once for the socket, or once
        # per connection where server names or client networks can choose a listener.
        self.socket_choice = service.choose(socket_listener=spec.listener)
        self.located = bool(service.routes)
        self.broker_link = broker_link

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("the server is already started")
        loop = asyncio.get_running_loop()
        endpoint = self.spec.endpoint
        if self.settings.proxy_protocol:
            sock = bind_listening(endpoint.host, endpoint.port, self.settings.reuse_port)
            acceptor = ProxiedAcceptor(
                sock,
                lambda origin: _Connection(self, origin),
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
                lambda: _Connection(self),
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
        in_flight = [task for conn in connections for task in conn.tasks]
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
        log.info("stopped listening on %s listener=%s", self.url, self.spec.listener or "-")

    # -- called by connections ---------------------------------------------------------

    def choice_for(self, origin: ClientOrigin, server_name: str | None) -> ListenerChoice:
        """What a lookup naming no listener gets on a connection from `origin` that dialled
        `server_name` (TLS)."""
        if not self.located:
            return self.socket_choice
        return self.service.choose(
            server_name=server_name,
            client_address=origin.address,
            socket_listener=self.spec.listener,
            allowed=self.guard.allowed_names,
        )

    def _proxy_refused(self, reason: str) -> None:
        self.proxy_refusals[reason] = self.proxy_refusals.get(reason, 0) + 1
        self.service.metrics.refused(self.spec.listener, reason)

    def _refusal(self, address: str) -> tuple[str, str] | None:
        """Why a new connection from `address` is refused, as (metric reason, log text); None:
        admitted."""
        if self._stopping:
            return "stopping", "stopping"
        limit = self.settings.max_connections
        if limit and len(self._connections) >= limit:
            return "max-connections", f"brokerMaxConnections={limit} reached"
        per_ip = self.settings.max_connections_per_ip
        if per_ip and self._per_address.get(address, 0) >= per_ip:
            return "max-connections-per-ip", f"maxConnectionsPerIp={per_ip} reached for {address}"
        return None

    def _admit(self, conn: _Connection) -> None:
        self._connections.add(conn)
        self._per_address[conn.address] = self._per_address.get(conn.address, 0) + 1

    def _forget(self, conn: _Connection) -> None:
        self._connections.discard(conn)
        left = self._per_address.get(conn.address, 0) - 1
        if left > 0:
            self._per_address[conn.address] = left
        else:
            self._per_address.pop(conn.address, None)

    async def _keep_alive(self) -> None:
        interval = self.settings.keep_alive_interval
        while True:
            await asyncio.sleep(interval)
            for conn in list(self._connections):
                conn.keep_alive_tick()


class _AnswerFrames:
    """LOOKUP_RESPONSE frames for answers with an address. Lookups share few distinct answers
    (one per broker, listener and response kind), so the codec builds each answer once; after
    that only its request id changes. Encoding a kept command costs a third of building one."""

    LIMIT = 4096  # distinct answers kept; more (a huge cluster) starts over

    def __init__(self) -> None:
        self._commands: dict[tuple[ResponseKind, str | None, str | None, bool], BaseCommand] = {}
        self._templates: dict[int, AnswerTemplate] = {}  # by id() of a kept command

    def frame(self, request_id: int, answer: LookupAnswer) -> bytes:
        command = self._command(answer)
        command.lookupTopicResponse.request_id = request_id
        return codec.encode_command(command)

    def template(self, answer: LookupAnswer) -> AnswerTemplate:
        """The frame of `answer` with a hole for the request id (for the lookup memo)."""
        command = self._command(answer)
        template = self._templates.get(id(command))
        if template is None:
            template = self._templates[id(command)] = AnswerTemplate.of(command)
        return template

    def _command(self, answer: LookupAnswer) -> BaseCommand:
        urls = answer.urls
        key = (answer.response, urls.service_url, urls.service_url_tls, answer.authoritative)
        command = self._commands.get(key)
        if command is None:
            if len(self._commands) >= self.LIMIT:
                self._commands.clear()
                self._templates.clear()
            command = self._commands[key] = _decoded(
                codec.lookup_response(
                    0,
                    response=_LOOKUP_TYPE[answer.response],
                    broker_url=urls.service_url,
                    broker_url_tls=urls.service_url_tls,
                    authoritative=answer.authoritative,
                )
            )
        return command


def _decoded(frame: bytes) -> BaseCommand:
    decoder = FrameDecoder()
    decoder.feed(frame)
    command = decoder.next_command()
    assert isinstance(command, BaseCommand)
    return command


# Frames that never change.
_PING = codec.ping()
_PONG = codec.pong()

# lookup.errors.ServerError and the proto enum share Pulsar's names and numbers; checked here.
_WIRE_ERROR: dict[LookupServerError, codec.ServerError] = {
    code: cast(codec.ServerError, codec.ServerError.Value(code.name)) for code in LookupServerError
}
_UNKNOWN_ERROR = codec.ServerError.UnknownError
_NOT_ALLOWED = codec.ServerError.NotAllowedError
_SERVICE_NOT_READY = codec.ServerError.ServiceNotReady
_AUTHENTICATION_ERROR = codec.ServerError.AuthenticationError
# The request id of an ERROR that answers no request: Pulsar's -1 as a uint64.
_NO_REQUEST = 2**64 - 1

_LOOKUP_TYPE = {
    ResponseKind.CONNECT: LookupType.Connect,
    ResponseKind.REDIRECT: LookupType.Redirect,
}

# Body field names of the commands our .proto has a body for (field number == type number).
_BODY_FIELD: dict[int, str] = {
    field.number: field.name
    for field in BaseCommand.DESCRIPTOR.fields
    if field.message_type is not None
}

# The requests a connected client may send (the other commands are refused or handled as
# connection control).
_CLIENT_REQUESTS = frozenset(
    {
        BaseCommand.LOOKUP,
        BaseCommand.PARTITIONED_METADATA,
        BaseCommand.GET_TOPICS_OF_NAMESPACE,
        BaseCommand.GET_SCHEMA,
    }
)
# What CONNECTED announces, as a broker does: PARTITIONED_METADATA honours
# metadata_auto_creation_enabled; no topic-list watchers (WATCH_TOPIC_LIST is not served, so
# clients re-list with GET_TOPICS_OF_NAMESPACE).
#: A memoised lookup's metric: its tally and whether it answers Connect (else a redirect).
_Outcome = tuple[Any, bool]
#: Memoised LOOKUPs of one listener choice: request key -> (answer template, outcome).
_Memo = dict[bytes, tuple[AnswerTemplate, _Outcome]]

_FEATURES = FeatureFlags(
    supports_get_partitioned_metadata_without_auto_creation=True,
    supports_topic_watchers=False,
)

# Commands our .proto has no body for: the field number of request_id inside their body
# (PulsarApi.proto), so that a refusal can name the request the client waits on.
_FOREIGN_REQUEST_ID_FIELD: dict[int, int] = {
    BaseCommand.SUBSCRIBE: 5,
    BaseCommand.PRODUCER: 3,
    BaseCommand.UNSUBSCRIBE: 2,
    BaseCommand.CLOSE_PRODUCER: 2,
    BaseCommand.CLOSE_CONSUMER: 2,
    BaseCommand.CONSUMER_STATS: 1,
    BaseCommand.SEEK: 2,
    BaseCommand.GET_LAST_MESSAGE_ID: 2,
    BaseCommand.GET_OR_CREATE_SCHEMA: 1,
    BaseCommand.NEW_TXN: 1,
    BaseCommand.ADD_PARTITION_TO_TXN: 1,
    BaseCommand.ADD_SUBSCRIPTION_TO_TXN: 1,
    BaseCommand.END_TXN: 1,
    BaseCommand.END_TXN_ON_PARTITION: 1,
    BaseCommand.END_TXN_ON_SUBSCRIPTION: 1,
    BaseCommand.TC_CLIENT_CONNECT_REQUEST: 1,
    BaseCommand.WATCH_TOPIC_LIST: 1,
    BaseCommand.WATCH_TOPIC_LIST_CLOSE: 1,
}


class _Connection(asyncio.Protocol):
    """One client connection. Every callback catches what a peer's bytes can cause."""

    def __init__(self, server: BinaryServer, origin: ClientOrigin | None = None) -> None:
        """`origin`: where the client is, when a PROXY header said so (None: the peer)."""
        self._server = server
        self.origin = origin
        self._service = server.service
        self._settings = server.settings
        self._listener = server.spec.listener
        self._socket_choice = server.socket_choice
        self._answers = server.answers
        self._guard = server.guard
        self._identity: Identity | None = None  # who authenticated (None: not required)
        self._role: str | None = None
        self._principal = ANONYMOUS  # who forwarded requests are made for
        # The lookup memo of this connection's listener choice (None: every request takes the
        # full path: before CONNECTED, and where a role is checked per lookup).
        self._memo: _Memo | None = None
        self._memo_key: bytes | None = None  # the request being answered, when memoisable
        self._decoder = FrameDecoder(min(server.settings.max_frame_size, PRE_CONNECT_MAX_FRAME))
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._peer = "?"
        self.address = "?"  # the client's IP address, for maxConnectionsPerIp
        self._admitted = False
        self._connected = False  # CONNECT answered
        self._closing = False
        self._reading = True
        self._write_paused = False
        self._stalled = False  # writes were paused at the last keep-alive tick
        self._stopped = False  # the server is stopping: read nothing more
        self._active = True  # bytes arrived since the last keep-alive tick
        self._awaiting_pong = False
        self._handshake_timer: asyncio.TimerHandle | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        self.lost: asyncio.Future[None] = self._loop.create_future()

    # -- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it: no isinstance.
        self._transport = cast(asyncio.Transport, transport)
        if self.origin is None:
            peername = transport.get_extra_info("peername")
            self.origin = ClientOrigin.of_peer(peername, self._server.url)
        self._peer = self.origin.client
        self.address = self.origin.address
        if self._server.located:  # (a TLS connection's handshake is done by now)
            server_name = server_name_of(transport.get_extra_info("ssl_object"))
            self._socket_choice = self._server.choice_for(self.origin, server_name)
        refused = self._server._refusal(self.address)
        if refused is not None:
            reason, why = refused
            self._service.metrics.refused(self._listener, reason)
            self._server.refused.event(
                "refusing connection from %s on %s: %s", self._peer, self._server.url, why
            )
            self._closing = True
            self._transport.abort()
            return
        self._server._admit(self)
        self._admitted = True
        self._handshake_timer = self._loop.call_later(
            self._settings.handshake_timeout, self._handshake_expired
        )

    def data_received(self, data: bytes) -> None:
        if self._closing or self._stopped:
            return
        self._active = True
        self._awaiting_pong = False
        out: list[bytes] = []
        try:
            decoder = self._decoder
            memo = self._memo if self._memo is not None and self._memo_usable() else None
            if memo is not None and not decoder.buffered_size and type(data) is bytes:
                data = self._answer_memoised(data, memo, out)
            if data:  # (the whole read was memoised answers: nothing more to do)
                decoder.feed(data)
                if self._connected:
                    self._requests(decoder, memo, out)
                while not self._closing:  # (before CONNECTED: the frame cap changes with it)
                    command = decoder.next_command()
                    if command is None:
                        break
                    self._dispatch(command, out)
        except RemoteProtocolError as exc:
            log.info("closing connection from %s: %s", self._peer, exc)
            out.append(codec.error(0, _UNKNOWN_ERROR, f"protocol error: {exc}"))
            self._send(out)
            self.close()
            return
        except Exception:  # a bug of ours: lose this connection, never the process
            log.exception("closing connection from %s after an internal error", self._peer)
            self._send(out)
            self.close()
            return
        self._send(out)
        if self._closing:  # a command asked for it: answers first, then close
            self.close()

    def _answer_memoised(self, data: bytes, memo: _Memo, out: list[bytes]) -> bytes:
        """Answer the leading frames of a read that are memoised LOOKUPs, straight from the
        read's bytes (the common case: the whole read); the rest of it, from the first frame
        that is anything else, for the frame decoder and the full path. Their time is taken
        once for the run and shared out among them in the latency histogram."""
        service = self._service
        if service.pending >= service.max_concurrent:
            return data  # the full path refuses lookups now
        hits: list[_Outcome] = []
        started = perf_counter()
        pos = answer_run(data, 0, self._decoder.max_frame_size, memo, out, hits)
        if hits:
            answered = len(hits)
            each = (perf_counter() - started) / answered
            first = hits[0]
            if hits.count(first) == answered:  # (the common case: one outcome for all)
                first[0].answered_together(answered, each, first[1])
            else:
                for (tally, connect), count in Counter(hits).items():
                    tally.answered_together(count, each, connect)
        return data[pos:] if pos else data

    def _requests(self, decoder: FrameDecoder, memo: _Memo | None, out: list[bytes]) -> None:
        """Answer every complete frame of a connected client: a LOOKUP answered before with
        the same bytes but for its request id from the memo, anything else in full."""
        decode, dispatch, service = codec.decode_command, self._dispatch, self._service
        append, split_of, clock = out.append, split_lookup, perf_counter  # (a hot loop)
        while not self._closing:
            bodies = decoder.bodies()
            if not bodies:
                return
            for body in bodies:
                if self._closing:
                    return
                split = split_of(body) if memo is not None else None
                if split is None:
                    dispatch(decode(body), out)
                    continue
                entry = memo.get(split[0])  # type: ignore[union-attr]  # (split: memo is set)
                if entry is None or service.pending >= service.max_concurrent:
                    command = decode(body)
                    # The full path memoises its answer to a request in protobuf's own shape
                    # only (a repeated request id, say, would be read differently by the key).
                    if (
                        entry is None
                        and isinstance(command, BaseCommand)
                        and command.SerializeToString() == body
                    ):
                        self._memo_key = split[0]
                    dispatch(command, out)
                    self._memo_key = None
                    continue
                started = clock()
                append(entry[0].frame(split[1]))
                tally, connect = entry[1]
                tally.answered(clock() - started, connect)

    def eof_received(self) -> bool:
        # A Pulsar client never half-closes; close our side too (lookups in flight are dropped).
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
        for task in list(self.tasks):
            task.cancel()
        if self._admitted:
            self._server._forget(self)
        if not self.lost.done():
            self.lost.set_result(None)

    def pause_writing(self) -> None:
        # The client does not read its answers: stop reading its questions until it does.
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()

    # -- control (server) ----------------------------------------------------------------

    def stop_reading(self) -> None:
        self._stopped = True
        self._update_reading()

    def close(self) -> None:
        self._closing = True
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    def abort(self) -> None:
        self._closing = True
        if self._transport is not None:
            self._transport.abort()

    def keep_alive_tick(self) -> None:
        if not self._connected or self._closing:
            return
        if self._write_paused:
            # The client does not read its answers (full send buffer): it cannot answer a PING
            # either. Give it one tick to drain, then free its slot.
            if self._stalled:
                log.info("closing connection from %s: it does not read its answers", self._peer)
                self.abort()
            self._stalled = True
            return
        self._stalled = False
        if not self._reading:  # stopping, or at the in-flight cap: answers are on their way
            return
        if self._awaiting_pong:
            log.info("closing connection from %s: no answer to PING", self._peer)
            self.abort()
            return
        # Every connected client is pinged, whatever version it claims: a client that cannot
        # answer a PING cannot hold a connection for ever either.
        if not self._active:
            self._send([_PING])
            self._awaiting_pong = True
        self._active = False

    # -- commands ------------------------------------------------------------------------

    def _dispatch(self, command: Command, out: list[bytes]) -> None:
        if isinstance(command, UnknownCommand):
            if not self._connected:
                self._refuse_before_connect(f"command type {command.type_number}")
                return
            out.append(
                codec.error(
                    0,
                    _NOT_ALLOWED,
                    f"command type {command.type_number} is not supported by the lookup gateway",
                )
            )
            return
        kind = command.type
        if not self._connected:
            if kind == BaseCommand.CONNECT:
                self._handshake(command, out)
            else:
                self._refuse_before_connect(BaseCommand.Type.Name(kind))
            return
        if kind in _CLIENT_REQUESTS:
            identity = self._identity
            if identity is not None and identity.expired(self._guard.authenticator.clock()):
                log.info(
                    "closing connection from %s: the credentials of role %r expired",
                    self._peer,
                    identity.role,
                )
                self._closing = True
            elif kind == BaseCommand.LOOKUP:
                self._lookup(command, out)
            elif kind == BaseCommand.PARTITIONED_METADATA:
                self._partitioned_metadata(command, out)
            else:
                self._namespace_or_schema(command, out)
        elif kind == BaseCommand.PING:
            out.append(_PONG)
        elif kind == BaseCommand.PONG:
            pass  # any frame counts as a sign of life (data_received)
        elif kind == BaseCommand.CONNECT:
            log.info("closing connection from %s: a second CONNECT", self._peer)
            self._closing = True
        else:
            name = BaseCommand.Type.Name(kind)
            out.append(
                codec.error(
                    _request_id_of(command),
                    _NOT_ALLOWED,
                    f"{name} is not supported by the lookup gateway (lookups only)",
                )
            )

    def _refuse_before_connect(self, what: str) -> None:
        log.info("closing connection from %s: %s before CONNECT", self._peer, what)
        self._closing = True

    def _handshake(self, command: BaseCommand, out: list[bytes]) -> None:
        if command.connect.proxy_to_broker_url:
            # A client told to proxy through its service URL names the broker here and expects
            # its producers and consumers to be relayed; the gateway answers lookups only, so it
            # says so at once instead of accepting a connection that would refuse them.
            log.info("closing connection from %s: CONNECT asks to be proxied", self._peer)
            out.append(codec.error(_NO_REQUEST, _NOT_ALLOWED, PROXY_REFUSAL))
            self._closing = True
            return
        if self._guard.required and not self._authenticate(command, out):
            return
        # A client's version is any int32: answer within what this server speaks.
        version = max(0, min(command.connect.protocol_version, PROTOCOL_VERSION))
        size = self._settings.announced_message_size
        out.append(codec.connected(SERVER_VERSION, version, size, _FEATURES))
        self._connected = True
        if self._identity is None and self._role is None and self._settings.memoise_lookups:
            self._memo = self._server.memo.entries_for(self._socket_choice)
        self._decoder.max_frame_size = self._settings.max_frame_size
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
            self._handshake_timer = None

    def _authenticate(self, command: BaseCommand, out: list[bytes]) -> bool:
        """Check CONNECT's credentials; on failure queue ERROR and ask for the close."""
        connect = command.connect
        ssl_object = self._transport.get_extra_info("ssl_object") if self._transport else None
        credentials = Credentials(
            method=connect.auth_method_name or None,
            data=connect.auth_data if connect.HasField("auth_data") else None,
            peer_certificate=verified_peer_certificate(ssl_object),
        )
        try:
            identity = self._guard.authenticate(credentials)
        except AuthenticationFailed as failed:
            log.info(
                "closing connection from %s on %s: authentication failed: %s",
                self._peer,
                self._server.url,
                failed.reason,
            )
            message = f"Unable to authenticate: {failed.reason}"
            out.append(codec.error(_NO_REQUEST, _AUTHENTICATION_ERROR, message))
            self._closing = True
            return False
        if identity is not None:
            self._identity = identity
            self._role = identity.role
            data = connect.auth_data.decode(errors="replace") if connect.auth_data else None
            self._principal = Principal(identity.role, identity.method, data)
        return True

    def _handshake_expired(self) -> None:
        self._handshake_timer = None
        if not self._connected and not self._closing:
            self._service.metrics.refused(self._listener, "handshake-timeout")
            log.info(
                "closing connection from %s: no CONNECT within %ss",
                self._peer,
                self._settings.handshake_timeout,
            )
            self.abort()

    def _lookup(self, command: BaseCommand, out: list[bytes]) -> None:
        body = command.lookupTopic
        # "" when absent; blank means absent (the C++ and Go clients always send the field).
        name = body.advertised_listener_name
        if name:
            choice = self._service.choose(explicit=name, socket_listener=self._listener)
            refused = self._guard.refusal(choice)
            if refused is not None:
                self._service.log_refused("binary", self.origin, choice, body.topic, refused)
                out.append(_lookup_failed(body.request_id, refused))
                return
        else:
            choice = self._socket_choice
        self._answer(
            self._service.lookup(body.topic, choice, "binary", role=self._role, client=self.origin),
            body.request_id,
            self._lookup_answer,
            _lookup_failed,
            out,
        )

    def _lookup_answer(self, request_id: int, answer: LookupAnswer) -> bytes:
        urls = answer.urls
        if urls.service_url is None and urls.service_url_tls is None:
            return codec.lookup_response(
                request_id,
                response=LookupType.Failed,
                error=_SERVICE_NOT_READY,
                message=(
                    f"the broker {answer.broker_id} advertises no pulsar:// or pulsar+ssl:// "
                    f"URL for the {answer.listener.name} listener"
                ),
            )
        if self._memo_key is not None and self._memo is not None:
            self._remember(self._memo, self._memo_key, answer)
        return self._answers.frame(request_id, answer)

    def _memo_usable(self) -> bool:
        """Whether memoised answers are what the full path would give for this batch of
        frames: the view they were made from is current (checked here, entries dropped
        otherwise; it changes only between batches, by ZooKeeper's callbacks), and answered
        lookups are not logged (DEBUG). Each hit also checks that lookups are not at
        maxConcurrentLookupRequest (the full path would refuse it)."""
        view = self._service.source.view
        self._server.memo.check_view(view, view.version)
        return not service_log.isEnabledFor(logging.DEBUG)

    def _remember(self, memo: _Memo, key: bytes, answer: LookupAnswer) -> None:
        """Memoise the answer the full path just gave (synchronously, from the current view)
        to the request whose key is `key`, with the metric it counts in."""
        view = self._service.source.view
        self._server.memo.check_view(view, view.version)
        tally = self._service.tally_for(answer.listener, "binary")
        connect = answer.response is ResponseKind.CONNECT
        self._server.memo.remember(memo, key, (self._answers.template(answer), (tally, connect)))

    def _partitioned_metadata(self, command: BaseCommand, out: list[bytes]) -> None:
        body = command.partitionMetadata
        self._answer(
            self._partitions_frame(
                body.topic, body.metadata_auto_creation_enabled, body.request_id
            ),
            body.request_id,
            _as_is,
            _partitions_failed,
            out,
        )

    async def _partitions_frame(self, topic: str, creation: bool, request_id: int) -> bytes:
        """PARTITIONED_METADATA_RESPONSE: the count, TopicNotFound, or a broker's answer (it
        creates a partitioned topic; it knows whether a non-persistent topic exists)."""
        decision = await self._service.partition_metadata(
            topic, client_creation=creation, role=self._role
        )
        if isinstance(decision, Partitions):
            return codec.partitioned_metadata_response(request_id, decision.count)
        name = TopicName.parse(topic)
        if isinstance(decision, TopicNotFound):
            return _partitions_failed(request_id, topic_not_found(name))
        answer = await self._link().partitioned_metadata(
            name.full, auto_creation=decision.auto_creation, principal=self._principal
        )
        return relay(answer, request_id)

    def _namespace_or_schema(self, command: BaseCommand, out: list[bytes]) -> None:
        if command.type == BaseCommand.GET_TOPICS_OF_NAMESPACE:
            body = command.getTopicsOfNamespace
            self._answer(self._topics_frame(body), body.request_id, _as_is, _error_failed, out)
        else:
            request = command.getSchema
            self._answer(
                self._schema_frame(request), request.request_id, _as_is, _schema_failed, out
            )

    async def _topics_frame(self, body: CommandGetTopicsOfNamespace) -> bytes:
        """The persistent topics from the metadata store; other modes (non-persistent topics
        exist only in brokers' memory) from a broker."""
        pattern = body.topics_pattern if body.HasField("topics_pattern") else None
        client_hash = body.topics_hash if body.HasField("topics_hash") else None
        if body.mode == CommandGetTopicsOfNamespace.PERSISTENT:
            listing = await self._service.topics_of_namespace(
                body.namespace, pattern=pattern, client_hash=client_hash, role=self._role
            )
            return codec.get_topics_of_namespace_response(
                body.request_id,
                listing.topics,
                filtered=listing.filtered,
                topics_hash=listing.topics_hash,
                changed=listing.changed,
            )
        namespace = await self._service.namespace_access(body.namespace, role=self._role)
        answer = await self._link().topics_of_namespace(
            str(namespace),
            body.mode,
            topics_pattern=pattern,
            topics_hash=client_hash,
            principal=self._principal,
        )
        return relay(answer, body.request_id)

    async def _schema_frame(self, body: CommandGetSchema) -> bytes:
        """A broker's GET_SCHEMA_RESPONSE (schemas live in BookKeeper)."""
        topic = TopicName.parse(body.topic)
        if self._role is not None:
            await self._service.authorize(topic, self._role)
        version = body.schema_version if body.HasField("schema_version") else None
        answer = await self._link().schema(topic.full, version, principal=self._principal)
        return relay(answer, body.request_id)

    def _link(self) -> BrokerLink:
        link = self._server.broker_link
        if link is None:
            raise LookupFailure(
                FailureKind.BROKER_UNAVAILABLE, "this request needs a broker; none is configured"
            )
        return link

    # -- running requests ----------------------------------------------------------------

    def _answer(
        self,
        request: Coroutine[Any, Any, T],
        request_id: int,
        on_result: Callable[[int, T], bytes],
        on_error: Callable[[int, Exception], bytes],
        out: list[bytes],
    ) -> None:
        """Run a request's coroutine up to its first suspension right here (a snapshot lookup
        never suspends, and so costs no task); if it suspends, a task finishes it and writes
        the answer whenever it is ready, so later requests are not held up.

        This is what Python 3.12's eager tasks do; 3.11 has no such thing.
        """
        try:
            suspended_on = request.send(None)
        except StopIteration as done:
            out.append(_reply(request_id, done.value, on_result, on_error))
            return
        except Exception as exc:
            out.append(_failure(request_id, exc, on_error))
            return
        task = self._loop.create_task(
            self._finish(_resume(request, suspended_on), request_id, on_result, on_error)
        )
        self.tasks.add(task)
        task.add_done_callback(self._task_done)
        if len(self.tasks) >= MAX_IN_FLIGHT_PER_CONNECTION:
            self._update_reading()  # read no more requests until some are answered

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if len(self.tasks) == MAX_IN_FLIGHT_PER_CONNECTION - 1:
            self._update_reading()

    async def _finish(
        self,
        request: Coroutine[Any, Any, T],
        request_id: int,
        on_result: Callable[[int, T], bytes],
        on_error: Callable[[int, Exception], bytes],
    ) -> None:
        try:
            result = await request
        except Exception as exc:
            frame = _failure(request_id, exc, on_error)
        else:
            frame = _reply(request_id, result, on_result, on_error)
        self._send([frame])

    def _send(self, frames: list[bytes]) -> None:
        if frames and self._transport is not None and not self._transport.is_closing():
            self._transport.write(frames[0] if len(frames) == 1 else b"".join(frames))

    def _update_reading(self) -> None:
        busy = len(self.tasks) >= MAX_IN_FLIGHT_PER_CONNECTION
        want = not (self._write_paused or self._stopped or busy)
        if want == self._reading or self._transport is None or self._transport.is_closing():
            return
        self._reading = want
        if want:
            self._transport.resume_reading()
        else:
            self._transport.pause_reading()


@types.coroutine
def _resume(coro: Coroutine[Any, Any, T], suspended_on: Any) -> Generator[Any, Any, T]:
    """Continue, inside a task, a coroutine that was stepped by hand until it yielded
    ``suspended_on``: hand that to the task, then pass every value and exception through
    (``yield from`` semantics)."""
    yielded = suspended_on
    while True:
        try:
            sent = yield yielded
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:
            try:
                yielded = coro.throw(exc)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
        else:
            try:
                yielded = coro.send(sent)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]


def _reply(
    request_id: int,
    result: T,
    on_result: Callable[[int, T], bytes],
    on_error: Callable[[int, Exception], bytes],
) -> bytes:
    try:
        return on_result(request_id, result)
    except Exception as exc:
        return _failure(request_id, exc, on_error)


def _failure(request_id: int, exc: Exception, on_error: Callable[[int, Exception], bytes]) -> bytes:
    if not isinstance(exc, LookupFailure):
        log.error("request %d failed with an internal error", request_id, exc_info=exc)
    return on_error(request_id, exc)


def _error_of(exc: Exception) -> tuple[codec.ServerError, str]:
    """The one place a lookup failure becomes a binary ServerError and message."""
    if isinstance(exc, LookupFailure):
        return _WIRE_ERROR[exc.code], exc.message
    return _UNKNOWN_ERROR, f"internal error: {type(exc).__name__}"


def _lookup_failed(request_id: int, exc: Exception) -> bytes:
    error, message = _error_of(exc)
    return codec.lookup_response(
        request_id, response=LookupType.Failed, error=error, message=message
    )


def _as_is(request_id: int, frame: bytes) -> bytes:
    return frame


def _error_failed(request_id: int, exc: Exception) -> bytes:
    error, message = _error_of(exc)
    return codec.error(request_id, error, message)


def _schema_failed(request_id: int, exc: Exception) -> bytes:
    error, message = _error_of(exc)
    return codec.get_schema_response(request_id, error=error, message=message)


def _partitions_failed(request_id: int, exc: Exception) -> bytes:
    error, message = _error_of(exc)
    return codec.partitioned_metadata_response(request_id, error=error, message=message)


def _request_id_of(command: BaseCommand) -> int:
    """The request id of a command we refuse, 0 if it has none we can read."""
    body_field = _BODY_FIELD.get(command.type)
    if body_field is not None:
        body = getattr(command, body_field)
        if "request_id" in body.DESCRIPTOR.fields_by_name and body.HasField("request_id"):
            return int(body.request_id)
        return 0
    number = _FOREIGN_REQUEST_ID_FIELD.get(command.type)
    if number is None:
        return 0
    fields = UnknownFieldSet(command)
    for index in range(len(fields)):
        field = fields[index]
        if field.field_number == command.type and field.wire_type == 2:
            found = wire.last_varint(bytes(field.data), number)
            if found is not None:
                return found
    return 0
