"""`--port-offset N` (standalone, explain): every port of a config moved by N, so that the demo
runs beside a local Pulsar on 6650/8080, and `explain` sees the sockets standalone serves."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pulsar_lookup_gateway.listeners.config.model import GatewayConfig
from pulsar_lookup_gateway.listeners.endpoints.addresses import Endpoint

MAX_PORT = 65535
#: The legacy untagged ports: key in the config file -> GatewayConfig field.
_LEGACY_PORTS = {
    "brokerServicePort": "broker_service_port",
    "brokerServicePortTls": "broker_service_port_tls",
    "webServicePort": "web_service_port",
    "webServicePortTls": "web_service_port_tls",
}
#: The option's help, the same for every command that has it.
PORT_OFFSET_HELP = (
    "add N to every port of the config (bindAddresses, advertisedListeners, legacy ports), "
    "e.g. 10000 for 16650/18080 beside a local Pulsar on 6650/8080; port 0 stays 0"
)


class PortOffsetError(ValueError):
    """An offset that would move a port outside 1..65535; the message names the port."""


def shift_ports(config: GatewayConfig, offset: int) -> GatewayConfig:
    """`config` with every port moved by `offset`: the bindAddresses, the advertisedListeners
    and the legacy ports (brokerServicePort, webServicePort and their TLS twins). Port 0 (a
    free port per socket) stays 0. The moved ports keep their distances, so sockets that did
    not clash before do not clash after. PortOffsetError when a port would leave 1..65535."""
    if offset == 0:
        return config
    ports: list[tuple[int, str]] = []  # (port, where) of every port that moves
    ports += [
        (b.endpoint.port, f"bindAddresses {b.listener}:{b.endpoint.url}")
        for b in config.bind_addresses
    ]
    ports += [
        (e.port, f"advertisedListeners {listener.name}:{e.url}")
        for listener in config.advertised_listeners
        for e in listener.endpoints
    ]
    ports += [
        (port, key)
        for key, field in _LEGACY_PORTS.items()
        if (port := getattr(config, field)) is not None
    ]
    moving = [(port, where) for port, where in ports if port != 0]
    if not moving:
        return config
    low, high = min(p for p, _ in moving), max(p for p, _ in moving)
    for port, where in moving:
        if not 1 <= port + offset <= MAX_PORT:
            raise PortOffsetError(
                f"would move port {port} ({where}) to {port + offset}, outside 1..{MAX_PORT}; "
                f"this config takes offsets from {1 - low} to {MAX_PORT - high}"
            )

    def moved(endpoint: Endpoint) -> Endpoint:
        return replace(endpoint, port=endpoint.port + offset) if endpoint.port else endpoint

    update: dict[str, Any] = {
        "bind_addresses": tuple(
            replace(b, endpoint=moved(b.endpoint)) for b in config.bind_addresses
        ),
        "advertised_listeners": tuple(
            replace(listener, endpoints=tuple(moved(e) for e in listener.endpoints))
            for listener in config.advertised_listeners
        ),
    }
    for field in _LEGACY_PORTS.values():
        port = getattr(config, field)
        if port:
            update[field] = port + offset
    return config.model_copy(update=update)
