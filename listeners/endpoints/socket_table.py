"""The server sockets a config asks for: legacy `*Port` keys (untagged) and `bindAddresses`."""

from __future__ import annotations

import socket
from collections.abc import Iterable
from dataclasses import dataclass, replace

from pulsar_lookup_gateway.listeners.endpoints.addresses import (
    WILDCARD_HOSTS,
    BindAddress,
    Endpoint,
    Scheme,
)

LEGACY_PORT_KEYS: tuple[tuple[str, Scheme], ...] = (
    ("brokerServicePort", Scheme.PULSAR),
    ("brokerServicePortTls", Scheme.PULSAR_SSL),
    ("webServicePort", Scheme.HTTP),
    ("webServicePortTls", Scheme.HTTPS),
)


@dataclass(frozen=True, slots=True)
class SocketSpec:
    """One server socket: where it binds, what it speaks, which listener tags its lookups."""

    endpoint: Endpoint
    listener: str | None  # None: a legacy port, untagged
    origin: str  # the config key or bindAddresses entry that asked for it

    @property
    def tls(self) -> bool:
        return self.endpoint.scheme.is_tls


def plan_sockets(
    bind_address: str, legacy_ports: dict[str, int | None], binds: Iterable[BindAddress]
) -> list[SocketSpec]:
    specs = [
        SocketSpec(Endpoint(scheme, bind_address, port), None, key)
        for key, scheme in LEGACY_PORT_KEYS
        if (port := legacy_ports.get(key)) is not None
    ]
    specs += [
        SocketSpec(b.endpoint, b.listener, f"entry '{b.listener}:{b.endpoint.url}'") for b in binds
    ]
    return specs


def socket_conflicts(specs: list[SocketSpec]) -> list[str]:
    """Two sockets on one ip:port cannot both bind; a wildcard host overlaps every host.
    Port 0 (an ephemeral port per socket) never conflicts."""
    problems = []
    for i, spec in enumerate(specs):
        for earlier in specs[:i]:
            a, b = spec.endpoint, earlier.endpoint
            if a.port == 0 or a.port != b.port:
                continue
            if a.host == b.host or a.host in WILDCARD_HOSTS or b.host in WILDCARD_HOSTS:
                problems.append(
                    f"{spec.origin} binds {a.address}, which {earlier.origin} already binds "
                    f"({b.address})"
                )
    return problems


class BoundSocket:
    """A server on one socket of the table: the address it listens on, with the port the kernel
    chose once it is bound (the spec may ask for port 0)."""

    def __init__(self, spec: SocketSpec) -> None:
        self.spec = spec
        self._bound_port: int | None = None

    @property
    def port(self) -> int:
        if self._bound_port is None:
            raise RuntimeError("the server is not started")
        return self._bound_port

    @property
    def url(self) -> str:
        """The address as a URL: with the bound port once started, the spec's before."""
        endpoint = self.spec.endpoint
        return replace(endpoint, port=self._bound_port or endpoint.port).url


BACKLOG = 1024  # asyncio's 100 would drop SYNs in a reconnect storm (1 s client retries)


def bind_listening(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    """A listening TCP socket on host:port (SO_REUSEPORT when asked: worker processes)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=BACKLOG, reuse_port=reuse_port)
