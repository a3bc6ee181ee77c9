"""The protobuf wire helpers against protobuf's own encoder and decoder."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import CommandLookupTopic
from pulsar_lookup_gateway.listeners.protocol.wire import (
    bytes_field,
    encode_varint,
    iter_fields,
    last_varint,
    read_fields,
    read_varint,
    varint_field,
)

UINT64 = st.integers(0, 2**64 - 1)


@given(topic=st.text(max_size=40), request_id=UINT64, authoritative=st.booleans())
def test_written_fields_are_what_protobuf_writes_and_reads(
    topic: str, request_id: int, authoritative: bool
) -> None:
    ours = (
        bytes_field(1, topic.encode())
        + varint_field(2, request_id)
        + varint_field(3, int(authoritative))
    )
    theirs = CommandLookupTopic(topic=topic, request_id=request_id, authoritative=authoritative)
    assert ours == theirs.SerializeToString()
    parsed = CommandLookupTopic.FromString(ours)
    assert (parsed.topic, parsed.request_id, parsed.authoritative) == (
        topic,
        request_id,
        authoritative,
    )


@given(values=st.lists(st.tuples(st.integers(1, 2**29 - 1), UINT64), max_size=8))
def test_read_fields_returns_every_varint_in_order(values: list[tuple[int, int]]) -> None:
    message = b"".join(varint_field(number, value) for number, value in values)
    expected: dict[int, list[int | bytes]] = {}
    for number, value in values:
        expected.setdefault(number, []).append(value)
    assert read_fields(message) == expected


def test_negative_values_are_written_as_their_64_bit_form() -> None:
    assert last_varint(varint_field(3, -1), 3) == 2**64 - 1


def test_last_varint_takes_the_last_value_and_survives_truncation() -> None:
    message = varint_field(3, 7) + bytes_field(2, b"x") + varint_field(3, 9)
    assert last_varint(message, 3) == 9
    assert last_varint(message, 4) is None
    cut = varint_field(3, 7) + encode_varint(3 << 3) + b"\xff"  # a varint that never ends
    assert last_varint(cut, 3) == 7


@given(data=st.binary(max_size=64))
def test_arbitrary_bytes_raise_value_error_or_parse(data: bytes) -> None:
    try:
        for _number, value in iter_fields(data):
            assert isinstance(value, int | bytes)
    except ValueError:
        pass
    last_varint(data, 1)  # never raises


@given(st.integers(0, 2**64 - 1), st.binary(max_size=4))
def test_read_varint_reads_what_encode_varint_writes(value: int, after: bytes) -> None:
    encoded = encode_varint(value)
    assert read_varint(b"\x99" + encoded + after, 1) == (value, 1 + len(encoded))
    assert read_varint(encoded[:-1], 0) is None  # truncated
    assert read_varint(b"\xff" * 10 + b"\x01", 0) is None  # past 64 bits
