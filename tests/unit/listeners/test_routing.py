"""The one routing decision (listeners.routing): where a request goes, why, and which
authentication applies, the same for binary connections and HTTP requests."""

from __future__ import annotations

import logging

import jwt
import pytest

from pulsar_lookup_gateway.listeners.auth import (
    Authenticator,
    Credentials,
    Identity,
    TokenAuthenticationProvider,
)
from pulsar_lookup_gateway.listeners.binary.lookups import answer_may_be_shared
from pulsar_lookup_gateway.listeners.binary.session import Session
from pulsar_lookup_gateway.listeners.endpoints.client_origin import ClientOrigin
from pulsar_lookup_gateway.listeners.routing import (
    NAME_SHOWN,
    NO_PROOF,
    Facts,
    Proof,
    Refusal,
    Route,
    Router,
)
from pulsar_lookup_gateway.lookup.errors import FailureKind, ServerError
from pulsar_lookup_gateway.lookup.selection import ChoiceSource, ClientRoutes, Step
from pulsar_lookup_gateway.metadata_store.file import FileSource
from pulsar_lookup_gateway.serving.service import LookupService

ROUTES = ClientRoutes.build({"edge": ["edge.example.com"]}, {"office": ["10.0.0.0/8"]})
SECRET = b"s" * 32
CLIENT = "192.0.2.7:4000"


def serving(
    listener: str = "external",
    routes: ClientRoutes | None = None,
    allowed: dict[str, list[str]] | None = None,
    authenticator: Authenticator | None = None,
) -> tuple[Router, LookupService]:
    """A socket's router, and the service whose listeners and refusals' count it is given."""
    service = LookupService(
        FileSource("unused.json"),
        internal_listener="internal",
        declared_listeners=["internal", "external", "edge", "office", "dmz"],
        routes=routes or ClientRoutes(),
    )
    guard = (authenticator or Authenticator(allowed_names=allowed)).for_listener(listener)
    return Router.of_service(service, guard), service


def router(
    listener: str = "external",
    routes: ClientRoutes | None = None,
    allowed: dict[str, list[str]] | None = None,
) -> Router:
    return serving(listener, routes, allowed)[0]


def decide(
    plain: Router,
    explicit: str | None,
    header: str | None = None,
    *,
    unnamed: Route | None = None,
    topic: str | None = "persistent://t/n/x",
    proof: Proof = NO_PROOF,
    protocol: str = "binary",
) -> Route | Refusal:
    facts = Facts(unnamed or plain.socket_route, protocol, CLIENT, explicit, header, topic, proof)
    return plain.decide(facts)


def routed(decided: Route | Refusal) -> Route:
    assert isinstance(decided, Route), decided
    return decided


def refused(decided: Route | Refusal) -> Refusal:
    assert isinstance(decided, Refusal), decided
    return decided


def test_a_request_naming_no_listener_takes_the_sockets() -> None:
    plain = router()
    route = routed(decide(plain, None, None))
    assert route is plain.socket_route
    assert (route.listener, route.chosen_by) == ("external", ChoiceSource.SOCKET)
    # blank names are no names, on every protocol
    assert decide(plain, "", "") is plain.socket_route


def test_the_client_place_chooses_where_routes_are_configured() -> None:
    located = router(routes=ROUTES)
    office = ClientOrigin.of_peer(("10.1.2.3", 5000), "pulsar://gw:6650")
    assert located.route(office, None).listener == "office"
    assert located.route(office, "edge.example.com").listener == "edge"  # the name dialled wins
    elsewhere = ClientOrigin.of_peer(("192.0.2.1", 5000), "pulsar://gw:6650")
    assert located.route(elsewhere, None) == located.socket_route


def test_an_explicit_name_wins_over_the_header_and_the_place() -> None:
    located = router(routes=ROUTES)
    office = located.route(ClientOrigin.of_peer(("10.1.2.3", 5000), "x"), None)
    route = routed(decide(located, "internal", "edge", unnamed=office))
    assert (route.listener, route.chosen_by) == ("internal", ChoiceSource.EXPLICIT)
    route = routed(decide(located, None, "edge", unnamed=office))
    assert (route.listener, route.chosen_by) == ("edge", ChoiceSource.HEADER)
    assert route.guard is located.guard  # the socket's authentication applies


