"""The one routing decision of every protocol: which listener a request is answered for, why,
and the authentication that applies to it.

Each socket has one Router. A connection (binary) or request (HTTP) that names no listener
gets its unnamed route from `Router.route`: the socket's listener, or the one its client's
network or TLS server name chooses. What a request says and what its connection proved are
its `Facts`; `Router.decide(facts)` gives the route it takes, or a `Refusal`, for a binary
LOOKUP, an HTTP lookup, a protocol-handler lookup and a watch stream alike:

- a name the client gave (binary ``advertised_listener_name``, HTTP ``listenerName`` then
  ``X-Pulsar-ListenerName``; blank names count as none) is checked once, here, against the
  config's rule for listener names (a name that fails it is answered as an unknown listener,
  and only ever logged escaped and cut short: clients choose these bytes) and against the
  socket's ``allowedListenerNames``; the topic name is checked first, as a broker does;
- a named listener that demands more than the unnamed route did (authentication, or the
  client certificate of its own TLS handshake) is taken only with that proof: HTTP
  requests present their credentials again, a binary connection has what its CONNECT proved.

Refusals are counted as failed lookups and logged (serving.refusals) here; the shells only
answer them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pulsar_lookup_gateway.listeners.auth import (
    AuthenticationFailed,
    Credentials,
    Identity,
    ListenerGuard,
    not_authenticated,
)
from pulsar_lookup_gateway.listeners.endpoints.client_origin import ClientOrigin
from pulsar_lookup_gateway.lookup.errors import LookupFailure
from pulsar_lookup_gateway.lookup.resolve import listener_missing
from pulsar_lookup_gateway.lookup.selection import (
    NO_ROUTES,
    ChoiceSource,
    ClientRoutes,
    ListenerChoice,
    Step,
    Trace,
    choose_listener,
    given_name,
    is_listener_name,
)
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.lookup.untrusted import printable
from pulsar_lookup_gateway.serving.refusals import Refusals
from pulsar_lookup_gateway.serving.service import LookupService

#: Characters of a refused listener name kept (escaped) in an answer or a log line.
NAME_SHOWN = 64


@dataclass(frozen=True, slots=True)
class Route:
    """Where a request goes: `choice` holds the listener and why it was chosen (its source);
    `guard` the authentication and the listener names its socket allows; `identity` who the
    request proved to be under that guard, where decide() knows it (None: nobody, or not
    asked)."""

    choice: ListenerChoice
    guard: ListenerGuard
    identity: Identity | None = None

    @property
    def listener(self) -> str | None:
        return self.choice.name

    @property
    def chosen_by(self) -> ChoiceSource:
        return self.choice.source

    @property
    def role(self) -> str | None:
        """The role the request proved under this route (None: none, or not asked)."""
        return self.identity.role if self.identity is not None else None


#: What an HTTP request presents: its TLS session and its credentials (read when asked).
Presented = Callable[[], tuple[object, Credentials]]


@dataclass(frozen=True, slots=True)
class Proof:
    """What a connection (or request) proved under its unnamed route's guard, and what it
    presents to a named listener that demands more."""

    identity: Identity | None = None  # the role it authenticated as (None: none was required)
    #: Binary: the connection's TLS session (the handshake that served it, its certificate);
    #: CONNECT's credentials were checked once, under the socket's guard.
    ssl_object: object = None
    #: HTTP: the request's TLS session and credentials, read only where a named listener's
    #: guard demands more than the unnamed route's (each request presents its own).
    presented: Presented | None = None


NO_PROOF = Proof()


@dataclass(slots=True)
class Facts:
    """What a request says, and what its connection proved. (Made per request and read once:
    not frozen, as making a frozen dataclass costs several times as much.)"""

    unnamed: Route  # the route of the connection or request where it names no listener
    protocol: str  # "binary", "http": a metric label
    client: object  # who asks, for the log line (its str() is made only when one is written)
    explicit: str | None = None  # binary advertised_listener_name, HTTP ?listenerName=
    header: str | None = None  # HTTP X-Pulsar-ListenerName
    topic: str | TopicName | None = None  # None: a watch stream's (its topics come later)
    proof: Proof = NO_PROOF
    #: Where decide() records its steps (`explain`: a refusal is then not counted nor logged,
    #: as no lookup was made); None for a request.
    trace: Trace | None = None


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request may not take the route it asked for: `failure`, counted and logged."""

    failure: LookupFailure


