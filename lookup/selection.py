"""Which advertised listener a lookup answers for, and what a listener name may be."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from pulsar_lookup_gateway.lookup.networks import Address, NetworkTable, parse_address, parse_cidr

#: A listener name: letters, digits, '_' and '-' (the characters Pulsar's broker accepts in
#: advertisedListeners), at most 128 of them. The config, every name a client gives (binary
#: advertised_listener_name, HTTP listenerName and X-Pulsar-ListenerName) and the Spark job's
#: zones file are all checked with this one rule.
LISTENER_NAME = re.compile(r"[A-Za-z0-9_-]{1,128}")
LISTENER_NAME_RULE = "letters, digits, '_' and '-', at most 128 characters"


def is_listener_name(text: str) -> bool:
    return LISTENER_NAME.fullmatch(text) is not None


class ChoiceSource(StrEnum):
    """How the listener was chosen; a label in logs and metrics."""

    EXPLICIT = "explicit"  # binary advertised_listener_name, HTTP listenerName query
    HEADER = "header"  # HTTP X-Pulsar-ListenerName (an ingress or mesh may inject it)
    SNI = "sni"  # the TLS server name the client dialled (listener.<name>.sniHostnames)
    NETWORK = "network"  # the client's address (listener.<name>.clientCidrs)
    SOCKET = "socket"  # the listener the client's bind address is tagged with
    INTERNAL = "internal"  # none of the above: the brokers' default URLs


@dataclass(frozen=True, slots=True)
class ListenerChoice:
    name: str | None  # for INTERNAL, the configured internal listener's name (a label only)
    source: ChoiceSource
    # The name is the configured internal listener's: its missing web URLs may be filled with
    # the brokers' defaults, which are internal addresses too. No other listener's may.
    internal: bool = False

    @property
    def uses_listener_urls(self) -> bool:
        """INTERNAL answers with the brokers' default URLs, which Pulsar derives from the
        internal listener; every other choice reads the named listener's URLs."""
        return self.source is not ChoiceSource.INTERNAL


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a routing decision, as it was taken (`explain`): the rule (a ChoiceSource,
    or one of the checks Router.decide makes after choosing), what it found, and whether it
    decided (chose the listener, or refused the request)."""

    rule: str
    found: str
    decided: bool = False


#: The steps of one decision, in the order they were taken (None where nobody asks: a lookup).
Trace = list[Step]

_RULES = tuple(ChoiceSource)  # in order of precedence


def _decided(trace: Trace, choice: ListenerChoice, found: str) -> ListenerChoice:
    """Record the rule that chose, and that the rules after it were not consulted."""
    trace.append(Step(choice.source.value, found, True))
    for later in _RULES[_RULES.index(choice.source) + 1 :]:
        trace.append(Step(later.value, f"not consulted: {choice.source.value} chose first"))
    return choice


def _passed_over(source: ChoiceSource, fact: object, name: str | None, routes: ClientRoutes) -> str:
    """What a rule that infers a listener found, where it chose none."""
    what, key = ("TLS server name", "sniHostnames")
    if source is ChoiceSource.NETWORK:
        what, key = ("client address", "clientCidrs")
    if fact is None or fact == "":
        return f"no {what} known" if source is ChoiceSource.NETWORK else "no TLS server name sent"
    if name is None:
        if not (routes.uses_sni if source is ChoiceSource.SNI else routes.networks):
            return f"{what} {fact}: no listener has {key}"
        return f"{what} {fact} matches no listener's {key}"
    return (
        f"{what} {fact} matches {key} of '{name}', which this socket's allowedListenerNames "
        "do not include: passed over"
    )


# A DNS name as a client may dial it: labels of letters, digits and '-', dot-separated.
_HOSTNAME = re.compile(
    r"(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*"
)


def parse_sni_pattern(text: str) -> str:
    """An exact host name or a `*.suffix` wildcard, lower-cased; ValueError otherwise."""
    pattern = text.strip().lower().rstrip(".")
    name = pattern[2:] if pattern.startswith("*.") else pattern
    if not _HOSTNAME.fullmatch(name) or "*" in name:
        raise ValueError(f"'{text.strip()}' is not a host name or a *.suffix wildcard")
    return pattern


class RoutesError(ValueError):
    """Rules that cannot be used; `problems`: (listener, "sni" or "network", message)."""

    def __init__(self, problems: list[tuple[str, str, str]]) -> None:
        super().__init__("\n".join(f"{name}: {message}" for name, _, message in problems))
        self.problems = problems


@dataclass(frozen=True, slots=True)
class ClientRoutes:
    """The operator's rules that infer a listener from where a client is: the TLS server name
    it dialled (exact names, then the longest matching `*.suffix`) and its network (the most
    specific CIDR). Built once from the config; matching does no I/O."""

    exact_names: Mapping[str, str] = field(default_factory=dict)
    suffixes: tuple[tuple[str, str], ...] = ()  # (".suffix", listener), longest first
    networks: NetworkTable[str] = field(default_factory=NetworkTable)

    @classmethod
    def build(
        cls,
        sni_hostnames: Mapping[str, Iterable[str]],
        client_cidrs: Mapping[str, Iterable[str]],
    ) -> ClientRoutes:
        """`sni_hostnames` / `client_cidrs`: listener -> its patterns / CIDRs. RoutesError lists
        every pattern or network given to two listeners, and every one that does not parse."""
        problems: list[tuple[str, str, str]] = []
        owner: dict[str, str] = {}
        for listener, patterns in sni_hostnames.items():
            for text in patterns:
                try:
                    pattern = parse_sni_pattern(text)
                except ValueError as exc:
                    problems.append((listener, "sni", str(exc)))
                    continue
                if pattern in owner and owner[pattern] != listener:
                    message = f"server name '{pattern}' is also {owner[pattern]}'s"
                    problems.append((listener, "sni", message))
                owner.setdefault(pattern, listener)
        by_network: dict[object, str] = {}
        pairs = []
        for listener, cidrs in client_cidrs.items():
            for text in cidrs:
                try:
                    network = parse_cidr(text)
                except ValueError as exc:
                    problems.append((listener, "network", str(exc)))
                    continue
                if network in by_network:
                    if by_network[network] != listener:
                        message = (
                            f"{network} is also {by_network[network]}'s; a network can choose "
                            "one listener only"
                        )
                        problems.append((listener, "network", message))
                    continue
                by_network[network] = listener
                pairs.append((network, listener))
        if problems:
            raise RoutesError(problems)
        exact = {p: name for p, name in owner.items() if not p.startswith("*.")}
        suffixes = sorted(
            ((p[1:], name) for p, name in owner.items() if p.startswith("*.")),
            key=lambda item: -len(item[0]),
        )
        return cls(exact, tuple(suffixes), NetworkTable.build(pairs))

    def __bool__(self) -> bool:
        return bool(self.exact_names or self.suffixes or self.networks)

    @property
    def uses_sni(self) -> bool:
        return bool(self.exact_names or self.suffixes)

    def by_server_name(self, server_name: str | None) -> str | None:
        if not server_name:
            return None
        name = server_name.lower().rstrip(".")
        if (listener := self.exact_names.get(name)) is not None:
            return listener
        for suffix, listener in self.suffixes:
            if name.endswith(suffix) and len(name) > len(suffix):
                return listener
        return None

    def by_address(self, address: Address | str | None) -> str | None:
        if isinstance(address, str):
            address = parse_address(address)
        return self.networks.match(address)


NO_ROUTES = ClientRoutes()


def given_name(name: str | None) -> str | None:
    """A listener name a client gave, or None: blank means absent (the C++ and Go clients
    always send the field, "" when unset)."""
    if name is None:
        return None
    name = name.strip()
    return name or None


def choose_listener(
    *,
    explicit: str | None = None,
    header: str | None = None,
    server_name: str | None = None,
    client_address: Address | str | None = None,
    socket_listener: str | None = None,
    internal_listener: str | None = None,
    routes: ClientRoutes = NO_ROUTES,
    allowed: frozenset[str] | None = None,
    trace: Trace | None = None,
) -> ListenerChoice:
    """Precedence, first match wins: explicit name > X-Pulsar-ListenerName header > the TLS
    server name > the client's network > the socket's tag > internal.

    `allowed`: the listener names the socket permits besides its own (None: any). A name the
    client gave is checked by the caller (it is refused there); a listener the rules infer
    that the socket does not permit is passed over, as if no rule matched.

    `trace`: where to record each rule's outcome as it is decided (`explain`)."""
    if (name := given_name(explicit)) is not None:
        choice = ListenerChoice(name, ChoiceSource.EXPLICIT, name == internal_listener)
        return choice if trace is None else _decided(trace, choice, f"the client named '{name}'")
    if trace is not None:
        trace.append(Step(ChoiceSource.EXPLICIT.value, "no listener name given"))
    if (name := given_name(header)) is not None:
        choice = ListenerChoice(name, ChoiceSource.HEADER, name == internal_listener)
        if trace is None:
            return choice
        return _decided(trace, choice, f"X-Pulsar-ListenerName: '{name}'")
    if trace is not None:
        trace.append(Step(ChoiceSource.HEADER.value, "no X-Pulsar-ListenerName header"))
    if routes:
        inferred = (
            (routes.by_server_name(server_name), ChoiceSource.SNI, server_name),
            (routes.by_address(client_address), ChoiceSource.NETWORK, client_address),
        )
        for name, source, fact in inferred:
            if name is not None and (allowed is None or name == socket_listener or name in allowed):
                choice = ListenerChoice(name, source, name == internal_listener)
                if trace is None:
                    return choice
                key = "sniHostnames" if source is ChoiceSource.SNI else "clientCidrs"
                return _decided(trace, choice, f"{fact} matches {key} of '{name}'")
            if trace is not None:
                trace.append(Step(source.value, _passed_over(source, fact, name, routes)))
    elif trace is not None:
        for source in (ChoiceSource.SNI, ChoiceSource.NETWORK):
            found = "no listener has sniHostnames or clientCidrs: not consulted"
            trace.append(Step(source.value, found))
    if socket_listener is not None:
        internal = socket_listener == internal_listener
        choice = ListenerChoice(socket_listener, ChoiceSource.SOCKET, internal)
        if trace is None:
            return choice
        return _decided(trace, choice, f"the socket is tagged with '{socket_listener}'")
    choice = ListenerChoice(internal_listener, ChoiceSource.INTERNAL, True)
    if trace is not None:
        trace.append(Step(ChoiceSource.SOCKET.value, "the socket has no listener tag"))
        _decided(
            trace,
            choice,
            f"the brokers' default URLs (internalListenerName: {internal_listener or 'unset'})",
        )
    return choice