@pytest.mark.parametrize(
    "name", ["a\nb", "x" * 129, "evil listener=internal", "\x1b[2J", "ünïcode", "a/b"]
)
def test_a_name_that_breaks_the_rule_is_an_unknown_listener(name: str) -> None:
    plain = router()
    # a well-formed unknown name goes on to resolve(), which refuses it
    assert routed(decide(plain, "nope")).listener == "nope"
    failure = refused(decide(plain, name)).failure
    assert failure.kind is FailureKind.LISTENER_NOT_FOUND
    assert failure.code is ServerError.ServiceNotReady
    assert failure.message.startswith("the broker do not have ")
    assert failure.message.endswith(" listener")
    shown = failure.message.removeprefix("the broker do not have ").removesuffix(" listener")
    assert shown.isprintable() and "\n" not in shown
    assert len(shown) < NAME_SHOWN + 40  # escaped, and cut short with a note of how much


def test_allowed_listener_names_are_checked_for_named_requests_only() -> None:
    fenced = router(allowed={"external": ["dmz"]})
    assert routed(decide(fenced, "dmz")).listener == "dmz"
    assert routed(decide(fenced, "external")).listener == "external"  # its own
    failure = refused(decide(fenced, None, "internal")).failure
    assert failure.kind is FailureKind.LISTENER_NOT_ALLOWED
    assert "dmz" not in failure.message  # which names are allowed is not a stranger's business
    assert decide(fenced, None) is fenced.socket_route


def test_blank_names_leave_the_clients_place_to_choose() -> None:
    """A name of spaces is no name: the client's network still chooses (on every protocol)."""
    located = router(routes=ROUTES)
    office = located.route(ClientOrigin.of_peer(("10.1.2.3", 5000), "x"), None)
    assert office.listener == "office"
    for blank in (" ", "\t", " \r\n"):
        assert decide(located, blank, None, unnamed=office) is office
        assert decide(located, None, blank, unnamed=office) is office
        assert decide(located, blank, blank, unnamed=office) is office
    # a blank explicit name leaves the header to choose, as if it were absent
    assert routed(decide(located, " ", "edge", unnamed=office)).chosen_by is ChoiceSource.HEADER


def failures(
    service: LookupService, listener: str, chosen_by: str, protocol: str, error: str
) -> float:
    registry = service.metrics.registry
    labels = {"listener": listener, "chosen_by": chosen_by, "protocol": protocol, "error": error}
    return registry.get_sample_value("pulsar_broker_lookup_failures_total", labels) or 0.0


def test_decide_counts_and_logs_a_refused_name_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pulsar_lookup_gateway.serving.service")
    plain, service = serving()
    assert decide(plain, "") is plain.socket_route
    assert routed(decide(plain, "internal")).listener == "internal"
    failure = refused(decide(plain, "evil\nname")).failure
    assert failure.kind is FailureKind.LISTENER_NOT_FOUND
    assert failure.logged  # the front end writes no second line
    # counted as a failed lookup, under the label of names the config does not declare
    assert failures(service, "undeclared", "explicit", "binary", "ServiceNotReady") == 1
    (line,) = [r.getMessage() for r in caplog.records]
    assert f"client={CLIENT}" in line and "evil\\nname" in line and "\n" not in line


def test_decide_checks_the_topic_name_before_the_listener_name() -> None:
    """As a broker: an invalid topic is InvalidTopicName whatever listener name comes with it,
    on binary as on HTTP (which parses the topic before it chooses)."""
    plain, service = serving()
    failure = refused(decide(plain, "evil name", topic="persistent://no-namespace")).failure
    assert failure.kind is FailureKind.INVALID_TOPIC
    assert failures(service, "undeclared", "explicit", "binary", "InvalidTopicName") == 1
    # a valid name and an invalid topic: the route is taken; the service refuses the topic
    route = routed(decide(plain, "internal", topic="persistent://no-namespace"))
    assert route.listener == "internal"
    # a watch stream names its topics later: only the listener name is checked
    assert refused(decide(plain, "evil name", topic=None)).failure.kind is (
        FailureKind.LISTENER_NOT_FOUND
    )


def secured() -> Authenticator:
    """`dmz` requires authentication; the other listeners do not."""
    provider = TokenAuthenticationProvider(SECRET, "HS256")
    return Authenticator([provider], required={"dmz": True})


def token(role: str) -> bytes:
    return jwt.encode({"sub": role}, SECRET, algorithm="HS256").encode()


