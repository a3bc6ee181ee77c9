"""X-Forwarded-For and RFC 7239 Forwarded: who the client is behind trusted proxies.

The caller has already checked that the connection comes from a trusted proxy; these tests
give the headers such a proxy passed on and the table of trusted networks, and check which
address is believed: the right-most one that is not itself a trusted proxy, and nothing left
of an entry that is not an address.
"""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulsar_lookup_gateway.listeners.endpoints.forwarded import forwarded_for
from pulsar_lookup_gateway.lookup.networks import NetworkTable, parse_cidr

TRUSTED = NetworkTable.build(
    (parse_cidr(cidr), True) for cidr in ("10.0.0.0/24", "127.0.0.1/32", "2001:db8:ffff::/48")
)
NOBODY: NetworkTable[bool] = NetworkTable()


def client(
    forwarded: list[str] | None = None,
    xff: list[str] | None = None,
    trusted: NetworkTable[bool] = TRUSTED,
) -> str | None:
    address = forwarded_for(forwarded or [], xff or [], trusted)
    return None if address is None else str(address)


X_FORWARDED_FOR = [
    # one hop: the proxy that connected to us saw the client
    (["203.0.113.7"], "203.0.113.7"),
    # proxies append: the right-most untrusted entry is the client, a forged left part is not
    (["203.0.113.7, 10.0.0.5"], "203.0.113.7"),
    (["198.51.100.1, 203.0.113.7, 10.0.0.5, 127.0.0.1"], "203.0.113.7"),
    (["1.1.1.1,203.0.113.7"], "203.0.113.7"),
    # several header lines are one list, in order
    (["198.51.100.1, 203.0.113.7", "10.0.0.5"], "203.0.113.7"),
    (["198.51.100.1", "203.0.113.7"], "203.0.113.7"),
    # every hop trusted: the farthest one is where the request came from
    (["10.0.0.9, 10.0.0.5"], "10.0.0.9"),
    (["127.0.0.1"], "127.0.0.1"),
    # ports (IPv4 host:port, bracketed IPv6) and bare IPv6
    (["203.0.113.7:4711"], "203.0.113.7"),
    (["[2001:db8::1]:4711, 10.0.0.5"], "2001:db8::1"),
    (["2001:db8::1"], "2001:db8::1"),
    (["2001:db8::1, 2001:db8:ffff::2"], "2001:db8::1"),
    # IPv4-mapped IPv6 is the IPv4 address (and so a trusted proxy when written that way)
    (["203.0.113.7, ::ffff:10.0.0.5"], "203.0.113.7"),
    (["::ffff:203.0.113.7"], "203.0.113.7"),
    # blanks around entries
    (["   203.0.113.7   ,\t10.0.0.5 "], "203.0.113.7"),
    # an entry that is no address ends the walk: nothing left of it is believed
    (["203.0.113.7, unknown, 10.0.0.5"], "10.0.0.5"),
    (["203.0.113.7, junk"], None),
    (["unknown"], None),
    (["203.0.113.7, "], None),
    ([""], None),
    (["999.1.1.1"], None),
    (["203.0.113.7, 10.0.0.5:notaport:x"], None),
]


@pytest.mark.parametrize(("xff", "expected"), X_FORWARDED_FOR)
def test_x_forwarded_for(xff: list[str], expected: str | None) -> None:
    assert client(xff=xff) == expected


FORWARDED = [
    (["for=203.0.113.7;proto=https;by=10.0.0.5"], "203.0.113.7"),
    # names and values as RFC 7239 allows: any case, quoted, blanks around separators
    (['For="203.0.113.7"'], "203.0.113.7"),
    (["FOR=203.0.113.7"], "203.0.113.7"),
    ([" proto=http ; for = 203.0.113.7 "], "203.0.113.7"),
    # quoted IPv4 with a port, quoted bracketed IPv6 with and without a port
    (['for="203.0.113.7:47011"'], "203.0.113.7"),
    (['for="[2001:db8:cafe::17]:4711"'], "2001:db8:cafe::17"),
    (['for="[2001:db8:cafe::17]"'], "2001:db8:cafe::17"),
    # elements: comma-separated, right-most untrusted wins, across header lines
    (["for=198.51.100.1, for=203.0.113.7, for=10.0.0.5"], "203.0.113.7"),
    (["for=198.51.100.1, for=203.0.113.7", "for=10.0.0.5;by=127.0.0.1"], "203.0.113.7"),
    (['for=203.0.113.7, for="[2001:db8:ffff::1]:80"'], "203.0.113.7"),
    # a comma or semicolon inside quotes does not split
    (['for=203.0.113.7;host="a,b;c", for=10.0.0.5'], "203.0.113.7"),
    # obfuscated and unknown hops end the walk (RFC 7239 section 6)
    (["for=_hidden, for=10.0.0.5"], "10.0.0.5"),
    (["for=203.0.113.7, for=unknown, for=10.0.0.5"], "10.0.0.5"),
    (['for="_gazonk"'], None),
    (["for=unknown"], None),
    # an element without for= is a hop nobody named
    (["for=203.0.113.7, proto=https"], None),
    (["by=10.0.0.5"], None),
    # every hop trusted
    (["for=10.0.0.1, for=10.0.0.2"], "10.0.0.1"),
    # the last of two for= parameters in one element counts
    (["for=198.51.100.1;for=203.0.113.7"], "203.0.113.7"),
]


