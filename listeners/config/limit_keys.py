"""The limits and timeouts keys: lookups in flight, connections and frames, the ownership
watch's streams, and the graceful stop."""

from __future__ import annotations

from pydantic import Field

from pulsar_lookup_gateway.listeners.config.key_group import KeyGroup


class LimitKeys(KeyGroup):
    max_concurrent_lookup_request: int = Field(50_000, ge=1)

    # Connections (binary protocol). The frame cap is maxMessageSize + 10 KiB, as in Pulsar.
    max_message_size: int = Field(5 * 1024 * 1024, ge=1024)
    # Bounds on what strangers can hold open. Pulsar's brokerMaxConnections defaults to
    # unlimited; a gateway faces the open network, so it gets a finite default.
    broker_max_connections: int = Field(10_000, ge=0)  # 0: unlimited
    max_connections_per_ip: int = Field(0, ge=0)  # Pulsar's key; 0: no per-address cap
    max_http_server_connections: int = Field(2048, ge=0)  # Pulsar's key, per HTTP socket
    keep_alive_interval_seconds: int = Field(30, ge=0)  # 0: never ping
    connection_handshake_timeout_seconds: float = Field(10.0, gt=0)

    # The ownership watch (GET /lookup/v2/watch): what its clients may hold. 0: no limit.
    watch_max_topics_per_stream: int = Field(10_000, ge=1)
    watch_max_streams_per_address: int = Field(64, ge=0)
    watch_max_streams_per_role: int = Field(1_024, ge=0)
    watch_max_frame_bytes: int = Field(1024 * 1024, ge=1024)
    # A stream whose client reads nothing of what it is sent for this long is closed.
    watch_stalled_reader_timeout_seconds: float = Field(30.0, gt=0)

    # Graceful stop: how long in-flight lookups may take once a stop is asked for.
    shutdown_timeout_seconds: float = Field(5.0, gt=0)
