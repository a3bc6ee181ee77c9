"""Client networks: CIDR parsing and most-specific-prefix matching, with no I/O.

Used for `listener.<name>.clientCidrs` (which listener a client's network gets) and for
`trustedProxyCidrs` (whose PROXY headers and forwarded headers are believed).
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
V = TypeVar("V")


def parse_cidr(text: str) -> Network:
    """`10.0.0.0/8`, `2001:db8::/32`, or a bare address (a /32 or /128). ValueError says what
    is wrong; host bits set (`10.1.0.0/8`) are refused rather than silently widened."""
    text = text.strip()
    try:
        return ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        try:
            widened = ipaddress.ip_network(text, strict=False)
        except ValueError:
            raise ValueError(f"'{text}' is not an IPv4 or IPv6 CIDR ({exc})") from None
        raise ValueError(f"'{text}' has host bits set; did you mean {widened}?") from None


# ipaddress takes ~5 us to parse an address; clients come back with the same one.
@functools.lru_cache(maxsize=4096)
def parse_address(text: str) -> Address | None:
    """The address in `text` (IPv4-mapped IPv6 addresses as IPv4; a zone index dropped);
    None when it is not an IP address (a UNIX socket, "?")."""
    try:
        address = ipaddress.ip_address(text.partition("%")[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@dataclass(frozen=True, slots=True)
class NetworkTable(Generic[V]):
    """Networks with a value each; `match` gives the value of the most specific network that
    holds an address. Entries are kept most specific first. Matching costs one dict read per
    distinct prefix length (an address shifted to that length is the key), not one
    containment test per network."""

    entries: tuple[tuple[Network, V], ...] = ()
    # (IP version, prefix length, {network address >> host bits: value}), longest prefix first
    by_length: tuple[tuple[int, int, dict[int, V]], ...] = ()

    @classmethod
    def build(cls, pairs: Iterable[tuple[Network, V]]) -> NetworkTable[V]:
        """ValueError when one network is given twice (whatever the values)."""
        seen: dict[Network, V] = {}
        for network, value in pairs:
            if network in seen:
                raise ValueError(f"{network} is given twice")
            seen[network] = value
        ordered = sorted(seen.items(), key=lambda item: -item[0].prefixlen)
        tables: dict[tuple[int, int], dict[int, V]] = {}
        for network, value in ordered:
            host_bits = network.max_prefixlen - network.prefixlen
            table = tables.setdefault((network.version, network.prefixlen), {})
            table[int(network.network_address) >> host_bits] = value
        by_length = tuple(
            (version, length, table)
            for (version, length), table in sorted(tables.items(), key=lambda item: -item[0][1])
        )
        return cls(tuple(ordered), by_length)

    def __bool__(self) -> bool:
        return bool(self.entries)

    def match(self, address: Address | None) -> V | None:
        if address is None:
            return None
        version, number, bits = address.version, int(address), address.max_prefixlen
        for table_version, length, table in self.by_length:
            if table_version == version:
                value = table.get(number >> (bits - length))
                if value is not None:
                    return value
        return None

    def holds(self, address: Address | None) -> bool:
        return self.match(address) is not None
