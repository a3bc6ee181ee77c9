"""Protocol handlers (PIP-41): where a topic lives for a Kafka, MQTT or gRPC client, per listener.

A broker that runs protocol handlers lists, in its registration (`/loadbalance/brokers/<id>`,
LocalBrokerData and BrokerLookupData alike), each handler's name with the data string the
handler advertises (`protocols`). The gateway finds the bundle's owner as for a Pulsar lookup
and answers with the owner's endpoints for the client's listener (PIP-95's secondary goal;
for Kafka clients, KIP-103's listener per network).

The data strings, as the handlers write them:

- a comma list of `scheme://host:port` endpoints, e.g. `PLAINTEXT://b1:9092,SSL://b1:9093`
  (Kafka-on-Pulsar's advertised listeners, named by Kafka security protocol) or
  `mqtt://b1:1883,mqtt+ssl://b1:8883,ws://b1:8083` (MQTT-on-Pulsar's listeners);
- Kafka-on-Pulsar with a protocol map names each endpoint by a listener of its own instead,
  `kafka_internal://10.0.0.1:9092,kafka_external://b1.example.com:19092`, and those names are
  the brokers' advertised listener names;
- PIP-95 style, each endpoint prefixed with its listener: `internal:PLAINTEXT://10.0.0.1:9092`;
- the gRPC handler of PIP-59 writes properties, not URLs:
  `grpcServiceHost=b1;grpcServicePort=50051;grpcServicePortTls=50052` (any of the three may be
  missing), which become the endpoints `grpc://b1:50051` and `grpc+tls://b1:50052`.

Which listener an endpoint belongs to: the one named before its URL; else what the handler
names it (its scheme) decides, by the protocol's listener map or the one unambiguous guess
(lookup.protocol_listeners: KoP, MoP and the gRPC handler each name theirs differently). A
listener's endpoints are its own and those of every listener, in the order advertised, each
with the security protocol it speaks where that is known. Hosts may be names, IPv4 or IPv6
addresses (in brackets, or bare as Kafka-on-Pulsar accepts them; answers always bracket them).

Anything else (a bare `host:port`, a URL with credentials, a port out of range, the literal
`null` an early handler advertised) is not an endpoint: it is kept in `unparsed` and the raw
data string always goes back whole, so nothing a broker advertised is silently lost.

Pure: no I/O. `resolve_protocol` is what the gateway's HTTP route and the Spark job call.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Collection
from dataclasses import dataclass
from functools import lru_cache

from pulsar_lookup_gateway.lookup.bundles import BundleRange
from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure
from pulsar_lookup_gateway.lookup.model import BrokerData
from pulsar_lookup_gateway.lookup.protocol_listeners import (
    NO_PROTOCOL_LISTENERS,
    ProtocolListeners,
    is_tls,
    map_key,
)
from pulsar_lookup_gateway.lookup.resolve import (
    ResolvePolicy,
    ResponseKind,
    registered_owner,
    resolve,
)
from pulsar_lookup_gateway.lookup.selection import LISTENER_NAME, ChoiceSource, ListenerChoice
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.lookup.untrusted import printable
from pulsar_lookup_gateway.lookup.view import ClusterView

#: A protocol handler's name as a client may ask for it (Pulsar's handlers: kafka, mqtt, amqp,
#: grpc, ...): letters, digits and `_.+-`, at most 64 characters.
PROTOCOL_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,64}")
PROTOCOL_NAME_RULE = "letters, digits, '_', '.', '+' and '-', at most 64 characters"
DATA_IN_MESSAGE = 200  # characters of a data string quoted in an error

_ENTRY = re.compile(
    rf"(?:(?P<listener>{LISTENER_NAME.pattern}):)?"
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+._-]*)://"
    r"(?P<authority>[^/?#]*)(?P<path>[/?#].*)?"
)
_HOST = re.compile(r"[A-Za-z0-9._%-]+")
_BRACKETED = re.compile(r"\[(?P<host>[^\]]+)\](?::(?P<port>[0-9]+))?")
# Properties a handler advertises (the gRPC handler: grpcServiceHost, grpcServicePort,
# grpcServicePortTls); the prefix is the endpoints' scheme, `+tls` for the TLS port.
_HOST_KEY, _PORT_KEY, _TLS_PORT_KEY = "ServiceHost", "ServicePort", "ServicePortTls"
TLS_SCHEME_SUFFIX = "+tls"


def is_protocol_name(text: str) -> bool:
    return PROTOCOL_NAME.fullmatch(text) is not None


@dataclass(frozen=True, slots=True)
class AdvertisedEndpoint:
    """One endpoint of a data string. `url` is how a client dials it (without the listener
    prefix; IPv6 hosts in brackets); `host` is bare."""

    url: str
    scheme: str
    host: str
    port: int | None
    prefix: str | None = None  # the listener named before the URL (PIP-95 style)

    def owners(
        self,
        listener_names: Collection[str],
        protocol: str = "",
        listeners: ProtocolListeners = NO_PROTOCOL_LISTENERS,
    ) -> frozenset[str] | None:
        """The listeners this endpoint belongs to (None: every listener): the one named before
        its URL, else as `protocol`'s handler names it (lookup.protocol_listeners)."""
        if self.prefix is not None:
            return frozenset({self.prefix})
        return listeners.owners(protocol, self.scheme, listener_names)


