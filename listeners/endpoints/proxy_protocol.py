"""The PROXY protocol (HAProxy's, versions 1 and 2), sans-IO: bytes in, the client's address out.

A load balancer that terminates nothing but TCP writes one header before the client's bytes,
naming the client's address. `parse` takes the bytes received so far and answers "need more"
(None), the header and how many bytes it took, or ProxyProtocolError. Version 1 is a text line
of at most 107 bytes; version 2 a 16-byte binary header and a body of at most 65,535 bytes whose
address block is read and whose TLVs are skipped. A v2 LOCAL command (the balancer's own health
check) and v1 UNKNOWN carry no client: the peer's address stands. UNIX-socket and datagram
addresses are refused: this is a TCP service.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

V1_PREFIX = b"PROXY "
V1_MAX = 107  # the longest v1 line, CRLF included (the specification's bound)
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
V2_HEADER = 16
MAX_HEADER = V2_HEADER + 0xFFFF
# Both versions are at least this long, so this many bytes can be read before knowing which.
MIN_HEADER = 8

_V2_INET, _V2_INET6, _V2_UNIX = 0x1, 0x2, 0x3
_V2_STREAM = 0x1
_V2_LOCAL, _V2_PROXY = 0x0, 0x1
_INET_BLOCK, _INET6_BLOCK = 12, 36


class ProxyProtocolError(ValueError):
    """The bytes are not a PROXY header we accept; the message names the fault, not the bytes."""


@dataclass(frozen=True, slots=True)
class ProxyHeader:
    version: int  # 1 or 2
    address: str | None  # the client's IP address; None: use the peer's (LOCAL, UNKNOWN)
    port: int | None = None


def parse(data: bytes | bytearray) -> tuple[ProxyHeader, int] | None:
    """The header at the start of `data` and its length in bytes; None while incomplete."""
    if data[: len(V2_SIGNATURE)] == V2_SIGNATURE[: len(data)]:
        return _parse_v2(data) if data else None
    if data[: len(V1_PREFIX)] == V1_PREFIX[: len(data)]:
        return _parse_v1(data)
    raise ProxyProtocolError("the connection did not start with a PROXY protocol header")


def limit(data: bytes | bytearray) -> int:
    """How many bytes the header starting with `data` (a valid start: `parse` said "need
    more") can have at most: reading no further never takes a byte of what follows it."""
    if not data:
        return MIN_HEADER
    if data[:1] == V1_PREFIX[:1]:
        return V1_MAX
    if len(data) < V2_HEADER:
        return V2_HEADER
    return V2_HEADER + int(struct.unpack_from(">H", data, 14)[0])


def _parse_v1(data: bytes | bytearray) -> tuple[ProxyHeader, int] | None:
    end = data.find(b"\r\n", 0, V1_MAX)
    if end < 0:
        if len(data) >= V1_MAX:
            raise ProxyProtocolError(f"a PROXY v1 line longer than {V1_MAX} bytes")
        return None
    try:
        line = data[:end].decode("ascii")
    except UnicodeDecodeError:
        raise ProxyProtocolError("a PROXY v1 line that is not ASCII") from None
    fields = line.split(" ")
    if fields[1:2] == ["UNKNOWN"]:
        return ProxyHeader(1, None), end + 2
    if len(fields) != 6 or fields[1] not in ("TCP4", "TCP6"):
        raise ProxyProtocolError("a PROXY v1 line without TCP4/TCP6 and four fields")
    kind = ipaddress.IPv4Address if fields[1] == "TCP4" else ipaddress.IPv6Address
    source = _v1_address(kind, fields[2])
    _v1_address(kind, fields[3])
    port = _v1_port(fields[4])
    _v1_port(fields[5])
    return ProxyHeader(1, source, port), end + 2


def _v1_address(kind: type[ipaddress.IPv4Address | ipaddress.IPv6Address], text: str) -> str:
    try:
        return str(kind(text))
    except ValueError:
        raise ProxyProtocolError(f"a PROXY v1 line with a malformed {kind.__name__}") from None


def _v1_port(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > 5 or int(text) > 0xFFFF:
        raise ProxyProtocolError("a PROXY v1 line with a malformed port")
    return int(text)


def _parse_v2(data: bytes | bytearray) -> tuple[ProxyHeader, int] | None:
    if len(data) < V2_HEADER:
        return None
    version_command, family_transport, length = struct.unpack_from(">BBH", data, 12)
    if version_command >> 4 != 2:
        raise ProxyProtocolError(f"a PROXY v2 signature with version {version_command >> 4}")
    command = version_command & 0xF
    if command not in (_V2_LOCAL, _V2_PROXY):
        raise ProxyProtocolError(f"a PROXY v2 header with unknown command {command}")
    total = V2_HEADER + length
    if len(data) < total:
        return None
    if command == _V2_LOCAL:
        return ProxyHeader(2, None), total
    family, transport = family_transport >> 4, family_transport & 0xF
    if family == 0:  # AF_UNSPEC: the balancer does not know; the peer's address stands
        return ProxyHeader(2, None), total
    if family == _V2_UNIX:
        raise ProxyProtocolError("a PROXY v2 header for a UNIX socket (only TCP is served)")
    if family not in (_V2_INET, _V2_INET6):
        raise ProxyProtocolError(f"a PROXY v2 header with unknown address family {family}")
    if transport != _V2_STREAM:
        raise ProxyProtocolError("a PROXY v2 header for a datagram or unknown transport")
    size, width = (_INET_BLOCK, 4) if family == _V2_INET else (_INET6_BLOCK, 16)
    if length < size:
        raise ProxyProtocolError(f"a PROXY v2 address block of {length} bytes, below {size}")
    raw = bytes(data[V2_HEADER : V2_HEADER + width])
    address = ipaddress.IPv4Address(raw) if width == 4 else ipaddress.IPv6Address(raw)
    (port,) = struct.unpack_from(">H", data, V2_HEADER + 2 * width)
    # What follows the address block up to `length` is TLVs (ALPN, authority, SSL, ...): the
    # gateway needs none of them, so they are skipped without being read.
    return ProxyHeader(2, str(address), port), total
