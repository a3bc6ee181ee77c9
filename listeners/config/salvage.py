"""What still stands of a config that has problems: the entries of `advertisedListeners`,
`bindAddresses` and the protocol listener maps that parse on their own, and the values that
validate.

With them the rules between keys, and the host checks of `check-config`, run in the same pass as
the problems of single keys: one bad entry no longer hides the problems of the others until a
second run. Nothing here is ever run as a gateway."""

from __future__ import annotations

from pulsar_lookup_gateway.listeners.endpoints.addresses import (
    AdvertisedListener,
    BindAddress,
    Endpoint,
    Scheme,
    parse_advertised_listeners,
    parse_bind_addresses,
)
from pulsar_lookup_gateway.lookup.protocol_listeners import (
    GRPC,
    KAFKA,
    MQTT,
    Pairs,
    parse_listener_map,
)
from pulsar_lookup_gateway.lookup.selection import is_listener_name

#: The protocols with a `<protocol>ListenerMap` key.
PROTOCOL_MAPS = (KAFKA, MQTT, GRPC)


def _entries(text: str) -> list[str]:
    return [entry.strip() for entry in text.split(",") if entry.strip()]


def parsed_binds(text: str) -> tuple[BindAddress, ...] | None:
    """The entries of a `bindAddresses` value that parse on their own (the others are problems
    of the key already); None when none does, so that no rule concludes "no socket would
    open" from entries that failed."""
    found: list[BindAddress] = []
    for entry in _entries(text):
        try:
            found += parse_bind_addresses(entry)
        except ValueError:
            continue
    return tuple(found) or None


def declared_listeners(text: str) -> tuple[AdvertisedListener, ...] | None:
    """The listeners an `advertisedListeners` value declares, each with the URLs of its entries
    that parse (the first per scheme); None when some entry's listener name cannot be told, as
    then no rule can say whether a name is declared."""
    by_name: dict[str, dict[Scheme, Endpoint]] = {}
    for entry in _entries(text):
        try:
            (listener,) = parse_advertised_listeners(entry)
        except ValueError:
            name, sep, url = entry.partition(":")
            if not sep or url.startswith("//") or not is_listener_name(name.strip()):
                return None
            by_name.setdefault(name.strip(), {})
            continue
        endpoints = by_name.setdefault(listener.name, {})
        for endpoint in listener.endpoints:
            endpoints.setdefault(endpoint.scheme, endpoint)
    return tuple(AdvertisedListener(name, tuple(urls.values())) for name, urls in by_name.items())


def parsed_listener_map(protocol: str, text: str) -> Pairs | None:
    """The entries of a protocol's listener map that parse on their own (so that the rule
    "each listener is declared" is checked on them in the same run); None when none does."""
    found: list[tuple[str, str]] = []
    for entry in _entries(text):
        try:
            pairs = parse_listener_map(protocol, entry)
        except ValueError:
            continue
        found += [pair for pair in pairs if pair not in found]
    return tuple(found) or None
