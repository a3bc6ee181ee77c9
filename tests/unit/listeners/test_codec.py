"""Tests of the sans-IO Pulsar frame codec (listeners.protocol.codec).

Golden frames are written out byte by byte from the protobuf wire format (tag = field << 3 |
wire type; varints little-endian base 128), independently of the protobuf library.
"""

from __future__ import annotations

import contextlib
import struct
import sys
from collections.abc import Callable, Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import (
    DEFAULT_MAX_FRAME_SIZE,
    BaseCommand,
    Command,
    FrameDecoder,
    LocalProtocolError,
    LookupType,
    RemoteProtocolError,
    ServerError,
    UnknownCommand,
)
from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import (
    CommandPartitionedTopicMetadataResponse,
    FeatureFlags,
)
from pulsar_lookup_gateway.listeners.protocol.wire import bytes_field, varint_field

# --- building peer bytes by hand -------------------------------------------------------------


def frame(body: bytes, payload: bytes = b"") -> bytes:
    return struct.pack(">II", 4 + len(body) + len(payload), len(body)) + body + payload


def decode_all(data: bytes, chunks: Iterable[int] | None = None, **kwargs: int) -> list[Command]:
    """Feed ``data`` (whole, or cut at the given offsets) and drain after every feed."""
    decoder = FrameDecoder(**kwargs)
    cuts = [*sorted(set(chunks or ())), len(data)]
    commands: list[Command] = []
    start = 0
    for cut in cuts:
        decoder.feed(data[start:cut])
        start = cut
        while (cmd := decoder.next_command()) is not None:
            commands.append(cmd)
    assert decoder.buffered_size == 0
    return commands


def decode_one(data: bytes) -> Command:
    [cmd] = decode_all(data)
    return cmd


# --- golden bytes ------------------------------------------------------------------------------

# BaseCommand{type: PING(18), ping: {}}:
#   08 12     field 1 varint, 18
#   92 01 00  field 18 length-delimited (tag 146 = 92 01), length 0
GOLDEN_PING = bytes.fromhex("00000009 00000005 0812 920100")
# Same with PONG(19): tag 19 << 3 | 2 = 154 = 9a 01.
GOLDEN_PONG = bytes.fromhex("00000009 00000005 0813 9a0100")

# BaseCommand{type: CONNECTED(3), connected: {server_version: "gw", protocol_version: 21,
#                                             max_message_size: 5242880}}
#   CommandConnected: 0a 02 "gw" | 10 15 | 18 80 80 c0 02   (5242880 = 0x500000) = 11 bytes
#   BaseCommand: 08 03 | 1a 0b <11 bytes>                                      = 15 bytes
GOLDEN_CONNECTED = (
    bytes.fromhex("00000013 0000000f 0803 1a0b 0a02") + b"gw" + bytes.fromhex("1015 188080c002")
)

# BaseCommand{type: LOOKUP(23), lookupTopic: {topic: "persistent://public/default/t",
#             request_id: 7, authoritative: false, advertised_listener_name: "external"}}
#   CommandLookupTopic: 0a 1d <29-byte topic> | 10 07 | 18 00 | 3a 08 "external"   = 45 bytes
#   BaseCommand: 08 17 | ba 01 2d <45 bytes>    (tag 23 << 3 | 2 = 186 = ba 01)     = 50 bytes
GOLDEN_LOOKUP = (
    bytes.fromhex("00000036 00000032 0817 ba012d 0a1d")
    + b"persistent://public/default/t"
    + bytes.fromhex("1007 1800 3a08")
    + b"external"
)

# BaseCommand{type: ERROR(14), error: {request_id: 5, error: NotAllowedError(22), message: "no"}}
#   CommandError: 08 05 | 10 16 | 1a 02 "no" = 8 bytes; BaseCommand: 08 0e | 72 08 <8> = 12 bytes
GOLDEN_ERROR = bytes.fromhex("00000010 0000000c 080e 7208 0805 1016 1a02") + b"no"


