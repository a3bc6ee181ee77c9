"""Client networks: the prefix-length index matches what a scan of every network gives."""

from __future__ import annotations

import ipaddress

from hypothesis import given
from hypothesis import strategies as st

from pulsar_lookup_gateway.lookup.networks import Address, Network, NetworkTable, parse_address

V4 = st.builds(
    lambda address, length: ipaddress.ip_network(f"{address}/{length}", strict=False),
    st.ip_addresses(v=4),
    st.integers(0, 32),
)
V6 = st.builds(
    lambda address, length: ipaddress.ip_network(f"{address}/{length}", strict=False),
    st.ip_addresses(v=6),
    st.integers(0, 128),
)


def scanned(networks: dict[Network, int], address: Address) -> int | None:
    """The value of the most specific network holding `address`, the slow way."""
    holding = [n for n in networks if n.version == address.version and address in n]
    return networks[max(holding, key=lambda n: n.prefixlen)] if holding else None


@given(
    st.dictionaries(V4 | V6, st.integers(), max_size=30),
    st.lists(st.ip_addresses(), max_size=30),
)
def test_the_index_matches_a_scan(networks: dict[Network, int], addresses: list[Address]) -> None:
    table = NetworkTable.build(networks.items())
    near = [n.network_address for n in networks] + [n.broadcast_address for n in networks]
    for address in [*addresses, *near]:
        assert table.match(address) == scanned(networks, address)


def test_addresses_parse_as_clients_send_them() -> None:
    assert parse_address("::ffff:10.1.2.3") == ipaddress.IPv4Address("10.1.2.3")
    assert parse_address("fe80::1%eth0") == ipaddress.IPv6Address("fe80::1")
    assert parse_address("?") is None and parse_address("/run/sock") is None
