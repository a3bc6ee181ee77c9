"""The one routing decision of every protocol: which listener a request is answered for, why,
and the authentication that applies to it.

Binary connections and HTTP requests ask the same Router (one per socket): a request that
names no listener gets the connection's route (the socket's listener, or the one its client's
network or TLS server name chooses); one that names a listener (binary
``advertised_listener_name``, HTTP ``listenerName`` or ``X-Pulsar-ListenerName``) has the name
checked here, once, with the config's rule for listener names (`Router.decide`). A name that
fails the rule is answered as an unknown listener, counted as a failed lookup, and only ever
logged escaped and cut short: clients choose these bytes."""

from __future__ import annotations

from dataclasses import dataclass

from pulsar_lookup_gateway.listeners.auth import ListenerGuard
from pulsar_lookup_gateway.listeners.endpoints.client_origin import ClientOrigin
from pulsar_lookup_gateway.lookup.errors import LookupFailure
from pulsar_lookup_gateway.lookup.resolve import listener_missing
from pulsar_lookup_gateway.lookup.selection import (
    ChoiceSource,
    ListenerChoice,
    given_name,
    is_listener_name,
)
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.lookup.untrusted import printable
from pulsar_lookup_gateway.serving.service import LookupService

#: Characters of a refused listener name kept (escaped) in an answer or a log line.
NAME_SHOWN = 64


@dataclass(frozen=True, slots=True)
class Route:
    """Where a request goes: `choice` holds the listener and why it was chosen (its source);
    `guard` the authentication and the listener names its socket allows."""

    choice: ListenerChoice
    guard: ListenerGuard

    @property
    def listener(self) -> str | None:
        return self.choice.name

    @property
    def chosen_by(self) -> ChoiceSource:
        return self.choice.source


class Router:
    """The routing decision of one socket (its listener tag and its guard)."""

    def __init__(self, service: LookupService, guard: ListenerGuard) -> None:
        self._service = service
        self.guard = guard
        self._listener = guard.listener
        # The guard of requests answered for another declared listener, made once each (the
        # routes of client networks and server names are asked per connection or request).
        self._guards: dict[str, ListenerGuard] = {}
        self._declared = service.declared_listeners
        # What a request naming no listener gets: decided once for the socket, or once per
        # connection or request where server names or client networks can choose instead.
        self.socket_route = self._route_to(service.choose(socket_listener=guard.listener))
        self.located = bool(service.routes)

    def route(self, origin: ClientOrigin | None, server_name: str | None) -> Route:
        """The route of a client at `origin` that dialled `server_name` (TLS) and names no
        listener."""
        if not self.located:
            return self.socket_route
        choice = self._service.choose(
            server_name=server_name,
            client_address=origin.address if origin is not None else None,
            socket_listener=self._listener,
            allowed=self.guard.allowed_names,
        )
        return self._route_to(choice)

    def decide(
        self,
        unnamed: Route,
        explicit: str | None,
        header: str | None = None,
        *,
        protocol: str,
        client: object,
        topic: str | TopicName,
    ) -> Route:
        """The route of a lookup of `topic` that may name a listener (`explicit` first, then
        `header`): `unnamed` when it names none. Raises LookupFailure, counted and logged for
        `client` over `protocol`, for a name the client may not give (`refusal`); the topic
        name is checked first, as a broker checks it before the listener name."""
        route = self.named(unnamed, explicit, header)
        if route is unnamed:
            return route
        refused = self.refusal(route)
        if refused is None:
            return route
        if isinstance(topic, str):
            try:
                TopicName.parse(topic)
            except LookupFailure as invalid:
                refused = invalid
        self._service.refuse(protocol, client, route.choice, topic, refused)
        raise refused

    def named(self, unnamed: Route, explicit: str | None, header: str | None = None) -> Route:
        """The route of a request that may name a listener (`explicit` first, then `header`;
        blank names count as none): `unnamed` when it names none. Unchecked: a lookup takes
        its route from `decide`, which also applies `refusal`."""
        if given_name(explicit) is None and given_name(header) is None:
            return unnamed
        choice = self._service.choose(
            explicit=explicit, header=header, socket_listener=self._listener
        )
        return self._route_to(choice)

    def _route_to(self, choice: ListenerChoice) -> Route:
        """`choice` with the authentication it needs: the socket's, and the answering
        listener's wherever that requires more (ListenerGuard.joined)."""
        name = choice.name
        if name is None or name == self._listener:
            return Route(choice, self.guard)
        guard = self._guards.get(name)
        if guard is None:
            guard = self.guard.joined(self.guard.authenticator.for_listener(name))
            # Kept for declared listeners only: clients choose the other names.
            if self._declared is not None and name in self._declared:
                self._guards[name] = guard
        return Route(choice, guard)

    def refusal(self, route: Route) -> LookupFailure | None:
        """Why a request may not take `route` (None: it may): a name the client gave that
        breaks the rule for listener names (answered as an unknown listener), or one the
        socket does not allow (allowedListenerNames)."""
        choice = route.choice
        given = choice.source is ChoiceSource.EXPLICIT or choice.source is ChoiceSource.HEADER
        if not given:
            return None
        if not is_listener_name(choice.name or ""):
            return listener_missing(printable(choice.name or "", NAME_SHOWN))
        return self.guard.refusal(choice)  # names the refused listener only, escaped