def test_ping_golden_bytes() -> None:
    assert codec.ping() == GOLDEN_PING
    cmd = decode_one(GOLDEN_PING)
    assert isinstance(cmd, BaseCommand)
    assert cmd.type == BaseCommand.PING
    assert cmd.HasField("ping")


def test_pong_golden_bytes() -> None:
    assert codec.pong() == GOLDEN_PONG
    cmd = decode_one(GOLDEN_PONG)
    assert isinstance(cmd, BaseCommand)
    assert cmd.type == BaseCommand.PONG


def test_connected_golden_bytes() -> None:
    assert codec.connected("gw", 21, 5 * 1024 * 1024) == GOLDEN_CONNECTED
    cmd = decode_one(GOLDEN_CONNECTED)
    assert isinstance(cmd, BaseCommand)
    assert cmd.type == BaseCommand.CONNECTED
    assert (cmd.connected.server_version, cmd.connected.protocol_version) == ("gw", 21)
    assert cmd.connected.max_message_size == 5 * 1024 * 1024


def test_lookup_golden_bytes() -> None:
    built = codec.lookup("persistent://public/default/t", 7, advertised_listener_name="external")
    assert built == GOLDEN_LOOKUP
    cmd = decode_one(GOLDEN_LOOKUP)
    assert isinstance(cmd, BaseCommand)
    assert cmd.type == BaseCommand.LOOKUP
    assert cmd.lookupTopic.topic == "persistent://public/default/t"
    assert cmd.lookupTopic.request_id == 7
    assert cmd.lookupTopic.HasField("authoritative") and not cmd.lookupTopic.authoritative
    assert cmd.lookupTopic.advertised_listener_name == "external"


def test_lookup_frame_cross_checked_with_hand_written_wire_encoder() -> None:
    # The same LOOKUP as a client would put it on the wire, built field by field with the
    # independent writer above (not with protobuf), including a large request id.
    request_id = 2**64 - 1
    body = varint_field(1, 23) + bytes_field(
        23,
        bytes_field(1, b"persistent://t1/ns/topic-\xc3\xa9")  # UTF-8 "é"
        + varint_field(2, request_id)
        + varint_field(3, 1)
        + bytes_field(7, b"internal"),
    )
    expected = frame(body)
    assert codec.lookup("persistent://t1/ns/topic-é", request_id, True, "internal") == expected
    cmd = decode_one(expected)
    assert isinstance(cmd, BaseCommand)
    assert cmd.lookupTopic.topic == "persistent://t1/ns/topic-é"
    assert cmd.lookupTopic.request_id == request_id
    assert cmd.lookupTopic.authoritative is True


def test_error_golden_bytes() -> None:
    assert codec.error(5, ServerError.NotAllowedError, "no") == GOLDEN_ERROR
    cmd = decode_one(GOLDEN_ERROR)
    assert isinstance(cmd, BaseCommand)
    assert (cmd.error.request_id, cmd.error.error, cmd.error.message) == (5, 22, "no")


def test_pulsar_numbers() -> None:
    # Spot checks of numbers that must match Pulsar's PulsarApi.proto.
    assert BaseCommand.PRODUCER == 5
    assert BaseCommand.FLOW == 11
    assert BaseCommand.CLOSE_PRODUCER == 15
    assert BaseCommand.CLOSE_CONSUMER == 16
    assert BaseCommand.PRODUCER_SUCCESS == 17
    assert BaseCommand.GET_TOPICS_OF_NAMESPACE_RESPONSE == 33
    assert BaseCommand.AUTH_RESPONSE == 37
    assert ServerError.ServiceNotReady == 6
    assert ServerError.TooManyRequests == 14
    assert ServerError.NotAllowedError == 22
    assert LookupType.Redirect == 0 and LookupType.Connect == 1 and LookupType.Failed == 2
    for field in BaseCommand.DESCRIPTOR.fields:
        if field.name != "type":
            assert BaseCommand.Type.Name(field.number)  # body field number == type number


