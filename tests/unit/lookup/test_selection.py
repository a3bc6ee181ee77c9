from __future__ import annotations

import pytest

from pulsar_lookup_gateway.lookup.selection import (
    ChoiceSource,
    ClientRoutes,
    ListenerChoice,
    Step,
    choose_listener,
)

E, H, S = ChoiceSource.EXPLICIT, ChoiceSource.HEADER, ChoiceSource.SOCKET
INT = ChoiceSource.INTERNAL


@pytest.mark.parametrize(
    ("explicit", "header", "socket", "expected"),
    [
        ("ext", "hdr", "sock", ListenerChoice("ext", E)),
        (None, "hdr", "sock", ListenerChoice("hdr", H)),
        ("", "hdr", "sock", ListenerChoice("hdr", H)),  # blank means absent (Pulsar #14304)
        ("  ", None, "sock", ListenerChoice("sock", S)),
        (None, "", "sock", ListenerChoice("sock", S)),
        (None, None, None, ListenerChoice("internal", INT, internal=True)),
        ("", "", None, ListenerChoice("internal", INT, internal=True)),
        (" ext ", None, None, ListenerChoice("ext", E)),
        ("internal", None, "sock", ListenerChoice("internal", E, internal=True)),
        (None, None, "internal", ListenerChoice("internal", S, internal=True)),
    ],
)
def test_precedence(
    explicit: str | None, header: str | None, socket: str | None, expected: ListenerChoice
) -> None:
    choice = choose_listener(
        explicit=explicit, header=header, socket_listener=socket, internal_listener="internal"
    )
    assert choice == expected
    assert choice.uses_listener_urls is (expected.source is not INT)


async def test_metric_labels_use_only_declared_listener_names() -> None:
    from pulsar_lookup_gateway.metadata_store.file import FileSource
    from pulsar_lookup_gateway.serving.service import UNDECLARED, LookupService

    service = LookupService(FileSource("unused.json"), declared_listeners=["internal"])
    assert service._label("internal") == "internal"
    assert service._label("random-name-from-a-client") == UNDECLARED
    assert service._label(None) == ""
    assert LookupService(FileSource("unused.json"))._label("anything") == "anything"


# --- client location: TLS server name and client network (issue 15) ----------------------------

SNI, NET = ChoiceSource.SNI, ChoiceSource.NETWORK
ROUTES = ClientRoutes.build(
    {"edge": ["edge.example.com", "*.edge.example.com"], "dmz": ["*.example.com"]},
    {
        "office": ["10.0.0.0/8", "2001:db8::/32"],
        "lab": ["10.20.0.0/16"],
        "host": ["10.20.30.40"],
        "internal": ["127.0.0.0/8"],
    },
)


@pytest.mark.parametrize(
    ("explicit", "header", "sni", "address", "expected"),
    [
        # each rule wins over every rule below it
        ("x", "hdr", "edge.example.com", "10.1.2.3", ListenerChoice("x", E)),
        (None, "hdr", "edge.example.com", "10.1.2.3", ListenerChoice("hdr", H)),
        (None, None, "edge.example.com", "10.1.2.3", ListenerChoice("edge", SNI)),
        (None, None, "unknown.test", "10.1.2.3", ListenerChoice("office", NET)),
        (None, None, None, "192.0.2.1", ListenerChoice("sock", S)),
        (None, None, None, None, ListenerChoice("sock", S)),
        # server names: case-insensitive, trailing dot, exact beats wildcard, longest suffix
        (None, None, "EDGE.Example.COM.", None, ListenerChoice("edge", SNI)),
        (None, None, "a.b.edge.example.com", None, ListenerChoice("edge", SNI)),
        (None, None, "www.example.com", None, ListenerChoice("dmz", SNI)),
        (None, None, "example.com", None, ListenerChoice("sock", S)),  # *.x is not x
        (None, None, "badexample.com", None, ListenerChoice("sock", S)),
        # networks: the most specific prefix across listeners wins
        (None, None, None, "10.20.30.40", ListenerChoice("host", NET)),
        (None, None, None, "10.20.30.41", ListenerChoice("lab", NET)),
        (None, None, None, "10.21.0.1", ListenerChoice("office", NET)),
        (None, None, None, "2001:db8::7", ListenerChoice("office", NET)),
        (None, None, None, "::ffff:10.20.30.40", ListenerChoice("host", NET)),  # dual-stack
        (None, None, None, "127.0.0.5", ListenerChoice("internal", NET, internal=True)),
        (None, None, None, "not-an-address", ListenerChoice("sock", S)),
    ],
)
def test_precedence_with_location(
    explicit: str | None,
    header: str | None,
    sni: str | None,
    address: str | None,
    expected: ListenerChoice,
) -> None:
    choice = choose_listener(
        explicit=explicit,
        header=header,
        server_name=sni,
        client_address=address,
        socket_listener="sock",
        internal_listener="internal",
        routes=ROUTES,
    )
    assert choice == expected


