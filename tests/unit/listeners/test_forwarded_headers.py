"""trustedForwardedHeaders: which forwarded header the gateway reads from a trusted proxy.

A proxy writes one of X-Forwarded-For and Forwarded and often passes the other on as the client
wrote it; the operator names the one the proxy writes, and the other is then never read.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pulsar_lookup_gateway.listeners.config.conf_file import parse_properties
from pulsar_lookup_gateway.listeners.config.model import ConfigError, GatewayConfig, validate_raw
from pulsar_lookup_gateway.listeners.endpoints.forwarded import (
    FORWARDED,
    HEADERS,
    X_FORWARDED_FOR,
    forwarded_for,
)
from pulsar_lookup_gateway.lookup.networks import NetworkTable, parse_cidr

TRUSTED = NetworkTable.build([(parse_cidr("10.0.0.0/24"), True)])
CLIENT, FORGED = "203.0.113.7", "10.1.2.3"  # what the proxy saw; what the client wrote


def client(forwarded: list[str], xff: list[str], believed: tuple[str, ...]) -> str | None:
    address = forwarded_for(forwarded, xff, TRUSTED, believed)
    return None if address is None else str(address)


def test_the_default_is_forwarded_then_x_forwarded_for() -> None:
    assert HEADERS == (FORWARDED, X_FORWARDED_FOR)
    assert client([f"for={FORGED}"], [CLIENT], HEADERS) == FORGED
    assert client([], [CLIENT], HEADERS) == CLIENT


def test_a_header_not_believed_is_never_read() -> None:
    # the proxy writes X-Forwarded-For and passes a client's Forwarded on
    only_xff = (X_FORWARDED_FOR,)
    assert client([f"for={FORGED}"], [CLIENT], only_xff) == CLIENT
    assert client([f"for={FORGED}"], [], only_xff) is None
    # the proxy writes Forwarded and passes a client's X-Forwarded-For on
    only_forwarded = (FORWARDED,)
    assert client([f"for={CLIENT}"], [FORGED], only_forwarded) == CLIENT
    assert client([], [FORGED], only_forwarded) is None


def test_the_first_believed_header_present_is_read_alone() -> None:
    xff_first = (X_FORWARDED_FOR, FORWARDED)
    assert client([f"for={FORGED}"], [CLIENT], xff_first) == CLIENT
    assert client([f"for={CLIENT}"], [], xff_first) == CLIENT
    # not mixed: an X-Forwarded-For naming nobody believable does not fall back to Forwarded
    assert client([f"for={CLIENT}"], ["unknown"], xff_first) is None


def test_none_believed_reads_nothing() -> None:
    assert client([f"for={FORGED}"], [FORGED], ()) is None


def test_a_generator_of_lines_not_believed_is_not_consumed() -> None:
    consumed: list[str] = []

    def lines() -> Iterator[str]:
        for line in [f"for={FORGED}"]:
            consumed.append(line)
            yield line

    assert forwarded_for(lines(), [CLIENT], TRUSTED, (X_FORWARDED_FOR,)) is not None
    assert consumed == []


# -- the key -----------------------------------------------------------------------------------

BASE = "metadataStoreUrl=zk:127.0.0.1:2181\n"


def headers_of(value: str | None) -> tuple[str, ...]:
    text = BASE if value is None else f"{BASE}trustedForwardedHeaders={value}\n"
    loaded = validate_raw(parse_properties(text, "test.conf"))
    assert loaded.warnings == []
    return loaded.config.trusted_forwarded_headers


def test_unset_is_todays_behaviour() -> None:
    assert headers_of(None) == (FORWARDED, X_FORWARDED_FOR)
    assert GatewayConfig.model_fields["trusted_forwarded_headers"].default == HEADERS


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("X-Forwarded-For", (X_FORWARDED_FOR,)),
        ("x-forwarded-for", (X_FORWARDED_FOR,)),  # case ignored, written as the gateway reads it
        ("FORWARDED", (FORWARDED,)),
        (" X-Forwarded-For , Forwarded ", (X_FORWARDED_FOR, FORWARDED)),
        ("", ()),  # blank: none (a TCP proxy writes no HTTP header)
    ],
)
def test_values(value: str, expected: tuple[str, ...]) -> None:
    assert headers_of(value) == expected


@pytest.mark.parametrize(
    ("value", "messages"),
    [
        (
            "X-Real-IP",
            [
                "trustedForwardedHeaders (test.conf:2): 'X-Real-IP' is not a header the "
                "gateway reads (Forwarded, X-Forwarded-For)"
            ],
        ),
        (
            "Forwarded,X-Client-IP,forwarded",
            [
                "trustedForwardedHeaders (test.conf:2): 'X-Client-IP' is not a header the "
                "gateway reads (Forwarded, X-Forwarded-For)",
                "trustedForwardedHeaders (test.conf:2): 'forwarded' is listed twice",
            ],
        ),
    ],
)
def test_problems_name_the_key_and_the_entry(value: str, messages: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        validate_raw(parse_properties(f"{BASE}trustedForwardedHeaders={value}\n", "test.conf"))
    assert [str(problem) for problem in info.value.problems] == messages
