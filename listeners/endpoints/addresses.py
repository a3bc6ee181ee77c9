"""`advertisedListeners` and `bindAddresses` entries: `name:scheme://host:port,...`.

Parsing is strict: every malformed entry is reported, named, with the reason. A parse function
raises ValueError whose message holds one problem per line.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import urlsplit

from pulsar_lookup_gateway.lookup.selection import LISTENER_NAME_RULE, is_listener_name

WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})


class Scheme(StrEnum):
    PULSAR = "pulsar"
    PULSAR_SSL = "pulsar+ssl"
    HTTP = "http"
    HTTPS = "https"

    @property
    def is_tls(self) -> bool:
        return self in (Scheme.PULSAR_SSL, Scheme.HTTPS)

    @property
    def is_binary(self) -> bool:
        return self in (Scheme.PULSAR, Scheme.PULSAR_SSL)

    @property
    def default_port(self) -> int:
        return _DEFAULT_PORTS[self]


_DEFAULT_PORTS = {Scheme.PULSAR: 6650, Scheme.PULSAR_SSL: 6651, Scheme.HTTP: 80, Scheme.HTTPS: 443}
_SCHEMES = ", ".join(s.value for s in Scheme)


@dataclass(frozen=True, slots=True)
class Endpoint:
    scheme: Scheme
    host: str
    port: int

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.scheme.value}://{self.address}"


@dataclass(frozen=True, slots=True)
class AdvertisedListener:
    name: str
    endpoints: tuple[Endpoint, ...]  # at most one per scheme

    def url(self, scheme: Scheme) -> str | None:
        for endpoint in self.endpoints:
            if endpoint.scheme is scheme:
                return endpoint.url
        return None


@dataclass(frozen=True, slots=True)
class BindAddress:
    listener: str
    endpoint: Endpoint


def _entries(text: str) -> list[str]:
    return [entry.strip() for entry in text.split(",") if entry.strip()]


def _split_entry(entry: str) -> tuple[str, str]:
    name, sep, url = entry.partition(":")
    if not sep or url.startswith("//"):
        raise ValueError(f"entry '{entry}' has no listener name (expected name:scheme://host:port)")
    name = name.strip()
    if not is_listener_name(name):
        raise ValueError(f"entry '{entry}': listener name '{name}': use {LISTENER_NAME_RULE}")
    return name, url.strip()


def _parse_url(entry: str, url: str, *, port_required: bool) -> Endpoint:
    scheme_text, sep, _ = url.partition("://")
    if not sep:
        raise ValueError(f"entry '{entry}': '{url}' is not a URL (expected scheme://host:port)")
    try:
        scheme = Scheme(scheme_text.lower())
    except ValueError:
        raise ValueError(
            f"entry '{entry}': unknown scheme '{scheme_text}' (expected one of {_SCHEMES})"
        ) from None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"entry '{entry}': {exc}") from None
    if parts.username is not None or parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"entry '{entry}': only scheme://host:port is allowed")
    host = parts.hostname
    if not host:
        raise ValueError(f"entry '{entry}': no host")
    if port is None:
        if port_required:
            raise ValueError(f"entry '{entry}': no port")
        port = scheme.default_port
    return Endpoint(scheme, host, port)


def parse_advertised_listeners(text: str) -> tuple[AdvertisedListener, ...]:
    problems: list[str] = []
    order: list[str] = []
    by_name: dict[str, dict[Scheme, Endpoint]] = {}
    owner_of_address: dict[tuple[str, int], str] = {}
    for entry in _entries(text):
        try:
            name, url = _split_entry(entry)
            endpoint = _parse_url(entry, url, port_required=False)
        except ValueError as exc:
            problems.append(str(exc))
            continue
        endpoints = by_name.setdefault(name, {})
        if name not in order:
            order.append(name)
        if endpoint.scheme in endpoints:
            problems.append(
                f"entry '{entry}': listener '{name}' already has a {endpoint.scheme.value} URL "
                f"({endpoints[endpoint.scheme].url})"
            )
            continue
        key = (endpoint.host.lower(), endpoint.port)
        other = owner_of_address.setdefault(key, name)
        if other != name:
            problems.append(
                f"entry '{entry}': {endpoint.address} is already advertised by listener '{other}'"
            )
            continue
        endpoints[endpoint.scheme] = endpoint
    if problems:
        raise ValueError("\n".join(problems))
    return tuple(AdvertisedListener(n, tuple(by_name[n].values())) for n in order)


def parse_bind_addresses(text: str) -> tuple[BindAddress, ...]:
    """Entries one by one; the checks across entries and sockets live with the socket table."""
    problems: list[str] = []
    result: list[BindAddress] = []
    for entry in _entries(text):
        try:
            name, url = _split_entry(entry)
            result.append(BindAddress(name, _parse_url(entry, url, port_required=True)))
        except ValueError as exc:
            problems.append(str(exc))
    if problems:
        raise ValueError("\n".join(problems))
    return tuple(result)
