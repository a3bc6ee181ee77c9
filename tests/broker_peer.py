"""Test peers that speak the Pulsar binary protocol with our codec. Never part of the product.

- :class:`BrokerPeer` plays the first steps of a Pulsar broker on one host:port, so that an
  end-to-end test can see WHERE a real client went after a lookup and what it asked for there:
  it answers CONNECT, answers LOOKUP for any topic with Connect to itself (so a client redirected
  to it can finish), PARTITIONED_METADATA (its `partitions`, else 0; a missing topic asked with
  auto-creation is "created" with `create_partitions` partitions when that is set, and
  `on_create` is told, e.g. to write the znode a broker would write), GET_TOPICS_OF_NAMESPACE
  (its `topics`), GET_SCHEMA (its `schemas`, else TopicNotFound), PRODUCER with
  PRODUCER_SUCCESS, SUBSCRIBE and the other consumer commands with SUCCESS, and records every
  command (and every CONNECT body). With `silent` it answers nothing after CONNECTED.
  Playing the load manager: with `redirect_to`, a non-authoritative LOOKUP is answered with an
  authoritative Redirect there (as the leader sends a client to the broker it picked); with
  `take_ownership` (e.g. :func:`zookeeper_owner`), a LOOKUP it answers with Connect first has
  the ownership node written, as a broker that takes a bundle does.
- :class:`RawClient` is a minimal client for driving a server frame by frame.

Our .proto has no CommandProducer / CommandProducerSuccess (a gateway never needs them), so the
peer reads and writes those bodies field by field with listeners.protocol.wire.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.unknown_fields import UnknownFieldSet
from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError

from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import (
    BaseCommand,
    Command,
    FeatureFlags,
    FrameDecoder,
    Schema,
    UnknownCommand,
)
from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import CommandLookupTopicResponse
from pulsar_lookup_gateway.listeners.protocol.wire import bytes_field, read_fields, varint_field
from pulsar_lookup_gateway.lookup.bundles import NamespaceBundles, topic_hash
from pulsar_lookup_gateway.lookup.model import (
    decode_json,
    local_policies_path,
    ownership_path,
    parse_policies,
    policies_path,
)
from pulsar_lookup_gateway.lookup.topics import TopicName

PEER_PROTOCOL_VERSION = 21
DEFAULT_WAIT = 10.0


def frame_of(body: bytes) -> bytes:
    return struct.pack(">II", 4 + len(body), len(body)) + body


def raw_command(type_number: int, body: bytes | None = None) -> bytes:
    """A framed BaseCommand of any type number, with its body (field number = type number)
    given as serialized bytes."""
    command = varint_field(1, type_number)
    if body is not None:
        command += bytes_field(type_number, body)
    return frame_of(command)


def foreign_body(command: BaseCommand) -> bytes:
    """The serialized body of a command our .proto has no field for (b"" if absent)."""
    fields = UnknownFieldSet(command)
    chunks = [
        bytes(fields[i].data)
        for i in range(len(fields))
        if fields[i].field_number == command.type and fields[i].wire_type == 2
    ]
    return chunks[-1] if chunks else b""


def producer_command(topic: str, producer_id: int, request_id: int) -> bytes:
    """PRODUCER (CommandProducer: topic=1, producer_id=2, request_id=3)."""
    body = (
        bytes_field(1, topic.encode()) + varint_field(2, producer_id) + varint_field(3, request_id)
    )
    return raw_command(BaseCommand.PRODUCER, body)


def producer_success(request_id: int, producer_name: str) -> bytes:
    """PRODUCER_SUCCESS (CommandProducerSuccess: request_id=1, producer_name=2)."""
    body = varint_field(1, request_id) + bytes_field(2, producer_name.encode())
    return raw_command(BaseCommand.PRODUCER_SUCCESS, body)


def success(request_id: int) -> bytes:
    command = BaseCommand(type=BaseCommand.SUCCESS)
    command.success.request_id = request_id
    return codec.encode_command(command)


# --- the broker test peer ----------------------------------------------------------------------


@dataclass(frozen=True)
class SeenCommand:
    type_name: str  # BaseCommand.Type name, or "#<n>" for a number our enum lacks
    topic: str | None = None
    request_id: int | None = None
    listener_name: str | None = None  # LOOKUP's advertised_listener_name
    authoritative: bool | None = None
    creation: bool | None = None  # PARTITIONED_METADATA's metadata_auto_creation_enabled
    # GET_TOPICS_OF_NAMESPACE's (PIP-452), LOOKUP's (PIP-368)
    properties: tuple[tuple[str, str], ...] = ()


# Commands carrying a request id (field number) that the peer answers with SUCCESS.
_ANSWERED_WITH_SUCCESS = {
    BaseCommand.CLOSE_PRODUCER: 2,
    BaseCommand.CLOSE_CONSUMER: 2,
    BaseCommand.SUBSCRIBE: 5,
    BaseCommand.UNSUBSCRIBE: 2,
}


@dataclass
class BrokerPeer:
    """A TEST PEER playing a Pulsar broker's handshake on ``host:port`` (port 0: any)."""

    host: str = "127.0.0.1"
    port: int = 0
    name: str = "broker-peer"
    ssl_context: ssl.SSLContext | None = None  # set: the peer speaks pulsar+ssl://
    seen: list[SeenCommand] = field(default_factory=list)
    connections: int = 0
    # What it answers as a broker (see the module docstring).
    partitions: dict[str, int] = field(default_factory=dict)
    create_partitions: int = 0
    on_create: Callable[[str, int], None] | None = None
    topics: dict[str, list[str]] = field(default_factory=dict)  # namespace -> full names
    schemas: dict[str, Schema] = field(default_factory=dict)  # full topic name -> schema
    schema_version: int = 0
    silent: bool = False
    # Playing the load manager (see the module docstring).
    redirect_to: str | None = None
    take_ownership: Callable[[str], Awaitable[None]] | None = None
    # Playing a broker with one bind address (tests/one_bind_brokers.py): the LOOKUP_RESPONSE
    # frame for a LOOKUP (given with its request id), made by the test's cluster.
    answer_lookup: Callable[[Any], bytes] | None = None
    connects: list[Any] = field(default_factory=list)  # CommandConnect bodies, in order
    # A schema of a topic named here is answered only once its event is set (a broker slow to
    # answer: the test's burst is all in the gateway while the first answer is outstanding).
    held_schemas: dict[str, asyncio.Event] = field(default_factory=dict)
    _tasks: set[asyncio.Future[None]] = field(default_factory=set)
    _server: asyncio.Server | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _transports: set[asyncio.Transport] = field(default_factory=set)

    @property
    def url(self) -> str:
        scheme = "pulsar+ssl" if self.ssl_context is not None else "pulsar"
        return f"{scheme}://{self.host}:{self.port}"

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _PeerConnection(self), self.host, self.port, ssl=self.ssl_context
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for transport in list(self._transports):
                transport.abort()
            for task in list(self._tasks):
                task.cancel()
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> BrokerPeer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def types_seen(self) -> list[str]:
        return [command.type_name for command in self.seen]

    def topics_seen(self, type_name: str) -> list[str]:
        """The topics (or namespaces) of the commands of one type, in order."""
        return [c.topic for c in self.seen if c.type_name == type_name and c.topic is not None]

    def producer_topics(self) -> list[str]:
        return [c.topic for c in self.seen if c.type_name == "PRODUCER" and c.topic is not None]

    async def wait_for(self, predicate: Callable[[BrokerPeer], bool], timeout: float) -> bool:
        """Wait (bounded) until ``predicate(self)`` holds; False if it never did."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate(self):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)
        return True

    def _takes_bundle(self, command: Command) -> bool:
        """Whether `command` is a LOOKUP this peer answers by taking the bundle first."""
        return (
            self.take_ownership is not None
            and isinstance(command, BaseCommand)
            and command.type == BaseCommand.LOOKUP
            and not (self.redirect_to is not None and not command.lookupTopic.authoritative)
        )

    def _record(self, command: SeenCommand) -> None:
        self.seen.append(command)
        self._changed.set()

    def _answer(self, command: Command) -> tuple[list[bytes], bool]:
        """(frames to send, close afterwards)."""
        if isinstance(command, UnknownCommand):
            self._record(SeenCommand(f"#{command.type_number}"))
            return [], False
        kind = command.type
        name = BaseCommand.Type.Name(kind)
        if kind == BaseCommand.CONNECT:
            self.connects.append(command.connect)
            self._record(SeenCommand(name))
            version = min(command.connect.protocol_version, PEER_PROTOCOL_VERSION)
            flags = FeatureFlags(supports_get_partitioned_metadata_without_auto_creation=True)
            return [codec.connected(self.name, version, 5 * 1024 * 1024, flags)], False
        if self.silent and kind not in (BaseCommand.PING, BaseCommand.PONG):
            self._record(SeenCommand(name))
            return [], False
        if kind == BaseCommand.GET_TOPICS_OF_NAMESPACE:
            listing = command.getTopicsOfNamespace
            pairs = tuple((item.key, item.value) for item in listing.properties)
            self._record(SeenCommand(name, listing.namespace, listing.request_id, properties=pairs))
            topics = self.topics.get(listing.namespace, [])
            return [codec.get_topics_of_namespace_response(listing.request_id, topics)], False
        if kind == BaseCommand.GET_SCHEMA:
            request = command.getSchema
            self._record(SeenCommand(name, request.topic, request.request_id))
            schema = self.schemas.get(request.topic)
            if schema is None:
                reply = codec.get_schema_response(
                    request.request_id,
                    error=codec.ServerError.TopicNotFound,
                    message=f"Topic not found or no-schema {request.topic}",
                )
            else:
                reply = codec.get_schema_response(
                    request.request_id,
                    schema=schema,
                    schema_version=self.schema_version.to_bytes(8, "big"),
                )
            return [reply], False
        if kind == BaseCommand.LOOKUP:
            lookup = command.lookupTopic
            self._record(
                SeenCommand(
                    name,
                    lookup.topic,
                    lookup.request_id,
                    lookup.advertised_listener_name,
                    lookup.authoritative,
                    properties=tuple((item.key, item.value) for item in lookup.properties),
                )
            )
            if self.answer_lookup is not None:
                return [self.answer_lookup(lookup)], False
            if self.redirect_to is not None and not lookup.authoritative:
                reply = codec.lookup_response(
                    lookup.request_id,
                    response=CommandLookupTopicResponse.Redirect,
                    broker_url=self.redirect_to,
                    authoritative=True,
                )
                return [reply], False
            tls = self.ssl_context is not None
            reply = codec.lookup_response(
                lookup.request_id,
                response=CommandLookupTopicResponse.Connect,
                broker_url=None if tls else self.url,
                broker_url_tls=self.url if tls else None,
                authoritative=True,
            )
            return [reply], False
        if kind == BaseCommand.PARTITIONED_METADATA:
            meta = command.partitionMetadata
            self._record(
                SeenCommand(
                    name, meta.topic, meta.request_id, creation=meta.metadata_auto_creation_enabled
                )
            )
            count = self.partitions.get(meta.topic, 0)
            if not count and meta.metadata_auto_creation_enabled and self.create_partitions:
                count = self.partitions[meta.topic] = self.create_partitions
                if self.on_create is not None:
                    self.on_create(meta.topic, count)
            return [codec.partitioned_metadata_response(meta.request_id, count)], False
        if kind == BaseCommand.PING:
            return [codec.pong()], False
        if kind == BaseCommand.PONG:
            return [], False
        try:
            fields = read_fields(foreign_body(command))
        except ValueError:
            fields = {}
        if kind == BaseCommand.PRODUCER:
            topic = _first_bytes(fields, 1)
            request_id = _first_int(fields, 3)
            self._record(SeenCommand(name, topic, request_id))
            if request_id is None:
                return [], True
            return [producer_success(request_id, f"{self.name}-producer-{request_id}")], False
        number = _ANSWERED_WITH_SUCCESS.get(kind)
        request_id = _first_int(fields, number) if number is not None else None
        self._record(SeenCommand(name, _first_bytes(fields, 1), request_id))
        return ([success(request_id)] if request_id is not None else []), False


def zookeeper_owner(
    client: KazooClient, ownership: dict[str, Any]
) -> Callable[[str], Awaitable[None]]:
    """What a broker does when it takes a bundle, as a BrokerPeer's `take_ownership`: for the
    topic of a LOOKUP, find its bundle from the namespace's bundle data in ZooKeeper (the local
    policies, then the policies, else the whole range) and create the ephemeral ownership node
    `/namespace/<tenant>/<ns>/<bundle>` holding `ownership` (NamespaceEphemeralData), unless
    the bundle has an owner already. `client`'s session owns the node."""

    async def take(topic: str) -> None:
        await asyncio.to_thread(_take_bundle, client, topic, ownership)

    return take


