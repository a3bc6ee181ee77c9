"""The listeners and addresses keys: the legacy sockets, the advertised listeners and their
per-listener settings, the bind addresses, and the proxies whose client addresses are believed."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from pulsar_lookup_gateway.listeners.config.key_group import KeyGroup
from pulsar_lookup_gateway.listeners.config.listener_settings import (
    LISTENER_PREFIX,
    CommaList,
    ListenerSettings,
    Port,
    blank_is_none,
)
from pulsar_lookup_gateway.listeners.config.rules import client_routes
from pulsar_lookup_gateway.listeners.endpoints.addresses import (
    AdvertisedListener,
    BindAddress,
    parse_advertised_listeners,
    parse_bind_addresses,
)
from pulsar_lookup_gateway.listeners.endpoints.forwarded import HEADERS as FORWARDED_HEADERS
from pulsar_lookup_gateway.lookup.networks import parse_cidr
from pulsar_lookup_gateway.lookup.selection import RoutesError


class SocketKeys(KeyGroup):
    """Pulsar's legacy sockets: bindAddress and its four ports (rules.sockets plans them)."""

    bind_address: str = "0.0.0.0"
    """Host of the legacy untagged sockets (the four ports below)."""
    broker_service_port: Port = 6650
    """A legacy untagged binary socket on `bindAddress`; empty: none."""
    broker_service_port_tls: Port = None
    """A legacy untagged binary TLS socket on `bindAddress`; empty: none."""
    web_service_port: Port = 8080
    """A legacy untagged HTTP socket on `bindAddress`; empty: none."""
    web_service_port_tls: Port = None
    """A legacy untagged HTTPS socket on `bindAddress`; empty: none."""


class ListenerKeys(KeyGroup):
    advertised_listeners: tuple[AdvertisedListener, ...] = ()
    """The gateway's own address on each network, `name:scheme://host:port,...`: schemes
    `pulsar`, `pulsar+ssl`, `http`, `https`, one URL per scheme per listener. They declare the
    listener names; they are never handed to a client as a broker address."""
    internal_listener_name: str | None = Field(None, validate_default=True)
    """Labels lookups that name no listener and arrive on an untagged socket (they get the
    brokers' default URLs); unset: the first listener of `advertisedListeners`."""
    listener_settings: dict[str, ListenerSettings] = Field(default_factory=dict)
    """`listener.<name>.<key>=value`: per-listener settings, keyed by listener name."""
    trusted_proxy_cidrs: CommaList = Field((), validate_default=True)
    """The load balancers (CIDRs) whose PROXY headers and `X-Forwarded-For` / `Forwarded`
    headers are believed; required when a listener has `proxyProtocol=true`."""
    trusted_forwarded_headers: CommaList = FORWARDED_HEADERS
    """Which forwarded headers are read from a peer in `trustedProxyCidrs`, in order of
    preference: the first one a request carries is read, the others never. Name only the header
    your proxy writes (`X-Forwarded-For` for nginx, Istio/Envoy and most HTTP balancers): one it
    passes through is the client's own. Blank: none (TCP proxies, which send PROXY headers
    only). Case ignored; an unknown or repeated name is an error."""
    bind_addresses: tuple[BindAddress, ...] = Field((), validate_default=True)
    """`name:scheme://host:port,...`: one server socket per entry, tagged with the listener
    `name`, whose broker addresses a lookup arriving there is answered with."""

    @field_validator("advertised_listeners", mode="before")
    @classmethod
    def _advertised(cls, value: Any) -> Any:
        return parse_advertised_listeners(value) if isinstance(value, str) else value

    @field_validator("internal_listener_name", mode="before")
    @classmethod
    def _internal(cls, value: Any) -> Any:
        return blank_is_none(value)

    @field_validator("bind_addresses", mode="before")
    @classmethod
    def _binds(cls, value: Any) -> Any:
        return parse_bind_addresses(value) if isinstance(value, str) else value

    @field_validator("listener_settings")
    @classmethod
    def _routes(cls, value: dict[str, ListenerSettings]) -> dict[str, ListenerSettings]:
        try:
            client_routes(value)
        except RoutesError as exc:
            keys = {"sni": "sniHostnames", "network": "clientCidrs"}
            raise ValueError(
                "\n".join(
                    f"{LISTENER_PREFIX}{name}.{keys[kind]}: {message}"
                    for name, kind, message in exc.problems
                )
            ) from None
        return value

    @field_validator("trusted_proxy_cidrs")
    @classmethod
    def _trusted_proxies(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        problems = []
        for entry in value:
            try:
                parse_cidr(entry)
            except ValueError as exc:
                problems.append(str(exc))
        if problems:
            raise ValueError("\n".join(problems))
        return value

    @field_validator("trusted_forwarded_headers")
    @classmethod
    def _forwarded_headers(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        """Each entry a header the gateway reads (case ignored, written as in HEADERS), once."""
        known = {name.lower(): name for name in FORWARDED_HEADERS}
        names: list[str] = []
        problems = []
        for entry in value:
            name = known.get(entry.lower())
            if name is None:
                problems.append(
                    f"'{entry}' is not a header the gateway reads ({', '.join(FORWARDED_HEADERS)})"
                )
            elif name in names:
                problems.append(f"'{entry}' is listed twice")
            else:
                names.append(name)
        if problems:
            raise ValueError("\n".join(problems))
        return tuple(names)