# --- round trips of every builder ---------------------------------------------------------------


def _check_connect(cmd: BaseCommand) -> None:
    assert cmd.connect.client_version == "Pulsar-CPP-v3.7.0"
    assert cmd.connect.protocol_version == 21
    assert cmd.connect.auth_method_name == "token"
    assert cmd.connect.auth_data == b"eyJ.jwt"
    assert cmd.connect.proxy_to_broker_url == "pulsar://b1:6650"
    assert cmd.connect.feature_flags.supports_auth_refresh


def _check_lookup_response_connect(cmd: BaseCommand) -> None:
    body = cmd.lookupTopicResponse
    assert body.request_id == 9
    assert body.response == LookupType.Connect
    assert body.brokerServiceUrl == "pulsar://b1:6650"
    assert body.brokerServiceUrlTls == "pulsar+ssl://b1:6651"
    assert body.authoritative is True
    assert body.proxy_through_service_url is False
    assert not body.HasField("error")


def _check_lookup_response_failed(cmd: BaseCommand) -> None:
    body = cmd.lookupTopicResponse
    assert body.request_id == 10
    assert body.response == LookupType.Failed
    assert not body.HasField("brokerServiceUrl")
    assert body.error == ServerError.ServiceNotReady
    assert body.message == "no broker"


def _check_partitions_ok(cmd: BaseCommand) -> None:
    body = cmd.partitionMetadataResponse
    assert (body.request_id, body.partitions) == (11, 4)
    assert body.response == CommandPartitionedTopicMetadataResponse.Success


def _check_partitions_not_partitioned(cmd: BaseCommand) -> None:
    body = cmd.partitionMetadataResponse
    assert body.HasField("partitions") and body.partitions == 0
    assert body.response == CommandPartitionedTopicMetadataResponse.Success


def _check_partitions_failed(cmd: BaseCommand) -> None:
    body = cmd.partitionMetadataResponse
    assert body.response == CommandPartitionedTopicMetadataResponse.Failed
    assert body.error == ServerError.TopicNotFound
    assert body.message == "missing"
    assert not body.HasField("partitions")


def _check_partitioned_metadata(cmd: BaseCommand) -> None:
    assert cmd.partitionMetadata.topic == "persistent://public/default/p"
    assert cmd.partitionMetadata.request_id == 12


def _check_connected_minimal(cmd: BaseCommand) -> None:
    assert cmd.connected.server_version == "gw"
    assert not cmd.connected.HasField("max_message_size")


def _check_lookup_minimal(cmd: BaseCommand) -> None:
    assert not cmd.lookupTopic.HasField("advertised_listener_name")


