"""Where a client really is: its address, and what told us (the TCP peer, a PROXY header, a
forwarded header). Computed once per connection (per request for forwarded headers)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

UNKNOWN = "?"


class AddressSource(StrEnum):
    PEER = "peer"  # the socket's peer: no balancer, or one that says nothing
    PROXY_V1 = "proxy-v1"
    PROXY_V2 = "proxy-v2"
    FORWARDED = "forwarded"  # X-Forwarded-For / Forwarded from a trusted proxy (HTTP)


@dataclass(frozen=True, slots=True)
class ClientOrigin:
    address: str  # the client's IP address ("?" when the socket has none)
    source: AddressSource
    peer: str  # host:port of the TCP peer (the balancer, when one spoke for the client)
    port: int | None = None  # the client's port, where known
    socket: str = ""  # the URL of the gateway socket it reached, for log lines

    @classmethod
    def of_peer(cls, peername: Any, socket: str = "") -> ClientOrigin:
        if isinstance(peername, tuple) and len(peername) >= 2:
            host_port = _host_port(peername)
            return cls(str(peername[0]), AddressSource.PEER, host_port, peername[1], socket)
        return cls(UNKNOWN, AddressSource.PEER, UNKNOWN, socket=socket)

    def via(self, source: AddressSource, address: str, port: int | None) -> ClientOrigin:
        """The client a balancer at this origin spoke for."""
        return ClientOrigin(address, source, self.peer, port, self.socket)

    @property
    def client(self) -> str:
        """`10.1.2.3:4000`, or `10.1.2.3:4000 (proxy-v2 via 127.0.0.1:5000)`."""
        own = _host_port((self.address, self.port)) if self.port is not None else self.address
        if self.source is AddressSource.PEER:
            return own
        return f"{own} ({self.source} via {self.peer})"

    def __str__(self) -> str:
        """For log lines: the client, and the socket it reached."""
        return f"{self.client} on {self.socket}" if self.socket else self.client


def _host_port(peername: tuple[Any, ...]) -> str:
    host = str(peername[0])
    return f"[{host}]:{peername[1]}" if ":" in host else f"{host}:{peername[1]}"