@dataclass(frozen=True, slots=True)
class ProtocolData:
    raw: str
    endpoints: tuple[AdvertisedEndpoint, ...]
    unparsed: tuple[str, ...]  # pieces that are no endpoint of a shape the gateway knows


@dataclass(frozen=True, slots=True)
class Endpoint:
    """An endpoint as answered: with the listener it belongs to (None: every listener) and the
    security protocol it speaks (None: not known; lookup.protocol_listeners)."""

    url: str
    scheme: str
    host: str
    port: int | None
    listener: str | None
    security_protocol: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "url": self.url,
            "scheme": self.scheme,
            "host": self.host,
            "port": self.port,
            "listener": self.listener,
            "securityProtocol": self.security_protocol,
            "tls": is_tls(self.security_protocol),
        }


# -- parsing ---------------------------------------------------------------------------------


@lru_cache(maxsize=1024)  # a cluster has a handful of distinct data strings
def parse_protocol_data(raw: str) -> ProtocolData:
    """A data string as advertised in a broker's `protocols` (see the module docstring)."""
    text = raw.strip()
    if "://" not in text and "=" in text:
        return _parse_properties(raw)
    endpoints: list[AdvertisedEndpoint] = []
    unparsed: list[str] = []
    for piece in text.split(","):
        piece = piece.strip()
        if not piece:
            continue
        endpoint = _parse_entry(piece)
        if endpoint is None:
            unparsed.append(piece)
        else:
            endpoints.append(endpoint)
    return ProtocolData(raw, tuple(endpoints), tuple(unparsed))


def _parse_entry(piece: str) -> AdvertisedEndpoint | None:
    match = _ENTRY.fullmatch(piece)
    if match is None:
        return None
    address = _host_port(match["authority"])
    if address is None:
        return None
    host, port = address
    scheme = match["scheme"]
    return AdvertisedEndpoint(
        _url(scheme, host, port, match["path"] or ""), scheme, host, port, match["listener"]
    )


def _host_port(authority: str) -> tuple[str, int | None] | None:
    """(host, port) of `host`, `host:port`, `[v6]`, `[v6]:port` or a bare IPv6 address with a
    port after its last colon; None for anything else (credentials, an empty host, a port out
    of range)."""
    bracketed = _BRACKETED.fullmatch(authority)
    if bracketed is not None:
        host, port_text = bracketed["host"], bracketed["port"]
        if not _is_ipv6(host):
            return None
    elif authority.count(":") > 1:  # a bare IPv6 address: the port follows the last colon
        host, _, port_text = authority.rpartition(":")
        if not _is_ipv6(host) or not port_text.isdigit():
            return None
    else:
        host, _, port_text = authority.partition(":")
        if not _HOST.fullmatch(host) or (":" in authority and not port_text.isdigit()):
            return None
    if not port_text:
        return host, None
    port = int(port_text)
    if not 1 <= port <= 65535:
        return None
    return host, port


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _url(scheme: str, host: str, port: int | None, path: str = "") -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}{'' if port is None else f':{port}'}{path}"


def _parse_properties(raw: str) -> ProtocolData:
    """`key=value` pairs separated by `;` or line breaks (the gRPC handler's shape)."""
    values: dict[str, str] = {}
    unparsed: list[str] = []
    for piece in re.split(r"[;\n]", raw):
        piece = piece.strip()
        if not piece:
            continue
        key, equals, value = piece.partition("=")
        if not equals or not key.strip():
            unparsed.append(piece)
        else:
            values[key.strip()] = value.strip()
    endpoints: list[AdvertisedEndpoint] = []
    used: set[str] = set()
    for key, host in values.items():
        if not key.endswith(_HOST_KEY) or len(key) == len(_HOST_KEY):
            continue
        prefix = key[: -len(_HOST_KEY)]
        if not (_HOST.fullmatch(host) or _is_ipv6(host)):
            continue
        used.add(key)
        for port_key, scheme in (
            (prefix + _PORT_KEY, prefix),
            (prefix + _TLS_PORT_KEY, prefix + TLS_SCHEME_SUFFIX),
        ):
            port_text = values.get(port_key, "")
            if port_text.isdigit() and 1 <= int(port_text) <= 65535:
                port = int(port_text)
                endpoints.append(AdvertisedEndpoint(_url(scheme, host, port), scheme, host, port))
                used.add(port_key)
    unparsed += [f"{key}={value}" for key, value in values.items() if key not in used]
    return ProtocolData(raw, tuple(endpoints), tuple(unparsed))