ROUND_TRIPS: list[tuple[str, bytes, int, Callable[[BaseCommand], None]]] = [
    ("ping", codec.ping(), BaseCommand.PING, lambda c: None),
    ("pong", codec.pong(), BaseCommand.PONG, lambda c: None),
    ("connected", codec.connected("gw", 15), BaseCommand.CONNECTED, _check_connected_minimal),
    (
        "connect",
        codec.connect(
            "Pulsar-CPP-v3.7.0",
            21,
            auth_method_name="token",
            auth_data=b"eyJ.jwt",
            proxy_to_broker_url="pulsar://b1:6650",
            feature_flags=FeatureFlags(supports_auth_refresh=True),
        ),
        BaseCommand.CONNECT,
        _check_connect,
    ),
    ("lookup", codec.lookup("t", 1), BaseCommand.LOOKUP, _check_lookup_minimal),
    (
        "lookup_response_connect",
        codec.lookup_response(
            9,
            response=LookupType.Connect,
            broker_url="pulsar://b1:6650",
            broker_url_tls="pulsar+ssl://b1:6651",
            authoritative=True,
            proxy_through_service_url=False,
        ),
        BaseCommand.LOOKUP_RESPONSE,
        _check_lookup_response_connect,
    ),
    (
        "lookup_response_failed",
        codec.lookup_response(
            10,
            response=LookupType.Failed,
            error=ServerError.ServiceNotReady,
            message="no broker",
        ),
        BaseCommand.LOOKUP_RESPONSE,
        _check_lookup_response_failed,
    ),
    (
        "partitioned_metadata",
        codec.partitioned_metadata("persistent://public/default/p", 12),
        BaseCommand.PARTITIONED_METADATA,
        _check_partitioned_metadata,
    ),
    (
        "partitions_ok",
        codec.partitioned_metadata_response(11, 4),
        BaseCommand.PARTITIONED_METADATA_RESPONSE,
        _check_partitions_ok,
    ),
    (
        "partitions_not_partitioned",
        codec.partitioned_metadata_response(13),
        BaseCommand.PARTITIONED_METADATA_RESPONSE,
        _check_partitions_not_partitioned,
    ),
    (
        "partitions_failed",
        codec.partitioned_metadata_response(14, error=ServerError.TopicNotFound, message="missing"),
        BaseCommand.PARTITIONED_METADATA_RESPONSE,
        _check_partitions_failed,
    ),
    (
        "error",
        codec.error(3, ServerError.TooManyRequests, "slow down"),
        BaseCommand.ERROR,
        lambda c: None,
    ),
]


@pytest.mark.parametrize(
    ("data", "type_", "check"),
    [pytest.param(d, t, c, id=name) for name, d, t, c in ROUND_TRIPS],
)
def test_builder_round_trip(data: bytes, type_: int, check: Callable[[BaseCommand], None]) -> None:
    cmd = decode_one(data)
    assert isinstance(cmd, BaseCommand)
    assert cmd.type == type_
    check(cmd)
    assert codec.encode_command(cmd) == data


@given(
    topic=st.text(),
    request_id=st.integers(0, 2**64 - 1),
    authoritative=st.booleans(),
    listener=st.none() | st.text(max_size=20),
)
def test_lookup_round_trip_property(
    topic: str, request_id: int, authoritative: bool, listener: str | None
) -> None:
    try:
        data = codec.lookup(topic, request_id, authoritative, listener)
    except ValueError:  # a lone surrogate is not encodable as UTF-8: refused when set
        return
    cmd = decode_one(data)
    assert isinstance(cmd, BaseCommand)
    assert cmd.lookupTopic.topic == topic
    assert cmd.lookupTopic.request_id == request_id
    assert cmd.lookupTopic.authoritative is authoritative
    assert cmd.lookupTopic.HasField("advertised_listener_name") == (listener is not None)


# --- framing --------------------------------------------------------------------------------------

STREAM = b"".join(data for _, data, _, _ in ROUND_TRIPS)
STREAM_TYPES = [type_ for _, _, type_, _ in ROUND_TRIPS]


def _types(commands: list[Command]) -> list[int]:
    return [c.type if isinstance(c, BaseCommand) else -c.type_number for c in commands]


def test_many_frames_in_one_feed() -> None:
    data = STREAM * 200
    commands = decode_all(data)
    assert _types(commands) == STREAM_TYPES * 200


def test_frames_split_at_every_byte_boundary() -> None:
    for cut in range(len(STREAM) + 1):
        assert _types(decode_all(STREAM, [cut])) == STREAM_TYPES, cut


def test_frames_fed_one_byte_at_a_time() -> None:
    assert _types(decode_all(STREAM, range(len(STREAM)))) == STREAM_TYPES


def test_incomplete_frame_waits_and_is_reported_as_buffered() -> None:
    decoder = FrameDecoder()
    decoder.feed(GOLDEN_LOOKUP[:-1])
    assert decoder.next_command() is None
    assert decoder.buffered_size == len(GOLDEN_LOOKUP) - 1
    decoder.feed(GOLDEN_LOOKUP[-1:])
    assert isinstance(decoder.next_command(), BaseCommand)
    assert decoder.next_command() is None
    assert decoder.buffered_size == 0


