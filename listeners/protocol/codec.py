"""Sans-IO codec for the part of the Pulsar binary protocol a lookup gateway speaks.

Bytes in, commands out (:class:`FrameDecoder`); commands in, bytes out (:func:`encode_command` and
the small builders below). No sockets, no event loop: the asyncio server is a thin shell around
this module.

A frame is ``uint32 totalSize`` (big-endian, = 4 + cmdSize + payload size), ``uint32 cmdSize``,
then ``cmdSize`` bytes of a serialized ``BaseCommand``. Payload frames (SEND/MESSAGE) are never
needed by a gateway: payload bytes after the command are skipped, but still count towards the
frame size limit.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet

from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import (
    BaseCommand,
    CommandGetTopicsOfNamespace,
    CommandLookupTopicResponse,
    CommandPartitionedTopicMetadataResponse,
    FeatureFlags,
    KeyValue,
    Schema,
    ServerError,
)

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "BaseCommand",
    "Command",
    "FeatureFlags",
    "FrameDecoder",
    "LocalProtocolError",
    "LookupType",
    "RemoteProtocolError",
    "Schema",
    "ServerError",
    "UnknownCommand",
    "auth_response",
    "connect",
    "connected",
    "decode_command",
    "encode_command",
    "error",
    "get_schema",
    "get_schema_response",
    "get_topics_of_namespace",
    "get_topics_of_namespace_response",
    "lookup",
    "lookup_response",
    "partitioned_metadata",
    "partitioned_metadata_response",
    "ping",
    "pong",
    "schema",
]

#: Pulsar's broker limit: maxMessageSize (5 MiB) plus 10 KiB of frame padding. Like Netty's
#: LengthFieldBasedFrameDecoder in the broker, the limit covers the whole frame including the
#: 4-byte totalSize field.
DEFAULT_MAX_FRAME_SIZE = 5 * 1024 * 1024 + 10 * 1024

_HEADER = struct.Struct(">II")  # totalSize, cmdSize
_SIZE_FIELD = 4
_MIN_FRAME_SIZE = _HEADER.size

LookupType: TypeAlias = CommandLookupTopicResponse.LookupType

# In BaseCommand the body of command type N is field number N.
_BODY_FIELD: dict[int, str] = {
    field.number: field.name
    for field in BaseCommand.DESCRIPTOR.fields
    if field.type == FieldDescriptor.TYPE_MESSAGE
}


#: The request id of an ERROR that answers no request: Pulsar's -1 as a uint64.
NO_REQUEST = 2**64 - 1


def request_id_of(command: BaseCommand) -> int | None:
    """The request id in a command's body (the field numbered as its type); None where it has
    no body of ours, or a body without one."""
    field = _BODY_FIELD.get(command.type)
    if field is None or not command.HasField(field):
        return None
    body = getattr(command, field)
    if "request_id" in body.DESCRIPTOR.fields_by_name and body.HasField("request_id"):
        return int(body.request_id)
    return None


class RemoteProtocolError(Exception):
    """The peer sent bytes that are not a valid frame of this protocol; close the connection."""


class LocalProtocolError(Exception):
    """We were asked to send something that is not a valid frame (a bug on our side)."""


@dataclass(frozen=True, slots=True)
class UnknownCommand:
    """A well-framed command whose type number is not in our ``BaseCommand.Type``.

    The connection is still usable: a server can answer ERROR ``NotAllowedError`` and carry on.
    ``type_number`` is the raw varint the peer sent.
    """

    type_number: int


Command: TypeAlias = BaseCommand | UnknownCommand


class FrameDecoder:
    """Incremental frame decoder: :meth:`feed` bytes, then call :meth:`next_command` until None.

    Frame sizes are checked as soon as the 4-byte (and 8-byte) header is available, so an
    oversized frame is refused before its body is buffered. After a :class:`RemoteProtocolError`
    the decoder is broken for good: every later call raises again.
    """

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size < _MIN_FRAME_SIZE:
            raise ValueError(f"max_frame_size must be at least {_MIN_FRAME_SIZE}")
        self._max_frame_size = max_frame_size
        self._buf = bytearray()
        self._pos = 0  # start of the first unconsumed byte in _buf
        self._failure: RemoteProtocolError | None = None

    @property
    def max_frame_size(self) -> int:
        return self._max_frame_size

    @max_frame_size.setter
    def max_frame_size(self, size: int) -> None:
        """Change the cap for frames whose header has not been read yet (a server allows a
        stranger small frames only, and raises the cap once the client authenticated)."""
        if size < _MIN_FRAME_SIZE:
            raise ValueError(f"max_frame_size must be at least {_MIN_FRAME_SIZE}")
        self._max_frame_size = size

    @property
    def buffered_size(self) -> int:
        """Bytes received that do not yet form a complete frame (non-zero at EOF = truncated)."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes) -> None:
        self._check_usable()
        if self._pos:
            # Drop consumed frames once per feed, not once per frame: linear in the bytes fed.
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def next_command(self) -> Command | None:
        """The next complete command, or None if more bytes are needed."""
        self._check_usable()
        try:
            body = self._next_body()
            return None if body is None else decode_command(body)
        except RemoteProtocolError as exc:
            self._fail(exc)
            raise

    def next_body(self) -> bytes | None:
        """The serialized BaseCommand of the next complete frame, not decoded (for a caller
        that recognises some commands by their bytes; `decode_command` decodes the others), or
        None if more bytes are needed. Frame sizes are checked as for `next_command`."""
        self._check_usable()
        try:
            return self._next_body()
        except RemoteProtocolError as exc:
            self._fail(exc)
            raise

    def bodies(self) -> list[bytes]:
        """The bodies of every complete frame buffered, as `next_body` would give them one by
        one, in one pass (for a peer that pipelines many small frames). When a frame is
        malformed, the bodies before it are returned and the error is raised now if there are
        none, else by the next call."""
        self._check_usable()
        buf, pos, end = self._buf, self._pos, len(self._buf)
        limit, unpack = self._max_frame_size, _HEADER.unpack_from
        found: list[bytes] = []
        with memoryview(buf) as view:
            while end - pos >= _MIN_FRAME_SIZE:
                total_size, cmd_size = unpack(buf, pos)
                if not (_SIZE_FIELD <= total_size <= limit - _SIZE_FIELD) or (
                    cmd_size > total_size - _SIZE_FIELD
                ):
                    break  # malformed: _next_body below says how
                following = pos + _SIZE_FIELD + total_size
                if following > end:
                    break
                found.append(
                    view[pos + _MIN_FRAME_SIZE : pos + _MIN_FRAME_SIZE + cmd_size].tobytes()
                )
                pos = following
        self._pos = pos
        try:
            body = self._next_body()  # a frame the loop stopped at: complete, short or bad
        except RemoteProtocolError as exc:
            self._fail(exc)
            if not found:
                raise
            return found
        if body is not None:  # (not reached: the loop takes every complete, valid frame)
            found.append(body)
        elif self._pos == len(buf):
            buf.clear()
            self._pos = 0
        return found

    def _fail(self, failure: RemoteProtocolError) -> None:
        """Broken for good: nothing fed is kept until the connection object goes, neither the
        buffer nor the read itself (the failure's traceback holds the frames that had it, so a
        copy without one is kept)."""
        self._failure = RemoteProtocolError(str(failure))
        self._buf = bytearray()
        self._pos = 0

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise RemoteProtocolError(
                f"frame decoder already failed: {self._failure}"
            ) from self._failure

    def _next_body(self) -> bytes | None:
        available = len(self._buf) - self._pos
        if available < _SIZE_FIELD:
            return None
        (total_size,) = struct.unpack_from(">I", self._buf, self._pos)
        if total_size < _SIZE_FIELD:
            raise RemoteProtocolError(f"frame totalSize {total_size} is below the minimum of 4")
        if total_size + _SIZE_FIELD > self._max_frame_size:
            raise RemoteProtocolError(
                f"frame of {total_size + _SIZE_FIELD} bytes exceeds the limit of "
                f"{self._max_frame_size} bytes"
            )
        if available < _HEADER.size:
            return None
        _, cmd_size = _HEADER.unpack_from(self._buf, self._pos)
        if cmd_size > total_size - _SIZE_FIELD:
            raise RemoteProtocolError(
                f"frame cmdSize {cmd_size} exceeds totalSize {total_size} - 4"
            )
        if available < _SIZE_FIELD + total_size:
            return None
        start = self._pos + _HEADER.size
        with memoryview(self._buf) as view:
            body = view[start : start + cmd_size].tobytes()
        self._pos += _SIZE_FIELD + total_size  # any payload after the command is skipped
        if self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        return body


