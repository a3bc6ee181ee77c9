"""How protocol handlers name their listeners, and which gateway listener gets which endpoint.

A protocol handler advertises its endpoints in the broker's registration (lookup.protocol_data);
each endpoint is named by the handler, not by a Pulsar listener:

- **Kafka-on-Pulsar** (`kafkaListeners`, advertised as `kafkaAdvertisedListeners`): each entry is
  `<name>://host:port`. Without `kafkaProtocolMap` the name is a Kafka security protocol
  (`PLAINTEXT`, `SSL`, `SASL_PLAINTEXT`, `SASL_SSL`; KoP's EndPoint); with it, the name is a
  listener of KoP's own (`kafka_internal`) whose security protocol only `kafkaProtocolMap` says
  (`kafka_internal:PLAINTEXT`), and KoP answers a Kafka client with the owner's entry of the
  name its own connection came in on (KopBrokerLookupManager, EndPoint.findListener).
- **MQTT-on-Pulsar** (`mqttListeners`): the name is the transport, one of `mqtt`, `mqtt+ssl`,
  `mqtt+ssl+psk`, `ws`, `ws+ssl` (MoP's ConfigurationUtils); MoP has no listener names.
- **The gRPC handler of PIP-59** (`grpcServicePort`, `grpcServicePortTls`): properties, one host
  (the broker's advertisedAddress) and a plain and a TLS port, which the gateway names `grpc` and
  `grpc+tls`; no listener names either.

Which gateway listener gets an endpoint: the key of its protocol (`kafkaListenerMap`,
`mqttListenerMap`, `grpcListenerMap`: `<listener>:<handler name>,...`) when it is set, and then
only the names it maps; without it, the one guess that is never ambiguous: a handler name that
is a listener's name belongs to that listener (KoP asks its listener names to be declared in
the brokers' advertisedListeners), and a name that no handler uses for a network (a Kafka
security protocol, an MQTT transport, gRPC's two ports) to every listener. A KoP listener name
that names no listener belongs to none until kafkaListenerMap maps it.

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

__all__ = [
    "KAFKA_SECURITY_PROTOCOLS",
    "LISTENER_MAP_KEYS",
    "NO_PROTOCOL_LISTENERS",
    "ProtocolListeners",
    "parse_kafka_protocol_map",
    "parse_listener_map",
]

KAFKA, MQTT, GRPC = "kafka", "mqtt", "grpc"
#: The key that maps each protocol's handler names to the gateway's listeners.
LISTENER_MAP_KEYS: Mapping[str, str] = {
    KAFKA: "kafkaListenerMap",
    MQTT: "mqttListenerMap",
    GRPC: "grpcListenerMap",
}
KAFKA_PROTOCOL_MAP_KEY = "kafkaProtocolMap"  # KoP's own key and format

#: Kafka's SecurityProtocol names (SecurityProtocol.forName upper-cases what it is given).
KAFKA_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: MoP's listener prefixes and what each is: TLS, TLS with a pre-shared key, or neither.
MQTT_SECURITY = {
    "mqtt": "PLAINTEXT",
    "mqtt+ssl": "SSL",
    "mqtt+ssl+psk": "SSL_PSK",
    "ws": "PLAINTEXT",
    "ws+ssl": "SSL",
}
#: The gRPC handler's two ports, as the gateway names their endpoints.
GRPC_SECURITY = {"grpc": "PLAINTEXT", "grpc+tls": "SSL"}
_TLS = frozenset({"SSL", "SASL_SSL", "SSL_PSK"})

# A KoP listener name is what its EndPoint regex takes before '://'; the gateway asks for a
# name a listener could have (letters, digits, '_', '-', '.', '+').
_HANDLER_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,64}")
_LISTENER_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")

Pairs = tuple[tuple[str, str], ...]


def handler_key(protocol: str, name: str) -> str:
    """A handler name as it is compared: Kafka security protocols and URL schemes ignore
    case (SecurityProtocol.forName, RFC 3986), KoP listener names do not."""
    if protocol == KAFKA:
        return name.upper() if name.upper() in KAFKA_SECURITY_PROTOCOLS else name
    if protocol in (MQTT, GRPC):
        return name.lower()
    return name


def _named_by_handler(protocol: str, key: str) -> bool:
    """Whether `key` is a name the handler gives endpoints meant for every network."""
    if protocol == KAFKA:
        return key in KAFKA_SECURITY_PROTOCOLS
    return key in (MQTT_SECURITY if protocol == MQTT else GRPC_SECURITY)


def parse_listener_map(protocol: str, text: str) -> Pairs:
    """`<listener>:<handler name>,...` (a listener may get several names, a name go to several
    listeners); ValueError naming every bad entry."""
    pairs: list[tuple[str, str]] = []
    problems: list[str] = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        listener, colon, name = (part.strip() for part in entry.partition(":"))
        if not colon or not listener or not name:
            problems.append(f"entry '{entry}': expected <listener>:<{_WHAT[protocol]}>")
        elif not _LISTENER_NAME.fullmatch(listener):
            problems.append(
                f"entry '{entry}': listener name '{listener}': use letters, digits, '_' and '-'"
            )
        elif protocol != KAFKA and handler_key(protocol, name) not in _KNOWN[protocol]:
            known = ", ".join(_KNOWN[protocol])
            problems.append(f"entry '{entry}': '{name}' is not one of {known}")
        elif not _HANDLER_NAME.fullmatch(name):
            problems.append(
                f"entry '{entry}': '{name}' is not a KoP listener name or Kafka security "
                "protocol (letters, digits, '_', '.', '+', '-')"
            )
        elif (listener, handler_key(protocol, name)) in pairs:
            problems.append(f"entry '{entry}': listed twice")
        else:
            pairs.append((listener, handler_key(protocol, name)))
    if problems:
        raise ValueError("\n".join(problems))
    return tuple(pairs)


def parse_kafka_protocol_map(text: str) -> Pairs:
    """KoP's `kafkaProtocolMap`: `<KoP listener name>:<security protocol>,...`."""
    pairs: dict[str, str] = {}
    problems: list[str] = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        name, colon, security = (part.strip() for part in entry.partition(":"))
        if not colon or not name or not security:
            problems.append(f"entry '{entry}': expected <KoP listener name>:<security protocol>")
        elif security.upper() not in KAFKA_SECURITY_PROTOCOLS:
            problems.append(
                f"entry '{entry}': '{security}' is not one of {', '.join(KAFKA_SECURITY_PROTOCOLS)}"
            )
        elif name in pairs:
            problems.append(f"entry '{entry}': '{name}' is listed twice")
        else:
            pairs[name] = security.upper()
    if problems:
        raise ValueError("\n".join(problems))
    return tuple(pairs.items())


