"""What one binary socket promises its clients: versions, frame sizes, connection caps."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import metadata

from pulsar_lookup_gateway.listeners.protocol.codec import DEFAULT_MAX_FRAME_SIZE
from pulsar_lookup_gateway.lookup.networks import NetworkTable

#: The newest protocol version this server speaks; CONNECTED answers min(client's, this).
PROTOCOL_VERSION = 21
#: Pulsar's frame limit is maxMessageSize plus this much room for the command and metadata.
FRAME_PADDING = 10 * 1024
#: Largest frame accepted before CONNECTED: a CONNECT with a large token fits many times over,
#: and a stranger cannot make the gateway buffer maxMessageSize per connection.
PRE_CONNECT_MAX_FRAME = 64 * 1024


def _package_version() -> str:
    try:
        return metadata.version("pulsar-lookup-gateway")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0+unknown"


SERVER_VERSION = f"pulsar-lookup-gateway-{_package_version()}"


@dataclass(frozen=True, slots=True)
class BinarySettings:
    """Per-socket connection settings. ``max_message_size`` (announced in CONNECTED) defaults to
    ``max_frame_size`` minus Pulsar's 10 KiB of frame padding."""

    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    max_connections: int = 0  # 0: unlimited
    max_connections_per_ip: int = 0  # 0: no cap per client address
    keep_alive_interval: float = 30.0  # 0: never ping
    handshake_timeout: float = 10.0
    max_message_size: int | None = None
    reuse_port: bool = False  # SO_REUSEPORT: worker processes share the port (`--workers`)
    # Answer a repeated LOOKUP from its bytes (the answer memo); off: always in full
    # (the reference the memo is tested and measured against).
    memoise_lookups: bool = True
    # Clients come through balancers that write a PROXY header first; believed only from these.
    proxy_protocol: bool = False
    trusted_proxies: NetworkTable[bool] = field(default_factory=NetworkTable)

    def __post_init__(self) -> None:
        if self.max_frame_size < 8:
            raise ValueError("max_frame_size must be at least 8 (the frame header)")
        if self.max_connections < 0:
            raise ValueError("max_connections must be >= 0 (0: unlimited)")
        if self.max_connections_per_ip < 0:
            raise ValueError("max_connections_per_ip must be >= 0 (0: no cap)")
        if self.keep_alive_interval < 0:
            raise ValueError("keep_alive_interval must be >= 0 (0: never ping)")
        if self.handshake_timeout <= 0:
            raise ValueError("handshake_timeout must be > 0")

    @property
    def announced_message_size(self) -> int:
        if self.max_message_size is not None:
            return self.max_message_size
        # A frame cap too small for Pulsar's padding (tests) announces the frame cap itself.
        padded = self.max_frame_size - FRAME_PADDING
        return padded if padded > 0 else self.max_frame_size
