"""The one routing decision (listeners.routing): where a request goes, why, and which
authentication applies, the same for binary connections and HTTP requests."""

from __future__ import annotations

import pytest

from pulsar_lookup_gateway.listeners.auth import Authenticator
from pulsar_lookup_gateway.listeners.client_origin import ClientOrigin
from pulsar_lookup_gateway.listeners.routing import NAME_SHOWN, Router
from pulsar_lookup_gateway.lookup.errors import FailureKind, ServerError
from pulsar_lookup_gateway.lookup.selection import ChoiceSource, ClientRoutes
from pulsar_lookup_gateway.lookup.service import LookupService
from pulsar_lookup_gateway.metadata_store.file import FileSource

ROUTES = ClientRoutes.build({"edge": ["edge.example.com"]}, {"office": ["10.0.0.0/8"]})


def router(
    listener: str = "external",
    routes: ClientRoutes | None = None,
    allowed: dict[str, list[str]] | None = None,
) -> Router:
    service = LookupService(FileSource("unused.json"), internal_listener="internal")
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
