"""The PROXY protocol parser (v1 and v2): table tests and fuzzing."""

from __future__ import annotations

import ipaddress
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulsar_lookup_gateway.listeners.endpoints.proxy_protocol import (
    MAX_HEADER,
    V1_MAX,
    V2_SIGNATURE,
    ProxyHeader,
    ProxyProtocolError,
    limit,
    parse,
)

TAIL = b"\x16\x03\x01 the client's first bytes"


def v2(command: int, family: int, body: bytes, version: int = 2) -> bytes:
    return V2_SIGNATURE + struct.pack(">BBH", version << 4 | command, family, len(body)) + body


def inet(src: str, dst: str, sport: int, dport: int) -> bytes:
    s, d = ipaddress.ip_address(src), ipaddress.ip_address(dst)
    return s.packed + d.packed + struct.pack(">HH", sport, dport)


def tlv(kind: int, value: bytes) -> bytes:
    return struct.pack(">BH", kind, len(value)) + value


VALID = [
    (b"PROXY TCP4 10.1.2.3 127.0.0.1 40000 6650\r\n", ProxyHeader(1, "10.1.2.3", 40000)),
    (b"PROXY TCP6 2001:db8::1 ::1 5 6650\r\n", ProxyHeader(1, "2001:db8::1", 5)),
    (b"PROXY UNKNOWN\r\n", ProxyHeader(1, None)),
    (b"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n", ProxyHeader(1, None)),
    (v2(1, 0x11, inet("10.9.8.7", "127.0.0.1", 1234, 6650)), ProxyHeader(2, "10.9.8.7", 1234)),
    (
        v2(
            1,
            0x21,
            inet("2001:db8::9", "::1", 80, 6650)
            + tlv(0x02, b"gw.example")
            + tlv(0x20, b"\x01" * 40),
        ),
        ProxyHeader(2, "2001:db8::9", 80),
    ),
    (v2(0, 0x00, b""), ProxyHeader(2, None)),  # LOCAL: a health check of the balancer
    (v2(0, 0x11, inet("10.0.0.1", "10.0.0.2", 1, 2)), ProxyHeader(2, None)),  # LOCAL ignores it
    (v2(1, 0x00, b"\x00" * 4), ProxyHeader(2, None)),  # UNSPEC
    (
        v2(1, 0x11, inet("10.1.1.1", "10.1.1.2", 1, 2) + b"\x00" * 65_000),
        ProxyHeader(2, "10.1.1.1", 1),
    ),
]  # fmt: skip


@pytest.mark.parametrize(("header", "expected"), VALID)
def test_valid_headers(header: bytes, expected: ProxyHeader) -> None:
    assert parse(header + TAIL) == (expected, len(header))
    assert limit(header[:-1]) >= len(header)  # reading up to the limit never overshoots
    for cut in {*range(min(len(header), 200)), *range(max(len(header) - 200, 0), len(header))}:
        assert parse(header[:cut]) is None, cut


INVALID = [
    (b"GET / HTTP/1.1\r\n", "did not start with a PROXY"),
    (b"\x16\x03\x01\x02\x00", "did not start with a PROXY"),
    (b"PROXY TCP4 10.1.2.3 127.0.0.1 40000\r\n", "four fields"),
    (b"PROXY UDP4 10.1.2.3 127.0.0.1 1 2\r\n", "TCP4/TCP6"),
    (b"PROXY TCP4 10.1.2.300 127.0.0.1 1 2\r\n", "malformed IPv4Address"),
    (b"PROXY TCP4 ::1 127.0.0.1 1 2\r\n", "malformed IPv4Address"),
    (b"PROXY TCP6 10.0.0.1 ::1 1 2\r\n", "malformed IPv6Address"),
    (b"PROXY TCP4 10.1.2.3 127.0.0.1 65536 2\r\n", "malformed port"),
    (b"PROXY TCP4 10.1.2.3 127.0.0.1 -1 2\r\n", "malformed port"),
    (b"PROXY TCP4 10.1.2.3  127.0.0.1 1 2\r\n", "four fields"),
    ("PROXY TCP4 10.1.2.3 127.0.0.1 1 ²\r\n".encode(), "not ASCII"),
    (b"PROXY TCP4 " + b"1" * 120 + b"\r\n", f"longer than {V1_MAX}"),
    (v2(1, 0x11, b"", version=1), "version 1"),
    (v2(2, 0x11, inet("10.0.0.1", "10.0.0.2", 1, 2)), "unknown command 2"),
    (v2(1, 0x31, b"\x00" * 216), "UNIX socket"),
    (v2(1, 0x12, inet("10.0.0.1", "10.0.0.2", 1, 2)), "datagram"),
    (v2(1, 0x41, b"\x00" * 12), "unknown address family 4"),
    (v2(1, 0x11, b"\x00" * 11), "address block of 11 bytes"),
    (v2(1, 0x21, b"\x00" * 35), "address block of 35 bytes"),
]


@pytest.mark.parametrize(("data", "message"), INVALID)
def test_invalid_headers(data: bytes, message: str) -> None:
    with pytest.raises(ProxyProtocolError, match=message):
        parse(data + TAIL)


def test_error_messages_never_quote_the_bytes() -> None:
    with pytest.raises(ProxyProtocolError) as raised:
        parse(b"PROXY TCP4 secret-token 127.0.0.1 1 2\r\n")
    assert "secret" not in str(raised.value)


@given(st.binary(max_size=300))
def test_any_bytes_give_a_header_need_more_or_a_protocol_error(data: bytes) -> None:
    try:
        result = parse(data)
    except ProxyProtocolError:
        return
    if result is not None:
        _, used = result
        assert 0 < used <= min(len(data), MAX_HEADER)
    else:
        assert len(data) < MAX_HEADER


@given(
    st.sampled_from([h for h, _ in VALID]),
    st.binary(max_size=64),
    st.lists(st.integers(min_value=1, max_value=40), max_size=8),
)
def test_split_anywhere_and_followed_by_anything(
    header: bytes, tail: bytes, steps: list[int]
) -> None:
    """Fed in arbitrary pieces, as a socket delivers them, the header is found exactly once,
    at the same length, whatever follows it."""
    data = header + tail
    seen = b""
    for step in [*steps, len(data)]:
        seen = data[: len(seen) + step]
        result = parse(seen)
        if result is not None:
            assert result[1] == len(header)
            return
        assert len(seen) < len(header)
    raise AssertionError("never complete")


@given(st.binary(min_size=1, max_size=40))
def test_v2_with_random_tlvs_is_accepted(tlvs: bytes) -> None:
    header = v2(1, 0x11, inet("192.0.2.5", "192.0.2.6", 9, 10) + tlvs)
    assert parse(header) == (ProxyHeader(2, "192.0.2.5", 9), len(header))