def test_a_named_listener_that_requires_authentication_needs_the_proof() -> None:
    """A connection that proved nothing under its own listener may not name one that requires
    authentication (binary: its CONNECT gave no credentials), and is counted and logged."""
    plain, service = serving(authenticator=secured())
    failure = refused(decide(plain, "dmz")).failure
    assert failure.kind is FailureKind.NOT_AUTHENTICATED
    assert "listener 'dmz' requires authentication" in failure.message
    assert failure.logged
    assert failures(service, "dmz", "explicit", "binary", "AuthenticationError") == 1
    # what the connection proved carries over to the named listener
    proved = Identity("producer", "token")
    assert routed(decide(plain, "dmz", proof=Proof(identity=proved))).identity == proved
    # the unnamed route keeps no identity unless one was proved
    assert routed(decide(plain, None)).identity is None
    assert routed(decide(plain, None, proof=Proof(identity=proved))).identity == proved


def test_an_http_request_proves_itself_again_under_the_named_listener() -> None:
    """HTTP requests present their credentials each time: they are checked under the named
    listener's guard, and the role they prove is the route's."""
    plain, service = serving(authenticator=secured())
    good = Proof(presented=lambda: (None, Credentials(data=token("consumer"))))
    route = routed(decide(plain, "dmz", proof=good, protocol="http"))
    assert route.identity is not None and route.identity.role == "consumer"
    bad = Proof(presented=lambda: (None, Credentials(data=b"not-a-token")))
    failure = refused(decide(plain, None, "dmz", proof=bad, protocol="http")).failure
    assert failure.kind is FailureKind.NOT_AUTHENTICATED
    assert failure.message.startswith("Unable to authenticate: ")
    assert failures(service, "dmz", "header", "http", "AuthenticationError") == 1


def test_a_named_listener_that_requires_a_client_certificate_needs_its_handshake() -> None:
    """A listener whose TLS sockets require a trusted client certificate is answered for from
    another socket only over a connection its own handshake served (ssl_object None: not)."""
    certified = Authenticator(certificate_required=["dmz"])
    plain = serving(authenticator=certified)[0]
    failure = refused(decide(plain, "dmz")).failure
    assert failure.kind is FailureKind.NOT_AUTHENTICATED
    assert "listener 'dmz' requires a client certificate" in failure.message
    assert routed(decide(plain, "edge")).listener == "edge"  # other listeners need none


def test_a_binary_answer_is_shared_in_the_memo_only_where_every_sharer_may_have_it() -> None:
    """Unauthenticated connections of one socket and route share a memo table keyed by the
    request's bytes: an answer for a named listener that demands a client certificate is not
    kept there (a connection without one would get it from the memo, past decide())."""
    plain = serving(authenticator=Authenticator(certificate_required=["dmz"]))[0]
    session = Session(ClientOrigin.of_peer(("192.0.2.7", 4000)), plain.socket_route)
    assert answer_may_be_shared(session.route, session)
    assert answer_may_be_shared(routed(decide(plain, "edge")), session)
    demanding = plain.socket_route.guard.joined(plain.guard.authenticator.for_listener("dmz"))
    named = Route(routed(decide(plain, "edge")).choice, demanding)
    assert demanding.certificate_of == "dmz" and not answer_may_be_shared(named, session)


def test_a_traced_decision_is_the_same_decision_and_a_refusal_in_it_is_not_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """explain's trace: route() decides again (its steps recorded) and gives the route the
    socket gives; decide() records its steps and refusal, which is neither counted nor
    logged (no lookup was refused)."""
    caplog.set_level(logging.INFO, logger="pulsar_lookup_gateway.serving.service")
    plain, service = serving(allowed={"external": ["external"]})
    steps: list[Step] = []
    assert plain.route(None, None, steps) == plain.socket_route
    assert [(s.rule, s.decided) for s in steps if s.decided] == [("socket", True)]
    located = router(routes=ROUTES)
    office = ClientOrigin.of_peer(("10.1.2.3", 5000), "pulsar://gw:6650")
    traced: list[Step] = []
    assert located.route(office, None, traced) == located.route(office, None)
    assert any(s.rule == "network" and s.decided and "'office'" in s.found for s in traced)
    request: list[Step] = []
    facts = Facts(plain.socket_route, "binary", CLIENT, "internal", None, "t", trace=request)
    failure = refused(plain.decide(facts)).failure
    assert request[0] == Step("explicit", "the client named 'internal'", True)
    assert request[-1] == Step("refused", f"{failure.code.name}: {failure.message}", True)
    assert failures(service, "internal", "explicit", "binary", failure.code.name) == 0
    assert caplog.records == []
    # the same request, not traced, is refused and counted
    refused(decide(plain, "internal"))
    assert failures(service, "internal", "explicit", "binary", failure.code.name) == 1