class Router:
    """The routing decision of one socket (its listener tag and its guard), over the cluster's
    listeners: `internal_listener`, the `routes` that TLS server names and client networks
    choose, and the `declared` listeners (None: any name may be declared)."""

    def __init__(
        self,
        guard: ListenerGuard,
        refusals: Refusals,
        *,
        internal_listener: str | None = None,
        routes: ClientRoutes = NO_ROUTES,
        declared: frozenset[str] | None = None,
    ) -> None:
        self.guard = guard
        self._refusals = refusals
        self._listener = guard.listener
        self._internal = internal_listener
        self._routes = routes
        self._declared = declared
        # The guard of requests answered for another declared listener, made once each (the
        # routes of client networks and server names are asked per connection or request).
        self._guards: dict[str, ListenerGuard] = {}
        # What a request naming no listener gets: decided once for the socket, or once per
        # connection or request where server names or client networks can choose instead.
        self.socket_route = self._route_to(self._choose(socket_listener=guard.listener))
        self.located = bool(routes)

    @classmethod
    def of_service(cls, service: LookupService, guard: ListenerGuard) -> Router:
        """The router of a socket answered by `service` (its listeners, its refusals' count)."""
        return cls(
            guard,
            service.refusals,
            internal_listener=service.internal_listener,
            routes=service.routes,
            declared=service.declared_listeners,
        )

    def route(
        self, origin: ClientOrigin | None, server_name: str | None, trace: Trace | None = None
    ) -> Route:
        """The unnamed route of a client at `origin` that dialled `server_name` (TLS);
        `trace`: where its steps are recorded (`explain`: decided again, not read from the
        socket's route)."""
        if not self.located and trace is None:
            return self.socket_route
        choice = self._choose(
            server_name=server_name,
            client_address=origin.address if origin is not None else None,
            socket_listener=self._listener,
            allowed=self.guard.allowed_names,
            trace=trace,
        )
        return self._route_to(choice)

    def decide(self, facts: Facts) -> Route | Refusal:
        """The route a request takes: its unnamed route where it names no listener (with the
        identity it proved), else the listener it names, if it may take it and proved what
        that listener demands; a Refusal (counted and logged) where it may not."""
        unnamed = facts.unnamed
        explicit, header = given_name(facts.explicit), given_name(facts.header)
        if explicit is None and header is None:
            identity = facts.proof.identity
            return unnamed if identity is None else Route(unnamed.choice, unnamed.guard, identity)
        trace = facts.trace
        route = self._route_to(
            self._choose(
                explicit=explicit, header=header, socket_listener=self._listener, trace=trace
            )
        )
        refused = self._refusal(route)
        if refused is not None:
            topic = facts.topic
            if isinstance(topic, str):
                try:
                    TopicName.parse(topic)
                except LookupFailure as invalid:
                    refused = invalid
            return self._refuse(facts, route, refused)
        if route.guard is unnamed.guard:
            identity = facts.proof.identity
        else:  # the named listener demands more than the unnamed route did
            try:
                identity = _proved(route, facts.proof)
            except LookupFailure as unproven:
                return self._refuse(facts, route, unproven)
        if trace is not None:
            trace.append(Step("allowed", "this socket lets its clients ask for it"))
        return route if identity is None else Route(route.choice, route.guard, identity)

    def _refuse(self, facts: Facts, route: Route, failure: LookupFailure) -> Refusal:
        if facts.trace is not None:  # an explanation: no lookup was refused
            facts.trace.append(Step("refused", f"{failure.code.name}: {failure.message}", True))
        else:
            self._refusals.refuse(facts.protocol, facts.client, route.choice, facts.topic, failure)
        return Refusal(failure)

    def _choose(
        self,
        *,
        explicit: str | None = None,
        header: str | None = None,
        server_name: str | None = None,
        client_address: str | None = None,
        socket_listener: str | None = None,
        allowed: frozenset[str] | None = None,
        trace: Trace | None = None,
    ) -> ListenerChoice:
        return choose_listener(
            explicit=explicit,
            header=header,
            server_name=server_name,
            client_address=client_address,
            socket_listener=socket_listener,
            internal_listener=self._internal,
            routes=self._routes,
            allowed=allowed,
            trace=trace,
        )

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

    def _refusal(self, route: Route) -> LookupFailure | None:
        """Why a request may not name `route`'s listener (None: it may): a name that breaks
        the rule for listener names (answered as an unknown listener), or one the socket
        does not allow (allowedListenerNames)."""
        name = route.choice.name or ""
        if not is_listener_name(name):
            return listener_missing(printable(name, NAME_SHOWN))
        return self.guard.refusal(route.choice)  # names the refused listener only, escaped


def _proved(route: Route, proof: Proof) -> Identity | None:
    """Who the request is under `route`'s guard, a named listener's that demands more than its
    unnamed route's; raises LookupFailure(NOT_AUTHENTICATED) without the proof it demands."""
    guard = route.guard
    ssl_object, credentials = (
        proof.presented() if proof.presented is not None else (proof.ssl_object, None)
    )
    if guard.certificate_missing(ssl_object):
        raise not_authenticated(
            f"listener '{route.listener}' requires a client certificate presented to its own "
            "TLS socket or server name"
        )
    if not guard.required:
        return None
    if credentials is not None:  # (HTTP: each request presents its own)
        try:
            return guard.authenticate(credentials)
        except AuthenticationFailed as failed:
            raise not_authenticated(failed.reason) from None
    if proof.identity is None:
        raise not_authenticated(
            f"listener '{route.listener}' requires authentication; connect with credentials "
            "to a socket that requires them"
        )
    return proof.identity