def test_payload_after_the_command_is_skipped() -> None:
    body = GOLDEN_PING[8:]
    data = frame(body, payload=b"\x0e\x01" + b"p" * 100) + GOLDEN_PONG
    assert _types(decode_all(data)) == [BaseCommand.PING, BaseCommand.PONG]


def test_frame_at_the_cap_is_accepted_including_payload() -> None:
    body = GOLDEN_PING[8:]
    data = frame(body, payload=b"x" * (64 - 8 - len(body)))
    assert len(data) == 64
    assert _types(decode_all(data, max_frame_size=64)) == [BaseCommand.PING]


@pytest.mark.parametrize("total_size", [61, 2**31, 2**32 - 1])
def test_frame_over_the_cap_is_rejected_from_its_header(total_size: int) -> None:
    # The whole frame (4 + totalSize) exceeds the 64-byte cap: refused as soon as the 4-byte
    # totalSize is known, long before the announced body could be buffered.
    decoder = FrameDecoder(max_frame_size=64)
    decoder.feed(struct.pack(">I", total_size))
    with pytest.raises(RemoteProtocolError, match="exceeds the limit"):
        decoder.next_command()


@pytest.mark.parametrize("read", ["next_command", "next_body", "bodies"])
def test_a_failed_decoder_holds_none_of_the_bytes_it_was_fed(read: str) -> None:
    # A stranger's first read (up to 256 KiB) behind an oversized header: the connection is
    # closed, but until its object goes the decoder would keep the read.
    decoder = FrameDecoder(max_frame_size=64)
    decoder.feed(struct.pack(">II", 2**20, 2**20 - 4) + b"\0" * 256 * 1024)
    with pytest.raises(RemoteProtocolError, match="exceeds the limit"):
        getattr(decoder, read)()
    assert decoder.buffered_size == 0
    with pytest.raises(RemoteProtocolError, match="already failed"):
        decoder.feed(b"more")


def test_a_failed_decoder_keeps_no_frame_of_its_caller_alive() -> None:
    # The server's read handler had the read in a local; a failure kept with its traceback
    # kept that frame, and so the read, for as long as the connection object lived.
    def read(decoder: FrameDecoder, data: bytes) -> None:
        decoder.feed(data)
        decoder.next_command()

    decoder = FrameDecoder(max_frame_size=64)
    data = struct.pack(">II", 2**20, 2**20 - 4) + b"\0" * 1024
    held = sys.getrefcount(data)
    with contextlib.suppress(RemoteProtocolError):
        read(decoder, data)
    assert sys.getrefcount(data) == held


def test_frame_over_the_default_cap_is_rejected_after_its_first_8_bytes() -> None:
    decoder = FrameDecoder()
    assert decoder.max_frame_size == DEFAULT_MAX_FRAME_SIZE == 5 * 1024 * 1024 + 10 * 1024
    decoder.feed(struct.pack(">II", DEFAULT_MAX_FRAME_SIZE - 3, 5))
    with pytest.raises(RemoteProtocolError, match="exceeds the limit"):
        decoder.next_command()


def test_frame_just_under_the_default_cap_is_buffered() -> None:
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">II", DEFAULT_MAX_FRAME_SIZE - 4, 5))
    assert decoder.next_command() is None  # waits for the rest


def test_cmd_size_larger_than_total_size_is_rejected_from_the_header() -> None:
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">II", 9, 6))
    with pytest.raises(RemoteProtocolError, match="cmdSize"):
        decoder.next_command()


@pytest.mark.parametrize("total_size", [0, 1, 3])
def test_total_size_below_four_is_rejected(total_size: int) -> None:
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">I", total_size))
    with pytest.raises(RemoteProtocolError, match="minimum"):
        decoder.next_command()