def decode_command(body: bytes) -> Command:
    """Decode one serialized ``BaseCommand`` (a frame's command part) and validate it."""
    cmd = BaseCommand()
    try:
        cmd.ParseFromString(body)
    except DecodeError as exc:
        raise RemoteProtocolError(f"undecodable BaseCommand: {exc}") from None
    if not cmd.HasField("type"):
        # proto2 enums are closed: a type number missing from our enum is parked among the
        # unknown fields and the required field looks unset.
        type_number = _unknown_type_number(cmd)
        if type_number is None:
            raise RemoteProtocolError("BaseCommand without a type")
        return UnknownCommand(type_number)
    body_field = _BODY_FIELD.get(cmd.type)
    if body_field is not None and not cmd.HasField(body_field):
        raise RemoteProtocolError(
            f"{BaseCommand.Type.Name(cmd.type)} command without its {body_field} body"
        )
    if cmd.IsInitialized() and _strings_ok(cmd):
        return cmd
    problems = _problems(cmd)
    if problems:
        raise RemoteProtocolError(
            f"invalid {BaseCommand.Type.Name(cmd.type)} command: {', '.join(problems)}"
        )
    return cmd


def _strings_ok(msg: Message) -> bool:
    """Fast path of _problems' UTF-8 check: every string field set is a str."""
    for field, value in msg.ListFields():
        kind = field.type
        if kind == FieldDescriptor.TYPE_MESSAGE:
            for item in value if field.is_repeated else (value,):
                if not _strings_ok(item):
                    return False
        elif kind == FieldDescriptor.TYPE_STRING:
            for item in value if field.is_repeated else (value,):
                if type(item) is not str:
                    return False
    return True