# -- selection -------------------------------------------------------------------------------


def select_endpoints(
    data: ProtocolData,
    listener: str | None,
    listener_names: Collection[str],
    *,
    protocol: str = "",
    listeners: ProtocolListeners = NO_PROTOCOL_LISTENERS,
) -> tuple[Endpoint, ...]:
    """The endpoints of `listener` (None: no listener, only those of every listener), in the
    order advertised: its own, and those that belong to every listener. `protocol`: the
    handler that advertised `data` ('': any, as the generic guess reads it)."""
    chosen: list[Endpoint] = []
    for advertised in data.endpoints:
        owners = advertised.owners(listener_names, protocol, listeners)
        if owners is None or (listener is not None and listener in owners):
            chosen.append(
                Endpoint(
                    advertised.url,
                    advertised.scheme,
                    advertised.host,
                    advertised.port,
                    None if owners is None else listener,
                    listeners.security_protocol(protocol, advertised.scheme),
                )
            )
    return tuple(chosen)


def listeners_with_endpoints(
    data: ProtocolData,
    listener_names: Collection[str],
    *,
    protocol: str = "",
    listeners: ProtocolListeners = NO_PROTOCOL_LISTENERS,
) -> list[str]:
    """The listeners that have an endpoint of their own, sorted."""
    names: set[str] = set()
    for advertised in data.endpoints:
        names |= advertised.owners(listener_names, protocol, listeners) or frozenset()
    return sorted(names)


def _unmapped(
    data: ProtocolData,
    listener_names: Collection[str],
    protocol: str,
    listeners: ProtocolListeners,
) -> bool:
    """Whether some endpoint goes to no listener for want of the protocol's listener map."""
    return any(
        advertised.prefix is None
        and listeners.unmapped(protocol, advertised.scheme, listener_names)
        for advertised in data.endpoints
    )


def protocol_data_of(broker: BrokerData, protocol: str) -> tuple[str, str] | None:
    """(the name as the broker spells it, its data) for `protocol`, the name matched exactly,
    else ignoring case (handlers take their name in any case); None if it is not advertised."""
    if protocol in broker.protocols:
        return protocol, broker.protocols[protocol]
    folded = protocol.casefold()
    for name in sorted(broker.protocols):
        if name.casefold() == folded:
            return name, broker.protocols[name]
    return None


def listener_names_of(broker: BrokerData, declared: Collection[str] = ()) -> frozenset[str]:
    """The names a scheme is compared with: the broker's advertised listeners and the
    gateway's declared ones."""
    return frozenset(broker.advertised_listeners).union(declared)


def broker_endpoints(
    broker_id: str,
    broker: BrokerData,
    protocol: str,
    listener: str | None,
    declared: Collection[str] = (),
    listeners: ProtocolListeners = NO_PROTOCOL_LISTENERS,
) -> tuple[str, ProtocolData, tuple[Endpoint, ...]]:
    """(the protocol's name as advertised, its parsed data, the endpoints of `listener`) on one
    broker. Raises PROTOCOL_NOT_ADVERTISED naming the protocols it does advertise, or
    NO_PROTOCOL_ENDPOINT naming the listeners that have an endpoint (and the key to set when
    some endpoint goes to no listener for want of a listener map)."""
    found = protocol_data_of(broker, protocol)
    if found is None:
        advertised = ", ".join(sorted(broker.protocols)) or "none"
        raise LookupFailure(
            FailureKind.PROTOCOL_NOT_ADVERTISED,
            f"the topic's owner does not advertise protocol '{printable(protocol)}'; "
            f"the protocols it advertises: {printable(advertised)}",
            f"owner {broker_id}",
        )
    name, raw = found
    data = parse_protocol_data(raw)
    names = listener_names_of(broker, declared)
    kind = name.casefold()
    endpoints = select_endpoints(data, listener, names, protocol=kind, listeners=listeners)
    if not endpoints:
        having = ", ".join(
            listeners_with_endpoints(data, names, protocol=kind, listeners=listeners)
        )
        shown = printable(raw, DATA_IN_MESSAGE)
        key = map_key(kind)
        hint = (
            f"; its endpoints are named by listeners of the {printable(name)} handler that "
            f"{key} does not map to a listener"
            if key is not None and _unmapped(data, names, kind, listeners)
            else ""
        )
        raise LookupFailure(
            FailureKind.NO_PROTOCOL_ENDPOINT,
            f"the topic's owner advertises no {printable(name)} endpoint for listener "
            f"'{printable(listener or '')}'{hint}",
            f"owner {broker_id}; the listeners that have one: {having or 'none'} (data: '{shown}')",
        )
    return name, data, endpoints


