"""The client behind trusted HTTP proxies: `X-Forwarded-For` and RFC 7239 `Forwarded`.

Anyone can write these headers, so they are read only when the connection comes from a
trusted proxy, and then from the right: each trusted proxy appends the address it received
from, so the right-most address that is not itself a trusted proxy is the client. An entry
that is not an address (`unknown`, an obfuscated `_name`, junk) ends the walk: what lies left
of it was written by someone nobody vouches for. No I/O; work is linear in the header size.

Which of the two headers is read is the operator's choice (`trustedForwardedHeaders`): a proxy
writes one of them and passes the other on as the client wrote it, so believing the one the
proxy does not write hands the choice of listener to the client.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pulsar_lookup_gateway.lookup.networks import Address, NetworkTable, parse_address

FORWARDED = "Forwarded"
X_FORWARDED_FOR = "X-Forwarded-For"
#: The headers the gateway can read, in its default order of preference.
HEADERS = (FORWARDED, X_FORWARDED_FOR)


def forwarded_for(
    forwarded: Iterable[str],
    x_forwarded_for: Iterable[str],
    trusted: NetworkTable[bool],
    believed: Sequence[str] = HEADERS,
) -> Address | None:
    """The client address the headers give, or None when they give none that can be
    believed. Only the headers named in `believed` (of HEADERS) are read, and of those the
    first the request carries: the two are never mixed. The caller has checked that the
    connection itself comes from a trusted proxy."""
    for name in believed:
        if name == FORWARDED:
            hops = _forwarded_hops(forwarded)
        elif name == X_FORWARDED_FOR:
            hops = [hop.strip() for line in x_forwarded_for for hop in line.split(",")] or None
        else:
            continue
        if hops is not None:
            break
    else:
        return None
    found: Address | None = None
    for hop in reversed(hops):
        address = _address(hop)
        if address is None:
            break
        found = address
        if not trusted.holds(address):
            break
    return found


def _forwarded_hops(lines: Iterable[str]) -> list[str] | None:
    """The `for=` value of each element of the Forwarded headers, in order."""
    hops = []
    for line in lines:
        for element in _split_outside_quotes(line, ","):
            value = None
            for pair in _split_outside_quotes(element, ";"):
                name, _, raw = pair.strip().partition("=")
                if name.strip().lower() == "for":
                    value = raw.strip().strip('"')
            hops.append(value or "")
    return hops or None


def _split_outside_quotes(text: str, separator: str) -> list[str]:
    parts, start, quoted = [], 0, False
    for index, char in enumerate(text):
        if char == '"':
            quoted = not quoted
        elif char == separator and not quoted:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return parts


def _address(hop: str) -> Address | None:
    """`192.0.2.1`, `192.0.2.1:4711`, `2001:db8::1`, `[2001:db8::1]:4711`."""
    hop = hop.strip()
    if hop.startswith("["):
        return parse_address(hop[1:].partition("]")[0])
    if hop.count(":") == 1:  # IPv4 with a port
        hop = hop.partition(":")[0]
    return parse_address(hop)