@pytest.mark.parametrize(("forwarded", "expected"), FORWARDED)
def test_forwarded(forwarded: list[str], expected: str | None) -> None:
    assert client(forwarded=forwarded) == expected


def test_forwarded_wins_over_x_forwarded_for() -> None:
    assert client(["for=203.0.113.7"], ["198.51.100.1"]) == "203.0.113.7"
    # even when it names no believable client: the two are not mixed
    assert client(["for=unknown"], ["198.51.100.1"]) is None
    # an empty Forwarded list is absent
    assert client([], ["198.51.100.1"]) == "198.51.100.1"


def test_nothing_to_go_by() -> None:
    assert client() is None
    assert client([], []) is None


def test_with_no_trusted_network_the_right_most_entry_is_the_client() -> None:
    """The caller believes the headers only from a trusted peer; with an empty table no hop
    is a proxy, so the entry the peer wrote is all that counts."""
    assert client(xff=["198.51.100.1, 203.0.113.7"], trusted=NOBODY) == "203.0.113.7"
    assert client(["for=198.51.100.1, for=10.0.0.5"], trusted=NOBODY) == "10.0.0.5"


def test_a_generator_of_header_lines_is_read_once() -> None:
    lines = (line for line in ["198.51.100.1", "203.0.113.7, 10.0.0.5"])
    assert forwarded_for([], lines, TRUSTED) == ipaddress.ip_address("203.0.113.7")


# -- hostile input: anything a client can write --------------------------------------------------

HEADER_TEXT = st.text(
    alphabet=st.sampled_from([*'0123456789abcdef.:[]_,;="\\ \tforFOR%-unknow', "\x00", "é"]),
    max_size=200,
) | st.text(max_size=200)


@given(st.lists(HEADER_TEXT, max_size=4), st.lists(HEADER_TEXT, max_size=4))
def test_never_raises_on_any_header_text(forwarded: list[str], xff: list[str]) -> None:
    address = forwarded_for(forwarded, xff, TRUSTED)
    assert address is None or isinstance(address, ipaddress.IPv4Address | ipaddress.IPv6Address)


HOPS = {
    "203.0.113.7": "203.0.113.7",
    "10.0.0.5": "10.0.0.5",  # trusted
    "[2001:db8::1]:1": "2001:db8::1",
    "unknown": None,
}


@given(st.lists(st.sampled_from(sorted(HOPS))))
def test_a_chain_is_believed_from_the_right(hops: list[str]) -> None:
    """The model: walk from the right, stop at a non-address, keep the last address seen,
    stop after the first untrusted one. Both headers give the same answer."""
    expected = None
    for hop in reversed(hops):
        if HOPS[hop] is None:
            break
        expected = HOPS[hop]
        if hop != "10.0.0.5":
            break
    assert client(xff=[", ".join(hops)]) == expected
    as_forwarded = ", ".join(f'for="{hop}"' for hop in hops)
    assert client([as_forwarded] if hops else []) == expected


BIG = 200_000  # characters: a header far beyond what any HTTP server accepts
FAR = "203.0.113.7"  # a client behind a very long chain of trusted proxies


@pytest.mark.parametrize(
    ("text", "by_forwarded", "by_x_forwarded_for"),
    [
        # long chains of trusted proxies are walked to the client at their far end
        (f"{FAR}, " + "10.0.0.5, " * (BIG // 10) + "10.0.0.5", None, FAR),
        (f"for={FAR}, " + "for=10.0.0.5, " * (BIG // 14) + "for=10.0.0.5", FAR, None),
        # one element naming for= many times: the last one counts
        ("for=10.0.0.5;" * (BIG // 13), "10.0.0.5", None),
        # junk names no client
        ("," * BIG, None, None),
        (";" * BIG, None, None),
        ('"' * BIG, None, None),
        ('"' + "," * BIG, None, None),  # an unterminated quote
        ("for=" + "1" * BIG, None, None),
        ("[" * BIG, None, None),
        (":" * BIG, None, None),
        ("%" * BIG, None, None),
    ],
    ids=lambda value: repr(value[:12]) if isinstance(value, str) else repr(value),
)
def test_huge_headers_get_their_answer(
    text: str, by_forwarded: str | None, by_x_forwarded_for: str | None
) -> None:
    """The work is linear in the header's size (no timing is asserted: a quadratic split
    would make these runs take minutes), and the answer is the one a short header gets."""

    def expected(address: str | None) -> object:
        return ipaddress.ip_address(address) if address is not None else None

    assert forwarded_for([text], [], TRUSTED) == expected(by_forwarded)
    assert forwarded_for([], [text], TRUSTED) == expected(by_x_forwarded_for)
    # Forwarded wins when a request carries both, however many of each
    assert forwarded_for([text] * 4, [text] * 4, TRUSTED) == expected(by_forwarded)