def _unknown_type_number(cmd: BaseCommand) -> int | None:
    number: int | None = None
    fields = UnknownFieldSet(cmd)
    for index in range(len(fields)):
        field = fields[index]
        if field.field_number == 1 and field.wire_type == 0:  # varint; the last one wins
            number = int(field.data)
    return number


def _problems(msg: Message, prefix: str = "") -> list[str]:
    """Missing required fields and strings that are not valid UTF-8 (proto2 parses those into
    ``bytes`` values instead of failing), with dotted paths."""
    problems: list[str] = []
    if not msg.IsInitialized():
        problems.extend(
            f"missing required field {prefix}{field.name}"
            for field in msg.DESCRIPTOR.fields
            if field.is_required and not msg.HasField(field.name)
        )
    for field, value in msg.ListFields():
        values = value if field.is_repeated else [value]
        for index, item in enumerate(values):
            path = f"{prefix}{field.name}[{index}]" if field.is_repeated else prefix + field.name
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                problems.extend(_problems(item, path + "."))
            elif field.type == FieldDescriptor.TYPE_STRING and not isinstance(item, str):
                problems.append(f"field {path} is not valid UTF-8")
    return problems


def encode_command(cmd: BaseCommand, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> bytes:
    """Frame one command (no payload). Raises :class:`LocalProtocolError` for an invalid command."""
    body_field = _BODY_FIELD.get(cmd.type) if cmd.HasField("type") else None
    if body_field is not None and not cmd.HasField(body_field):
        raise LocalProtocolError(
            f"{BaseCommand.Type.Name(cmd.type)} command without its {body_field} body"
        )
    if not cmd.IsInitialized():
        raise LocalProtocolError(f"command is missing required fields: {', '.join(_problems(cmd))}")
    body = cmd.SerializeToString()
    frame_size = _HEADER.size + len(body)
    if frame_size > max_frame_size:
        raise LocalProtocolError(
            f"frame of {frame_size} bytes exceeds the limit of {max_frame_size} bytes"
        )
    return _HEADER.pack(_SIZE_FIELD + len(body), len(body)) + body


# --- frames a gateway sends -------------------------------------------------------------------


def connected(
    server_version: str,
    protocol_version: int,
    max_message_size: int | None = None,
    feature_flags: FeatureFlags | None = None,
) -> bytes:
    """CONNECTED; ``protocol_version`` should be min(client's, ours). ``feature_flags`` tells
    the client what the server supports (a broker sets at least
    ``supports_get_partitioned_metadata_without_auto_creation``)."""
    cmd = BaseCommand(type=BaseCommand.CONNECTED)
    cmd.connected.server_version = server_version
    cmd.connected.protocol_version = protocol_version
    if max_message_size is not None:
        cmd.connected.max_message_size = max_message_size
    if feature_flags is not None:
        cmd.connected.feature_flags.CopyFrom(feature_flags)
    return encode_command(cmd)


def lookup_response(request_id: int, **fields: Any) -> bytes:
    """LOOKUP_RESPONSE, framed; `fields` as `lookup_response_command` takes them."""
    return encode_command(lookup_response_command(request_id, **fields))


def lookup_response_command(
    request_id: int,
    *,
    response: CommandLookupTopicResponse.LookupType,
    broker_url: str | None = None,
    broker_url_tls: str | None = None,
    authoritative: bool = False,
    proxy_through_service_url: bool = False,
    error: ServerError | None = None,
    message: str | None = None,
) -> BaseCommand:
    """The LOOKUP_RESPONSE command itself, unframed (for a frame template). A failure is
    ``response=LookupType.Failed`` with ``error`` and ``message`` and no URLs."""
    cmd = BaseCommand(type=BaseCommand.LOOKUP_RESPONSE)
    body = cmd.lookupTopicResponse
    body.request_id = request_id
    body.response = response
    if broker_url is not None:
        body.brokerServiceUrl = broker_url
    if broker_url_tls is not None:
        body.brokerServiceUrlTls = broker_url_tls
    body.authoritative = authoritative
    body.proxy_through_service_url = proxy_through_service_url
    if error is not None:
        body.error = error
    if message is not None:
        body.message = message
    return cmd


def partitioned_metadata_response(
    request_id: int,
    partitions: int | None = None,
    error: ServerError | None = None,
    message: str | None = None,
) -> bytes:
    """PARTITIONED_METADATA_RESPONSE: ``Success`` with ``partitions`` (0 = not partitioned), or
    ``Failed`` when ``error`` is given."""
    cmd = BaseCommand(type=BaseCommand.PARTITIONED_METADATA_RESPONSE)
    body = cmd.partitionMetadataResponse
    body.request_id = request_id
    if error is None:
        body.response = CommandPartitionedTopicMetadataResponse.Success
        body.partitions = 0 if partitions is None else partitions
    else:
        body.response = CommandPartitionedTopicMetadataResponse.Failed
        body.error = error
        if partitions is not None:
            body.partitions = partitions
    if message is not None:
        body.message = message
    return encode_command(cmd)


def get_topics_of_namespace_response(
    request_id: int,
    topics: list[str] | tuple[str, ...],
    *,
    filtered: bool = False,
    topics_hash: str | None = None,
    changed: bool = True,
) -> bytes:
    """GET_TOPICS_OF_NAMESPACE_RESPONSE. ``filtered``: the list holds only the topics matching
    the request's pattern; ``changed=False``: the list is the one whose hash the client sent,
    and is left empty."""
    cmd = BaseCommand(type=BaseCommand.GET_TOPICS_OF_NAMESPACE_RESPONSE)
    body = cmd.getTopicsOfNamespaceResponse
    body.request_id = request_id
    body.topics.extend(topics)
    body.filtered = filtered
    if topics_hash is not None:
        body.topics_hash = topics_hash
    body.changed = changed
    return encode_command(cmd)


def get_schema_response(
    request_id: int,
    *,
    schema: Schema | None = None,
    schema_version: bytes | None = None,
    error: ServerError | None = None,
    message: str | None = None,
) -> bytes:
    """GET_SCHEMA_RESPONSE: the schema and its version, or ``error`` and ``message``."""
    cmd = BaseCommand(type=BaseCommand.GET_SCHEMA_RESPONSE)
    body = cmd.getSchemaResponse
    body.request_id = request_id
    if schema is not None:
        body.schema.CopyFrom(schema)
    if schema_version is not None:
        body.schema_version = schema_version
    if error is not None:
        body.error_code = error
    if message is not None:
        body.error_message = message
    return encode_command(cmd)


def schema(name: str, schema_type: Schema.Type, data: bytes, properties: dict[str, str]) -> Schema:
    """A ``Schema`` message (properties in the order given)."""
    return Schema(
        name=name,
        schema_data=data,
        type=schema_type,
        properties=[KeyValue(key=key, value=value) for key, value in properties.items()],
    )


def error(request_id: int, error_code: ServerError, message: str) -> bytes:
    """ERROR, the answer to a request the gateway refuses (e.g. ``NotAllowedError``)."""
    cmd = BaseCommand(type=BaseCommand.ERROR)
    cmd.error.request_id = request_id
    cmd.error.error = error_code
    cmd.error.message = message
    return encode_command(cmd)


def ping() -> bytes:
    cmd = BaseCommand(type=BaseCommand.PING)
    cmd.ping.SetInParent()
    return encode_command(cmd)


def pong() -> bytes:
    cmd = BaseCommand(type=BaseCommand.PONG)
    cmd.pong.SetInParent()
    return encode_command(cmd)


# --- frames a client sends (tests, benchmarks, test peers) -------------------------------------


def connect(
    client_version: str,
    protocol_version: int,
    *,
    auth_method_name: str | None = None,
    auth_data: bytes | None = None,
    proxy_to_broker_url: str | None = None,
    feature_flags: FeatureFlags | None = None,
    original_principal: str | None = None,
    original_auth_data: str | None = None,
    original_auth_method: str | None = None,
) -> bytes:
    """CONNECT. The ``original_*`` fields are what a proxy sends: the role (and, where
    credentials are forwarded, the auth data and method) of the client it acts for."""
    cmd = BaseCommand(type=BaseCommand.CONNECT)
    body = cmd.connect
    body.client_version = client_version
    body.protocol_version = protocol_version
    if auth_method_name is not None:
        body.auth_method_name = auth_method_name
    if auth_data is not None:
        body.auth_data = auth_data
    if proxy_to_broker_url is not None:
        body.proxy_to_broker_url = proxy_to_broker_url
    if feature_flags is not None:
        body.feature_flags.CopyFrom(feature_flags)
    if original_principal is not None:
        body.original_principal = original_principal
    if original_auth_data is not None:
        body.original_auth_data = original_auth_data
    if original_auth_method is not None:
        body.original_auth_method = original_auth_method
    return encode_command(cmd)


def auth_response(client_version: str, protocol_version: int, method: str, data: bytes) -> bytes:
    """AUTH_RESPONSE: fresh credentials, the answer to a server's AUTH_CHALLENGE."""
    cmd = BaseCommand(type=BaseCommand.AUTH_RESPONSE)
    body = cmd.authResponse
    body.client_version = client_version
    body.protocol_version = protocol_version
    body.response.auth_method_name = method
    body.response.auth_data = data
    return encode_command(cmd)


def lookup(
    topic: str,
    request_id: int,
    authoritative: bool = False,
    advertised_listener_name: str | None = None,
    properties: Sequence[tuple[str, str]] = (),
) -> bytes:
    """LOOKUP. Like the Java and C++ clients, ``authoritative`` is always sent;
    ``properties``: the client's lookup properties (PIP-368, field 8)."""
    cmd = BaseCommand(type=BaseCommand.LOOKUP)
    body = cmd.lookupTopic
    body.topic = topic
    body.request_id = request_id
    body.authoritative = authoritative
    if advertised_listener_name is not None:
        body.advertised_listener_name = advertised_listener_name
    for key, value in properties:
        body.properties.add(key=key, value=value)
    return encode_command(cmd)


def partitioned_metadata(
    topic: str, request_id: int, *, metadata_auto_creation_enabled: bool | None = None
) -> bytes:
    """PARTITIONED_METADATA. ``metadata_auto_creation_enabled`` (field 6) unset means true: the
    server may create the topic's partitioned metadata when its rules allow."""
    cmd = BaseCommand(type=BaseCommand.PARTITIONED_METADATA)
    cmd.partitionMetadata.topic = topic
    cmd.partitionMetadata.request_id = request_id
    if metadata_auto_creation_enabled is not None:
        cmd.partitionMetadata.metadata_auto_creation_enabled = metadata_auto_creation_enabled
    return encode_command(cmd)


def get_topics_of_namespace(
    namespace: str,
    request_id: int,
    mode: CommandGetTopicsOfNamespace.Mode = CommandGetTopicsOfNamespace.PERSISTENT,
    *,
    topics_pattern: str | None = None,
    topics_hash: str | None = None,
    properties: Sequence[tuple[str, str]] = (),
) -> bytes:
    """GET_TOPICS_OF_NAMESPACE (``namespace`` is ``tenant/ns``; ``properties``: PIP-452's
    context of the client, key and value pairs in order)."""
    cmd = BaseCommand(type=BaseCommand.GET_TOPICS_OF_NAMESPACE)
    body = cmd.getTopicsOfNamespace
    body.request_id = request_id
    body.namespace = namespace
    body.mode = mode
    if topics_pattern is not None:
        body.topics_pattern = topics_pattern
    if topics_hash is not None:
        body.topics_hash = topics_hash
    for key, value in properties:
        body.properties.add(key=key, value=value)
    return encode_command(cmd)


def get_schema(topic: str, request_id: int, schema_version: bytes | None = None) -> bytes:
    """GET_SCHEMA; no ``schema_version`` asks for the latest schema."""
    cmd = BaseCommand(type=BaseCommand.GET_SCHEMA)
    cmd.getSchema.request_id = request_id
    cmd.getSchema.topic = topic
    if schema_version is not None:
        cmd.getSchema.schema_version = schema_version
    return encode_command(cmd)