def test_decoder_stays_broken_after_an_error() -> None:
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">II", 9, 6) + GOLDEN_PING)
    with pytest.raises(RemoteProtocolError):
        decoder.next_command()
    with pytest.raises(RemoteProtocolError, match="already failed"):
        decoder.next_command()
    with pytest.raises(RemoteProtocolError, match="already failed"):
        decoder.feed(GOLDEN_PING)


def test_max_frame_size_must_hold_a_header() -> None:
    with pytest.raises(ValueError):
        FrameDecoder(max_frame_size=7)


# --- command validation -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "match"),
    [
        pytest.param(b"\x08", "undecodable", id="truncated-varint"),
        pytest.param(b"\xff\xff\xff\xff", "undecodable", id="garbage"),
        pytest.param(b"\x08\x17\xba\x01\x7f", "undecodable", id="submessage-overruns"),
        pytest.param(b"", "without a type", id="empty"),
        pytest.param(bytes_field(2, b""), "without a type", id="no-type"),
        pytest.param(bytes_field(1, b"\x12"), "without a type", id="type-wrong-wire-type"),
        pytest.param(varint_field(1, 23), "without its lookupTopic body", id="lookup-no-body"),
        pytest.param(varint_field(1, 18), "without its ping body", id="ping-no-body"),
        pytest.param(
            varint_field(1, 23) + bytes_field(23, varint_field(2, 1)),
            "missing required field lookupTopic.topic",
            id="lookup-no-topic",
        ),
        pytest.param(
            varint_field(1, 23) + bytes_field(23, bytes_field(1, b"t")),
            "missing required field lookupTopic.request_id",
            id="lookup-no-request-id",
        ),
        pytest.param(
            varint_field(1, 2) + bytes_field(2, varint_field(4, 21)),
            "missing required field connect.client_version",
            id="connect-no-client-version",
        ),
        pytest.param(
            varint_field(1, 23) + bytes_field(23, bytes_field(1, b"t\xff") + varint_field(2, 1)),
            "lookupTopic.topic is not valid UTF-8",
            id="topic-not-utf8",
        ),
        pytest.param(
            varint_field(1, 23)
            + bytes_field(
                23, bytes_field(1, b"t") + varint_field(2, 1) + bytes_field(8, bytes_field(1, b"k"))
            ),
            r"missing required field lookupTopic.properties\[0\].value",
            id="nested-repeated-missing",
        ),
    ],
)
def test_invalid_command_is_rejected(body: bytes, match: str) -> None:
    decoder = FrameDecoder()
    decoder.feed(frame(body))
    with pytest.raises(RemoteProtocolError, match=match):
        decoder.next_command()


def test_unknown_type_number_yields_unknown_command_and_the_stream_continues() -> None:
    data = (
        frame(varint_field(1, 99))
        + frame(
            varint_field(1, 68) + bytes_field(68, varint_field(1, 1))
        )  # a newer command with a body
        + frame(varint_field(1, 2**40))
        + GOLDEN_PING
    )
    commands = decode_all(data)
    assert commands[:3] == [UnknownCommand(99), UnknownCommand(68), UnknownCommand(2**40)]
    assert isinstance(commands[3], BaseCommand) and commands[3].type == BaseCommand.PING


def test_known_type_without_a_modelled_body_is_recognised() -> None:
    # PRODUCER: the gateway has no CommandProducer message but knows the type number.
    producer_body = (
        bytes_field(1, b"persistent://public/default/t") + varint_field(2, 0) + varint_field(3, 1)
    )
    cmd = decode_one(frame(varint_field(1, 5) + bytes_field(5, producer_body)))
    assert isinstance(cmd, BaseCommand)
    assert cmd.type == BaseCommand.PRODUCER


def test_unknown_command_is_a_frozen_value() -> None:
    unknown = UnknownCommand(99)
    assert unknown == UnknownCommand(99)
    assert hash(unknown) == hash(UnknownCommand(99))
    with pytest.raises(AttributeError):
        unknown.type_number = 1  # type: ignore[misc]


# --- encoding errors ----------------------------------------------------------------------------