# -- the answer ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProtocolAnswer:
    """Where a protocol client goes for `topic`. `owned` False: nobody owns the bundle yet, and
    `broker_id` is the broker a Pulsar client's lookup would go to first (the load-manager
    leader, else the broker the bundle's hash picks); it has no endpoints then."""

    topic: TopicName
    bundle: BundleRange
    protocol: str
    listener: ListenerChoice
    owned: bool
    broker_id: str | None
    endpoints: tuple[Endpoint, ...] = ()
    data: str | None = None
    unparsed: tuple[str, ...] = ()

    def to_json(self, *, operator: bool = False) -> dict[str, object]:
        """The answer as the HTTP route gives it. The broker id and the raw data string (every
        listener's endpoints) are internal names: only a client the internal listener was
        chosen for by its place (its socket, network or server name), or an `operator` (the
        CLI), gets them; any other, one that merely names the internal listener included,
        sees its own listener's endpoints only."""
        answer: dict[str, object] = {
            "topic": self.topic.full,
            "bundle": self.bundle.name,
            "protocol": self.protocol,
            "listener": self.listener.name,
            "listenerChosenBy": self.listener.source.value,
            "endpoints": [endpoint.to_json() for endpoint in self.endpoints],
        }
        chosen = self.listener
        named = chosen.source is ChoiceSource.EXPLICIT or chosen.source is ChoiceSource.HEADER
        if operator or (chosen.internal and not named):
            answer["brokerId"] = self.broker_id
            answer["data"] = self.data
        return answer


_OWNER_ONLY = ListenerChoice(None, ChoiceSource.INTERNAL, True)
_NO_POLICY = ResolvePolicy()


def resolve_protocol(
    topic: TopicName,
    choice: ListenerChoice,
    protocol: str,
    view: ClusterView,
    policy: ResolvePolicy = _NO_POLICY,
    declared: Collection[str] = (),
) -> ProtocolAnswer:
    """The owner of `topic`'s bundle, found exactly as resolve() finds it (the Pulsar listener
    plays no part: a broker need not advertise a Pulsar URL on a listener to have protocol
    endpoints on it), and its `protocol` endpoints for the chosen listener. `declared`: the
    gateway's listener names; `policy.protocol_listeners`: the handlers' listener maps."""
    answer = resolve(topic, _OWNER_ONLY, view, policy)
    if answer.peer_cluster is not None:
        raise LookupFailure(
            FailureKind.NOT_IN_CLUSTER,
            f"namespace {topic.namespace_name} is served by cluster {answer.peer_cluster}, "
            "whose brokers' protocol data is not in this cluster's metadata; ask that cluster",
        )
    if answer.response is ResponseKind.REDIRECT:
        return ProtocolAnswer(topic, answer.bundle, protocol, choice, False, answer.broker_id)
    owner = answer.broker_id
    if owner is None:
        raise LookupFailure(
            FailureKind.METADATA_MALFORMED,
            f"the owner of bundle {topic.namespace_name}/{answer.bundle.name} has no brokerId "
            "and none of its URLs is a registered broker's: its protocol data cannot be found",
        )
    registry = view.broker_registry()
    broker = registered_owner(registry, owner, topic.namespace_name, answer.bundle, name_it=True)
    name, data, endpoints = broker_endpoints(
        owner, broker, protocol, choice.name, declared, policy.protocol_listeners
    )
    return ProtocolAnswer(
        topic, answer.bundle, name, choice, True, owner, endpoints, data.raw, data.unparsed
    )


def endpoints_text(endpoints: tuple[Endpoint, ...]) -> str:
    """The endpoints' URLs as one comma list (the Spark job's column)."""
    return ",".join(endpoint.url for endpoint in endpoints)


def registered_broker(view: ClusterView, broker_id: str) -> BrokerData | None:
    """A broker's valid registration, or None (absent or malformed)."""
    registry = view.broker_registry()
    return registry.brokers.get(broker_id)
