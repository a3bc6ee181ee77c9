"""The one routing decision (listeners.routing): where a request goes, why, and which
authentication applies, the same for binary connections and HTTP requests."""

from __future__ import annotations

import logging

import pytest

from pulsar_lookup_gateway.listeners.auth import Authenticator
from pulsar_lookup_gateway.listeners.endpoints.client_origin import ClientOrigin
from pulsar_lookup_gateway.listeners.routing import NAME_SHOWN, Route, Router
from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure, ServerError
from pulsar_lookup_gateway.lookup.selection import ChoiceSource, ClientRoutes
from pulsar_lookup_gateway.metadata_store.file import FileSource
from pulsar_lookup_gateway.serving.service import LookupService

ROUTES = ClientRoutes.build({"edge": ["edge.example.com"]}, {"office": ["10.0.0.0/8"]})


def router(
    listener: str = "external",
    routes: ClientRoutes | None = None,
    allowed: dict[str, list[str]] | None = None,
) -> Router:
    service = LookupService(
        FileSource("unused.json"),
        internal_listener="internal",
        declared_listeners=["internal", "external", "edge", "office", "dmz"],
    )
    if routes is not None:
        service.routes = routes
    guard = Authenticator(allowed_names=allowed).for_listener(listener)
    return Router(service, guard)


def test_a_request_naming_no_listener_takes_the_sockets() -> None:
    plain = router()
    route = plain.named(plain.socket_route, None, None)
    assert route is plain.socket_route
    assert (route.listener, route.chosen_by) == ("external", ChoiceSource.SOCKET)
    assert plain.refusal(route) is None
    # blank names are no names, on every protocol
    assert plain.named(plain.socket_route, "", "") is plain.socket_route


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
    route = located.named(office, "internal", "edge")
    assert (route.listener, route.chosen_by) == ("internal", ChoiceSource.EXPLICIT)
    route = located.named(office, None, "edge")
    assert (route.listener, route.chosen_by) == ("edge", ChoiceSource.HEADER)
    assert route.guard is located.guard  # the socket's authentication applies


@pytest.mark.parametrize(
    "name", ["a\nb", "x" * 129, "evil listener=internal", "\x1b[2J", "ünïcode", "a/b"]
)
def test_a_name_that_breaks_the_rule_is_an_unknown_listener(name: str) -> None:
    plain = router()
    unknown = plain.refusal(plain.named(plain.socket_route, "nope"))
    assert unknown is None  # a well-formed unknown name goes on to resolve(), which refuses it
    refused = plain.refusal(plain.named(plain.socket_route, name))
    assert refused is not None
    assert refused.kind is FailureKind.LISTENER_NOT_FOUND
    assert refused.code is ServerError.ServiceNotReady
    assert refused.message.startswith("the broker do not have ")
    assert refused.message.endswith(" listener")
    shown = refused.message.removeprefix("the broker do not have ").removesuffix(" listener")
    assert shown.isprintable() and "\n" not in shown
    assert len(shown) < NAME_SHOWN + 40  # escaped, and cut short with a note of how much


def test_allowed_listener_names_are_checked_for_named_requests_only() -> None:
    fenced = router(allowed={"external": ["dmz"]})
    assert fenced.refusal(fenced.named(fenced.socket_route, "dmz")) is None
    assert fenced.refusal(fenced.named(fenced.socket_route, "external")) is None  # its own
    refused = fenced.refusal(fenced.named(fenced.socket_route, None, "internal"))
    assert refused is not None and refused.kind is FailureKind.LISTENER_NOT_ALLOWED
    assert "dmz" not in refused.message  # which names are allowed is not a stranger's business
    assert fenced.refusal(fenced.socket_route) is None


def test_blank_names_leave_the_clients_place_to_choose() -> None:
    """A name of spaces is no name: the client's network still chooses (on every protocol)."""
    located = router(routes=ROUTES)
    office = located.route(ClientOrigin.of_peer(("10.1.2.3", 5000), "x"), None)
    assert office.listener == "office"
    for blank in (" ", "\t", " \r\n"):
        assert located.named(office, blank, None) is office
        assert located.named(office, None, blank) is office
        assert located.named(office, blank, blank) is office
    # a blank explicit name leaves the header to choose, as if it were absent
    assert located.named(office, " ", "edge").chosen_by is ChoiceSource.HEADER


def failures(plain: Router, listener: str, chosen_by: str, protocol: str, error: str) -> float:
    registry = plain._service.metrics.registry
    labels = {"listener": listener, "chosen_by": chosen_by, "protocol": protocol, "error": error}
    return registry.get_sample_value("pulsar_broker_lookup_failures_total", labels) or 0.0


def decide(plain: Router, name: str, topic: str = "persistent://t/n/x") -> Route:
    return plain.decide(
        plain.socket_route, name, None, protocol="binary", client="192.0.2.7:4000", topic=topic
    )


def test_decide_counts_and_logs_a_refused_name_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pulsar_lookup_gateway.serving.service")
    plain = router()
    assert decide(plain, "") is plain.socket_route
    assert decide(plain, "internal").listener == "internal"
    with pytest.raises(LookupFailure) as refused:
        decide(plain, "evil\nname")
    assert refused.value.kind is FailureKind.LISTENER_NOT_FOUND
    assert refused.value.logged  # the front end writes no second line
    # counted as a failed lookup, under the label of names the config does not declare
    assert failures(plain, "undeclared", "explicit", "binary", "ServiceNotReady") == 1
    (line,) = [r.getMessage() for r in caplog.records]
    assert "client=192.0.2.7:4000" in line and "evil\\nname" in line and "\n" not in line


def test_decide_checks_the_topic_name_before_the_listener_name() -> None:
    """As a broker: an invalid topic is InvalidTopicName whatever listener name comes with it,
    on binary as on HTTP (which parses the topic before it chooses)."""
    plain = router()
    with pytest.raises(LookupFailure) as refused:
        decide(plain, "evil name", topic="persistent://no-namespace")
    assert refused.value.kind is FailureKind.INVALID_TOPIC
    assert failures(plain, "undeclared", "explicit", "binary", "InvalidTopicName") == 1
    # a valid name and an invalid topic: the route is taken; the service refuses the topic
    assert decide(plain, "internal", topic="persistent://no-namespace").listener == "internal"
