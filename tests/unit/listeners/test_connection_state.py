"""The binary connection's one state and the moves it may make (listeners.binary.state)."""

from __future__ import annotations

import pytest

from pulsar_lookup_gateway.listeners.binary.state import TRANSITIONS, ConnectionState, move

AWAITING, AUTHENTICATING, CONNECTED, CLOSING = (
    ConnectionState.AWAITING_CONNECT,
    ConnectionState.AUTHENTICATING,
    ConnectionState.CONNECTED,
    ConnectionState.CLOSING,
)


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (AWAITING, AUTHENTICATING),  # CONNECT on a socket that requires credentials
        (AWAITING, CONNECTED),  # CONNECT where none are required
        (AUTHENTICATING, CONNECTED),
        (AUTHENTICATING, CLOSING),  # the credentials prove no role
        (AWAITING, CLOSING),
        (CONNECTED, CLOSING),
        (CLOSING, CLOSING),  # closing twice (the peer goes away while we close) is no news
    ],
)
def test_the_moves_a_connection_makes(start: ConnectionState, end: ConnectionState) -> None:
    assert move(start, end) is end


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (CONNECTED, AWAITING),  # no second handshake
        (CONNECTED, AUTHENTICATING),
        (AUTHENTICATING, AWAITING),
        (CLOSING, CONNECTED),  # nothing comes back from closing
        (CLOSING, AWAITING),
    ],
)
def test_a_connection_never_goes_back(start: ConnectionState, end: ConnectionState) -> None:
    with pytest.raises(ValueError, match=f"from {start.value} to {end.value}"):
        move(start, end)


def test_every_state_can_close() -> None:
    assert all(CLOSING in TRANSITIONS[state] for state in ConnectionState)