def test_inferred_listener_the_socket_does_not_permit_is_passed_over() -> None:
    def chosen(allowed: frozenset[str] | None, sni: str | None, address: str) -> ListenerChoice:
        return choose_listener(
            server_name=sni,
            client_address=address,
            socket_listener="sock",
            internal_listener="internal",
            routes=ROUTES,
            allowed=allowed,
        )

    assert chosen(frozenset({"office"}), "edge.example.com", "10.1.1.1") == ListenerChoice(
        "office", NET
    )
    assert chosen(frozenset(), "edge.example.com", "10.1.1.1") == ListenerChoice("sock", S)
    assert chosen(None, "edge.example.com", "10.1.1.1") == ListenerChoice("edge", SNI)


def test_without_routes_location_is_ignored() -> None:
    choice = choose_listener(
        server_name="edge.example.com", client_address="10.1.1.1", socket_listener="sock"
    )
    assert choice == ListenerChoice("sock", S)


@pytest.mark.parametrize(
    ("sni", "cidrs", "message"),
    [
        ({"a": ["x.test"], "b": ["X.test."]}, {}, "server name 'x.test' is also a's"),
        ({}, {"a": ["10.0.0.0/8"], "b": ["10.0.0.0/8"]}, "10.0.0.0/8 is also a's"),
        ({}, {"a": ["10.1.0.0/8"]}, "has host bits set; did you mean 10.0.0.0/8"),
        ({}, {"a": ["10.0.0.0/33"]}, "is not an IPv4 or IPv6 CIDR"),
        ({"a": ["*"]}, {}, "is not a host name"),
        ({"a": ["a.*.test"]}, {}, "is not a host name"),
        ({"a": ["bad_name.test"]}, {}, "is not a host name"),
    ],
)
def test_routes_refuse_ambiguous_or_malformed_rules(
    sni: dict[str, list[str]], cidrs: dict[str, list[str]], message: str
) -> None:
    with pytest.raises(ValueError, match=message.replace(".", r"\.").replace("*", r"\*")):
        ClientRoutes.build(sni, cidrs)


def test_the_same_rule_twice_for_one_listener_is_harmless() -> None:
    routes = ClientRoutes.build({"a": ["x.test", "x.test"]}, {"a": ["10.0.0.0/8", "10.0.0.0/8"]})
    assert routes.by_server_name("x.test") == "a"
    assert routes.by_address("10.9.9.9") == "a"


TRACED_ROUTES = ClientRoutes.build({"edge": ["*.edge.example"]}, {"office": ["10.7.0.0/16"]})


@pytest.mark.parametrize(
    ("facts", "rule", "found"),
    [
        ({"explicit": "ext", "header": "hdr"}, "explicit", "the client named 'ext'"),
        ({"header": "hdr", "server_name": "a.edge.example"}, "header", "'hdr'"),
        ({"server_name": "a.edge.example", "client_address": "10.7.1.1"}, "sni", "'edge'"),
        ({"server_name": "other.example", "client_address": "10.7.1.1"}, "network", "'office'"),
        ({"client_address": "10.9.1.1", "socket_listener": "sock"}, "socket", "'sock'"),
        ({"client_address": "10.9.1.1"}, "internal", "internalListenerName: internal"),
        # a listener the socket does not allow is passed over, and the trace says so
        ({"client_address": "10.7.1.1", "socket_listener": "sock", "allowed": frozenset()},
         "socket", "'sock'"),
    ],
)  # fmt: skip
def test_the_trace_records_the_decision_as_it_is_taken(
    facts: dict[str, object], rule: str, found: str
) -> None:
    """Every rule in precedence order: those before the one that chose say what they found,
    the one that chose is marked, those after were not consulted; and the choice is the one
    made without a trace."""
    trace: list[Step] = []
    kwargs: dict[str, object] = {"internal_listener": "internal", "routes": TRACED_ROUTES, **facts}
    traced = choose_listener(**kwargs, trace=trace)  # type: ignore[arg-type]
    assert traced == choose_listener(**kwargs)  # type: ignore[arg-type]
    assert [step.rule for step in trace] == [source.value for source in ChoiceSource]
    [decided] = [step for step in trace if step.decided]
    assert (decided.rule, traced.source.value) == (rule, rule)
    assert found in decided.found
    after = trace[trace.index(decided) + 1 :]
    assert all(step.found == f"not consulted: {rule} chose first" for step in after)
    before = trace[: trace.index(decided)]
    assert not any("not consulted" in step.found for step in before)
    if "allowed" in facts:
        assert "allowedListenerNames do not include: passed over" in trace[3].found
