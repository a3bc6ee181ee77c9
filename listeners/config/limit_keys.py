"""The limits and timeouts keys: lookups in flight, connections and frames, the ownership
watch's streams, the byte budget of what is held for clients, and the graceful stop."""

from __future__ import annotations

from pydantic import Field

from pulsar_lookup_gateway.listeners.config.key_group import KeyGroup

MIB = 1024 * 1024


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

    # The one byte budget (serving.held_bytes): what the gateway holds on clients' behalf.
    held_bytes_max: int = Field(192 * MIB, ge=2 * MIB)
    """The most the gateway holds on its clients' behalf, in bytes, whatever they send:
    forwarded answers not yet written out, unread send buffers, and the ownership watch's
    queued messages, names and state (heldBytesMaxUnread of it for what clients asked for and
    have not read, the rest for what watch streams hold while they watch). A charge over a
    share first closes clients that do not read what they hold (longest stalled first), then
    is refused: a forwarded answer with 503 (HTTP) or a closed connection (binary), a watch
    stream with 4008 `limit_exceeded`. Under `run --workers N` each worker holds 1/N of it
    and of heldBytesMaxUnread: this is the process's total."""
    held_bytes_max_unread: int = Field(64 * MIB, ge=MIB)
    """The share of heldBytesMax for what clients asked for and have not read: forwarded
    answers (a schema, a topic list) until written out, binary send buffers over 1 MiB, watch
    messages queued and watch requests being read. What strangers can pin by asking and not
    reading stops here; what watch streams hold while they watch (each name's UTF-8 bytes +
    512 for its state, about 55 MB for 100,000 topics of 40-byte names) has the rest
    (heldBytesMax minus this), which they cannot take. Less than heldBytesMax."""
    held_bytes_max_per_client: int = Field(16 * MIB, ge=64 * 1024)
    """The most the gateway holds for one client connection or watch stream in each share (a
    5 MB schema fits; a stream's names fill it in the watch share, its queued messages in the
    unread share). At most heldBytesMax; under `run --workers N`, at most a worker's share of
    it."""

    shutdown_timeout_seconds: float = Field(5.0, gt=0)
    """On SIGTERM or SIGINT, how long lookups in flight may take before connections are
    closed."""
