"""The protobuf wire format at its lowest level: varints and fields of serialized messages.

The codec decodes and encodes with the generated messages; these helpers are for the bodies our
.proto leaves out (a request id inside a command we refuse, a test peer's PRODUCER), read and
written field by field. Pure functions of bytes.
"""

from __future__ import annotations

from collections.abc import Iterator

VARINT, FIXED64, LENGTH_DELIMITED, FIXED32 = 0, 1, 2, 5
_UINT64 = 0xFFFFFFFFFFFFFFFF


def encode_varint(value: int) -> bytes:
    """A non-negative integer as a base-128 varint."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def varint_field(number: int, value: int) -> bytes:
    """Field `number` holding `value` as a varint (negative values as their 64-bit form)."""
    return encode_varint(number << 3 | VARINT) + encode_varint(value & _UINT64)


def bytes_field(number: int, value: bytes) -> bytes:
    """Field `number` holding `value` length-delimited (bytes, strings, messages)."""
    return encode_varint(number << 3 | LENGTH_DELIMITED) + encode_varint(len(value)) + value


def read_varint(data: bytes, pos: int) -> tuple[int, int] | None:
    """(value, position after it) of the varint at `pos`; None where it is truncated or runs
    past 64 bits. The one varint reader of the project."""
    value = shift = 0
    end = len(data)
    while pos < end and shift < 64:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    return None


def iter_fields(message: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) for each varint (an int) and length-delimited field (bytes) of a
    serialized message, in order; fixed-width fields are skipped. Raises ValueError where the
    bytes stop being a message (after yielding the fields before that point)."""
    pos, end = 0, len(message)

    def varint() -> int:
        nonlocal pos
        read = read_varint(message, pos)
        if read is None:
            raise ValueError("truncated varint")
        value, pos = read
        return value

    while pos < end:
        tag = varint()
        number, wire_type = tag >> 3, tag & 7
        if wire_type == VARINT:
            yield number, varint()
        elif wire_type == LENGTH_DELIMITED:
            size = varint()  # read before slicing: `pos` moves past the length first
            if pos + size > end:
                raise ValueError("truncated field")
            yield number, message[pos : pos + size]
            pos += size
        elif wire_type == FIXED64:
            pos += 8
        elif wire_type == FIXED32:
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire_type}")


def read_fields(message: bytes) -> dict[int, list[int | bytes]]:
    """Field number -> its values, as `iter_fields` reads them; ValueError for bytes that are
    not a message."""
    fields: dict[int, list[int | bytes]] = {}
    for number, value in iter_fields(message):
        fields.setdefault(number, []).append(value)
    return fields


def last_varint(message: bytes, number: int) -> int | None:
    """The value of varint field `number` (the last one, as protobuf reads a repeated scalar
    into a singular field), as an unsigned 64-bit integer; None when absent. Lenient: a message
    that stops parsing gives what was read before that point."""
    found: int | None = None
    try:
        for field, value in iter_fields(message):
            if field == number and isinstance(value, int):
                found = value & _UINT64
    except ValueError:
        pass
    return found
