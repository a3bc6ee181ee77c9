"""The one state of a binary connection, and the moves it may make."""

from __future__ import annotations

from enum import Enum


class ConnectionState(Enum):
    AWAITING_CONNECT = "awaiting CONNECT"  # only CONNECT is read, in small frames
    AUTHENTICATING = "authenticating"  # CONNECT came; its credentials are being checked
    CONNECTED = "connected"  # CONNECTED sent: requests are answered
    CLOSING = "closing"  # nothing more is read; what is queued is written, then closed


#: Where each state may go (a connection never goes back, and CLOSING is the end).
TRANSITIONS: dict[ConnectionState, frozenset[ConnectionState]] = {
    ConnectionState.AWAITING_CONNECT: frozenset(
        {ConnectionState.AUTHENTICATING, ConnectionState.CONNECTED, ConnectionState.CLOSING}
    ),
    ConnectionState.AUTHENTICATING: frozenset({ConnectionState.CONNECTED, ConnectionState.CLOSING}),
    ConnectionState.CONNECTED: frozenset({ConnectionState.CLOSING}),
    ConnectionState.CLOSING: frozenset({ConnectionState.CLOSING}),
}


def move(current: ConnectionState, to: ConnectionState) -> ConnectionState:
    """`to`, when the state machine allows it; ValueError otherwise (a bug of ours)."""
    if to not in TRANSITIONS[current]:
        raise ValueError(f"a connection cannot go from {current.value} to {to.value}")
    return to