def test_encode_rejects_missing_required_fields() -> None:
    cmd = BaseCommand(type=BaseCommand.LOOKUP)
    cmd.lookupTopic.request_id = 1
    with pytest.raises(LocalProtocolError, match=r"lookupTopic\.topic"):
        codec.encode_command(cmd)
    with pytest.raises(LocalProtocolError, match="type"):
        codec.encode_command(BaseCommand())


def test_encode_rejects_a_command_without_its_body() -> None:
    with pytest.raises(LocalProtocolError, match="without its ping body"):
        codec.encode_command(BaseCommand(type=BaseCommand.PING))


def test_encode_rejects_a_frame_over_the_cap() -> None:
    cmd = BaseCommand(type=BaseCommand.ERROR)
    cmd.error.request_id = 1
    cmd.error.error = ServerError.UnknownError
    cmd.error.message = "x" * 100
    with pytest.raises(LocalProtocolError, match="exceeds the limit"):
        codec.encode_command(cmd, max_frame_size=64)


# --- robustness: anything a peer sends ends as commands or RemoteProtocolError ------------------


def _feed_in_chunks(data: bytes, cuts: list[int], max_frame_size: int) -> None:
    decoder = FrameDecoder(max_frame_size=max_frame_size)
    start = 0
    try:
        for cut in [*sorted(cuts), len(data)]:
            decoder.feed(data[start:cut])
            start = cut
            while (cmd := decoder.next_command()) is not None:
                assert isinstance(cmd, BaseCommand | UnknownCommand)
    except RemoteProtocolError:
        return


@settings(max_examples=500)
@given(
    data=st.binary(max_size=300),
    max_frame_size=st.sampled_from([8, 16, 64, DEFAULT_MAX_FRAME_SIZE]),
    cuts=st.lists(st.integers(0, 300), max_size=8),
)
def test_arbitrary_bytes_only_produce_commands_or_remote_protocol_errors(
    data: bytes, max_frame_size: int, cuts: list[int]
) -> None:
    _feed_in_chunks(data, [min(c, len(data)) for c in cuts], max_frame_size)


_TYPE_NUMBERS = st.sampled_from([2, 3, 5, 13, 14, 18, 19, 21, 22, 23, 24, 32, 33, 36, 37, 99])


_WIRE_FIELDS = st.one_of(
    st.builds(varint_field, st.integers(1, 10), st.integers(0, 2**64 - 1)),
    st.builds(bytes_field, st.integers(1, 10), st.binary(max_size=12)),
    st.builds(
        bytes_field,
        st.integers(1, 10),
        st.text(max_size=12).map(lambda text: text.encode("utf-8", "surrogatepass")),
    ),
)


@st.composite
def _plausible_bodies(draw: st.DrawFn) -> bytes:
    """A type field, then random bytes, or a body in the matching field made of random bytes or
    of well-formed protobuf fields with random numbers, wire types and values."""
    type_number = draw(_TYPE_NUMBERS)
    head = varint_field(1, type_number)
    kind = draw(st.sampled_from(["raw", "raw-body", "fields-body"]))
    if kind == "raw":
        return head + draw(st.binary(max_size=60))
    if kind == "raw-body":
        return head + bytes_field(type_number, draw(st.binary(max_size=60)))
    return head + bytes_field(type_number, b"".join(draw(st.lists(_WIRE_FIELDS, max_size=6))))


@settings(max_examples=500)
@given(
    bodies=st.lists(_plausible_bodies() | st.binary(max_size=40), min_size=1, max_size=5),
    cuts=st.lists(st.integers(0, 500), max_size=8),
)
def test_well_framed_random_commands_only_produce_commands_or_remote_protocol_errors(
    bodies: list[bytes], cuts: list[int]
) -> None:
    data = b"".join(frame(body) for body in bodies)
    _feed_in_chunks(data, [min(c, len(data)) for c in cuts], DEFAULT_MAX_FRAME_SIZE)