_WHAT = {
    KAFKA: "KoP listener name or security protocol",
    MQTT: "MoP listener scheme",
    GRPC: "grpc or grpc+tls",
}
_KNOWN: Mapping[str, tuple[str, ...]] = {
    MQTT: tuple(MQTT_SECURITY),
    GRPC: tuple(GRPC_SECURITY),
}


@dataclass(frozen=True, slots=True)
class ProtocolListeners:
    """The listener maps of the handlers (a protocol absent: its key is unset) and KoP's
    protocol map. Hashable: it is part of the resolve policy."""

    maps: tuple[tuple[str, Pairs], ...] = ()
    kafka_protocol_map: Pairs = ()

    def owners(
        self, protocol: str, name: str, listener_names: Collection[str]
    ) -> frozenset[str] | None:
        """The listeners an endpoint the handler of `protocol` names `name` belongs to; None:
        every listener."""
        protocol = protocol.casefold()
        key = handler_key(protocol, name)
        for mapped, pairs in self.maps:
            if mapped == protocol:
                return frozenset(listener for listener, handler in pairs if handler == key)
        if protocol in (MQTT, GRPC):
            return None  # no listener names: one set of endpoints for every network
        if name in listener_names:
            return frozenset({name})
        if protocol == KAFKA and not _named_by_handler(protocol, key):
            return frozenset()  # a KoP listener name no listener has: ambiguous
        return None

    def unmapped(self, protocol: str, name: str, listener_names: Collection[str]) -> bool:
        """Whether an endpoint named `name` goes to no listener for want of the protocol's
        listener map (so an answer can name the key to set)."""
        owners = self.owners(protocol, name, listener_names)
        return owners is not None and not owners

    def security_protocol(self, protocol: str, name: str) -> str | None:
        """What the handler's endpoint named `name` speaks: Kafka's SecurityProtocol names
        (from the name itself, else kafkaProtocolMap), PLAINTEXT / SSL / SSL_PSK for MoP's
        and the gRPC handler's listeners; None where that is not known."""
        protocol = protocol.casefold()
        key = handler_key(protocol, name)
        if protocol == KAFKA:
            if key in KAFKA_SECURITY_PROTOCOLS:
                return key
            return dict(self.kafka_protocol_map).get(name)
        if protocol == MQTT:
            return MQTT_SECURITY.get(key)
        if protocol == GRPC:
            return GRPC_SECURITY.get(key)
        return None


def is_tls(security_protocol: str | None) -> bool | None:
    return None if security_protocol is None else security_protocol in _TLS


def map_key(protocol: str) -> str | None:
    return LISTENER_MAP_KEYS.get(protocol.casefold())


NO_PROTOCOL_LISTENERS = ProtocolListeners()