def _take_bundle(client: KazooClient, topic: str, ownership: dict[str, Any]) -> None:
    name = TopicName.parse(topic)
    namespace = name.namespace_name
    bundles = NamespaceBundles.full()
    for path in (local_policies_path(namespace), policies_path(namespace)):
        if client.exists(path) is None:
            continue
        data, _ = client.get(path)
        policies = parse_policies(path, decode_json(path, data) or {})
        if policies.bundles is not None:
            bundles = policies.bundles.to_bundles()
        break
    bundle = bundles.find(topic_hash(name.full))
    with contextlib.suppress(NodeExistsError):
        client.create(
            ownership_path(namespace, bundle.name),
            json.dumps(ownership).encode(),
            ephemeral=True,
            makepath=True,
        )


def _first_int(fields: dict[int, list[int | bytes]], number: int) -> int | None:
    for value in fields.get(number, []):
        if isinstance(value, int):
            return value
    return None


def _first_bytes(fields: dict[int, list[int | bytes]], number: int) -> str | None:
    for value in fields.get(number, []):
        if isinstance(value, bytes):
            return value.decode(errors="replace")
    return None


class _PeerConnection(asyncio.Protocol):
    def __init__(self, peer: BrokerPeer) -> None:
        self._peer = peer
        self._decoder = FrameDecoder()
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._peer.connections += 1
        self._peer._transports.add(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None:
            self._peer._transports.discard(self._transport)

    def _send_once_owned(self, command: BaseCommand, frames: list[bytes]) -> None:
        """Take the bundle (write its ownership node), then send the Connect; a failure to
        take it is answered as a broker answers it (ServiceNotReady)."""
        peer, transport = self._peer, self._transport
        assert peer.take_ownership is not None and transport is not None
        lookup = command.lookupTopic

        def reply(task: asyncio.Future[None]) -> None:
            peer._tasks.discard(task)
            if task.cancelled() or transport.is_closing():
                return
            if task.exception() is None:
                out = frames
            else:
                out = [
                    codec.lookup_response(
                        lookup.request_id,
                        response=CommandLookupTopicResponse.Failed,
                        error=codec.ServerError.ServiceNotReady,
                        message=f"Failed to acquire ownership: {task.exception()}",
                    )
                ]
            for frame in out:
                transport.write(frame)

        task = asyncio.ensure_future(peer.take_ownership(lookup.topic))
        peer._tasks.add(task)
        task.add_done_callback(reply)

    def _held_until(self, command: object) -> asyncio.Event | None:
        """The event a GET_SCHEMA's answer waits for (None: answered at once)."""
        if not isinstance(command, BaseCommand) or command.type != BaseCommand.GET_SCHEMA:
            return None
        held = self._peer.held_schemas.get(command.getSchema.topic)
        return None if held is None or held.is_set() else held

    def _send_when(self, held: asyncio.Event, frames: list[bytes]) -> None:
        peer, transport = self._peer, self._transport
        assert transport is not None

        async def send() -> None:
            await held.wait()
            if not transport.is_closing():
                for frame in frames:
                    transport.write(frame)

        task = asyncio.ensure_future(send())
        peer._tasks.add(task)
        task.add_done_callback(peer._tasks.discard)

    def data_received(self, data: bytes) -> None:
        assert self._transport is not None
        try:
            self._decoder.feed(data)
            while (command := self._decoder.next_command()) is not None:
                frames, close = self._peer._answer(command)
                if (
                    frames
                    and isinstance(command, BaseCommand)
                    and self._peer._takes_bundle(command)
                ):
                    self._send_once_owned(command, frames)
                    continue
                if (held := self._held_until(command)) is not None:
                    self._send_when(held, frames)
                    continue
                for frame in frames:
                    self._transport.write(frame)
                if close:
                    self._transport.close()
                    return
        except codec.RemoteProtocolError:
            self._transport.abort()


# --- a raw client --------------------------------------------------------------------------


class RawClient:
    """Talks to a binary server frame by frame. Every read is bounded by a timeout."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder()
        self.answer_pings = False  # True: receive() answers PING with PONG and skips it

    @classmethod
    async def open(cls, host: str, port: int, *, timeout: float = DEFAULT_WAIT) -> RawClient:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        return cls(reader, writer)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError, asyncio.TimeoutError):
            await asyncio.wait_for(self.writer.wait_closed(), DEFAULT_WAIT)

    async def __aenter__(self) -> RawClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def receive(self, timeout: float = DEFAULT_WAIT) -> Command | None:
        """The next command; None when the server closed the connection."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            command = self.decoder.next_command()
            is_ping = isinstance(command, BaseCommand) and command.type == BaseCommand.PING
            if is_ping and self.answer_pings:
                self.send(codec.pong())
                continue
            if command is not None:
                return command
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError("no frame from the server in time")
            try:
                data = await asyncio.wait_for(self.reader.read(65536), remaining)
            except (ConnectionResetError, BrokenPipeError):  # (closed with our write pending)
                return None
            if not data:
                return None
            self.decoder.feed(data)

    async def expect(self, timeout: float = DEFAULT_WAIT) -> BaseCommand:
        command = await self.receive(timeout)
        assert isinstance(command, BaseCommand), f"expected a command, got {command!r}"
        return command

    async def closed(self, timeout: float = DEFAULT_WAIT) -> bool:
        """True once the server has closed the connection (frames before that are ignored)."""
        try:
            while await self.receive(timeout) is not None:
                pass
        except TimeoutError:
            return False
        return True

    async def handshake(
        self, protocol_version: int = PEER_PROTOCOL_VERSION, timeout: float = DEFAULT_WAIT
    ) -> BaseCommand:
        self.send(codec.connect("raw-test-client", protocol_version))
        command = await self.expect(timeout)
        assert command.type == BaseCommand.CONNECTED, command
        return command

    async def lookup(
        self,
        topic: str,
        request_id: int = 1,
        listener: str | None = None,
        timeout: float = DEFAULT_WAIT,
    ) -> BaseCommand:
        self.send(codec.lookup(topic, request_id, advertised_listener_name=listener))
        command = await self.expect(timeout)
        assert command.type == BaseCommand.LOOKUP_RESPONSE, command
        assert command.lookupTopicResponse.request_id == request_id
        return command
