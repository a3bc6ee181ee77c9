"""The limits and timeouts keys: lookups in flight, connections and frames, the ownership
watch's streams, and the graceful stop."""

from __future__ import annotations

from pydantic import Field

from pulsar_lookup_gateway.listeners.config.key_group import KeyGroup


class LimitKeys(KeyGroup):
    max_concurrent_lookup_request: int = Field(50_000, ge=1)
    """Lookups in flight at once; the excess is refused (binary `TooManyRequests`, HTTP 503)."""

    # Connections (binary protocol). The frame cap is maxMessageSize + 10 KiB, as in Pulsar.
    max_message_size: int = Field(5 * 1024 * 1024, ge=1024)
    """Sent in CONNECTED; a binary frame may be this plus 10 KiB, a larger one closes the
    connection."""
    # Bounds on what strangers can hold open. Pulsar's brokerMaxConnections defaults to
    # unlimited; a gateway faces the open network, so it gets a finite default.
    broker_max_connections: int = Field(10_000, ge=0)
    """Binary connections per socket (0: unlimited); beyond it a connection is closed at once.
    Pulsar's default is unlimited; a gateway facing the open network gets a finite one."""
    max_connections_per_ip: int = Field(0, ge=0)
    """Binary connections per client address per socket (0: no cap); beyond it a connection is
    closed at once."""
    max_http_server_connections: int = Field(2048, ge=0)
    """HTTP connections per socket (0: unlimited); beyond it a connection is closed at once."""
    keep_alive_interval_seconds: int = Field(30, ge=0)
    """Ping idle binary clients this often; a client that has not answered by the next ping is
    dropped (0: never ping)."""
    connection_handshake_timeout_seconds: float = Field(10.0, gt=0)
    """A binary client must send CONNECT within this (on a TLS socket the TLS handshake has the
    same bound first); an HTTP client must send each request head within it."""

    # The ownership watch (GET /lookup/v2/watch): what its clients may hold. 0: no limit.
    watch_max_topics_per_stream: int = Field(10_000, ge=1)
    """Topics one ownership-watch stream may hold; a subscribe going over it is refused
    (`limit_exceeded`, close 4008)."""
    watch_max_streams_per_address: int = Field(64, ge=0)
    """Ownership-watch streams from one client address (0: no limit)."""
    watch_max_streams_per_role: int = Field(1_024, ge=0)
    """Ownership-watch streams of one authenticated role (0: no limit)."""
    watch_max_frame_bytes: int = Field(1024 * 1024, ge=1024)
    """The largest ownership-watch request frame; a larger one closes the stream (1009)."""
    watch_stalled_reader_timeout_seconds: float = Field(30.0, gt=0)
    """An ownership-watch stream whose client reads nothing of what it is sent for this long is
    closed."""

    shutdown_timeout_seconds: float = Field(5.0, gt=0)
    """On SIGTERM or SIGINT, how long lookups in flight may take before connections are
    closed."""
