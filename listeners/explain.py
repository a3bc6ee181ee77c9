"""`explain`: why a client gets the answer it gets, step by step.

Nothing here decides: the socket's Router takes the routing decision (Router.route, then
Router.decide, each recording its steps in a Trace as it decides) and the lookup core resolves
the topic for the listener chosen (lookup.resolve, read through the service as a lookup reads
it). This module only asks them, with the facts of a client, and lays out what they recorded
and answered. A refusal explained is neither counted nor logged: no lookup was made."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pulsar_lookup_gateway.listeners.binary.lookups import no_binary_url
from pulsar_lookup_gateway.listeners.endpoints.client_origin import AddressSource, ClientOrigin
from pulsar_lookup_gateway.listeners.routing import NO_PROOF, Facts, Route, Router
from pulsar_lookup_gateway.lookup.errors import LookupFailure
from pulsar_lookup_gateway.lookup.model import ownership_path
from pulsar_lookup_gateway.lookup.resolve import LookupAnswer, ResponseKind, resolve
from pulsar_lookup_gateway.lookup.selection import Step, Trace
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.serving.service import LookupService

BINARY_SCHEMES = frozenset({"pulsar", "pulsar+ssl"})


@dataclass(frozen=True, slots=True)
class SocketFacts:
    """The gateway socket a client reached (a row of the socket table)."""

    url: str  # e.g. pulsar+ssl://127.0.0.2:6651
    scheme: str  # pulsar, pulsar+ssl, http, https
    listener: str | None  # its tag (None: a legacy untagged port)
    origin: str = ""  # the key it comes from (bindAddresses entry, brokerServicePort...)

    @property
    def binary(self) -> bool:
        return self.scheme in BINARY_SCHEMES

    @property
    def tls(self) -> bool:
        return self.scheme in ("pulsar+ssl", "https")


@dataclass(frozen=True, slots=True)
class ClientFacts:
    """What a client brings: its address (after PROXY or trusted forwarded headers), the TLS
    server name it dialled, X-Pulsar-ListenerName (HTTP), and the listener it names (binary
    advertised_listener_name, HTTP listenerName)."""

    address: str | None = None
    server_name: str | None = None
    header: str | None = None
    listener: str | None = None


def steps_json(trace: Trace) -> list[dict[str, Any]]:
    return [{"rule": s.rule, "found": s.found, "decided": s.decided} for s in trace]


def answer_fields(answer: LookupAnswer) -> dict[str, Any]:
    """An answer as the lookup commands print it; an absent URL is "", as in the HTTP
    lookup's LookupData (and an unset binary field)."""
    return {
        "topic": answer.topic.full,
        "bundle": answer.bundle.name,
        "response": answer.response.value,
        "authoritative": answer.authoritative,
        "brokerId": answer.broker_id,
        "brokerServiceUrl": answer.urls.service_url or "",
        "brokerServiceUrlTls": answer.urls.service_url_tls or "",
        "httpUrl": answer.urls.http_url or "",
        "httpUrlTls": answer.urls.http_url_tls or "",
        "listener": answer.listener.name,
        "listenerChosenBy": answer.listener.source.value,
    }


async def explain(
    service: LookupService,
    router: Router,
    socket: SocketFacts,
    topic: str,
    client: ClientFacts,
) -> dict[str, Any]:
    """Each step of the answer a client with `client`'s facts gets on `socket` (whose Router
    is `router`) for `topic`: the connection's route, the request's decision where it names
    a listener, what would be refused, the bundle, its owner and the URLs."""
    notes: list[str] = []
    origin = None
    if client.address:
        origin = ClientOrigin(client.address, AddressSource.PEER, client.address, socket=socket.url)
    header = client.header
    if socket.binary and header:
        notes.append("a binary connection has no headers: X-Pulsar-ListenerName is not read")
        header = None
    server_name = client.server_name
    if server_name and not socket.tls:
        notes.append("a plaintext socket sees no TLS server name: it is not read")
        server_name = None
    connection: Trace = []
    unnamed = router.route(origin, server_name, connection)
    request: Trace = []
    facts = Facts(
        unnamed,
        "binary" if socket.binary else "http",
        origin,
        explicit=client.listener,
        header=header,
        topic=topic,
        proof=NO_PROOF,
        trace=request,
    )
    decided = router.decide(facts)
    result: dict[str, Any] = {
        "topic": topic,
        "socket": {"url": socket.url, "scheme": socket.scheme, "listener": socket.listener},
        "client": {
            "address": client.address,
            "serverName": client.server_name,
            "header": client.header,
            "listenerName": client.listener,
        },
        "connection": steps_json(connection),
        "request": steps_json(request),
    }
    if not isinstance(decided, Route):
        failure = decided.failure
        result["refused"] = {"error": failure.code.name, "message": failure.message}
        result["notes"] = notes
        return result
    result["listener"] = decided.listener
    result["chosenBy"] = decided.chosen_by.value
    result["demands"] = _demands(service, router, decided)
    try:
        name = TopicName.parse(topic)
        policy, choice = service.policy, decided.choice
        with service.admitted():  # counted against maxConcurrentLookupRequest, as a lookup
            answer = await service.read(lambda view: resolve(name, choice, view, policy))
    except LookupFailure as failure:
        result["refused"] = {"error": failure.code.name, "message": failure.message}
        result["notes"] = notes
        return result
    result["answer"] = answer_fields(answer)
    result["bundle"] = f"{answer.topic.namespace_name}/{answer.bundle.name}"
    result["owner"] = _owner(service, answer)
    notes += _client_urls(socket, answer)
    result["notes"] = notes
    if socket.binary and (unanswerable := no_binary_url(answer)) is not None:
        result["refused"] = {"error": "ServiceNotReady", "message": unanswerable}
    return result


def _demands(service: LookupService, router: Router, route: Route) -> list[str]:
    """What a request on this route must prove, and what the socket refuses."""
    guard = route.guard
    demands = []
    if guard.required:
        demands.append(
            "authentication: a request without valid credentials is refused (NOT_AUTHENTICATED)"
        )
    if guard.certificate_of is not None:
        demands.append(
            f"a client certificate verified by listener '{guard.certificate_of}''s own TLS "
            "handshake (tlsRequireTrustedClientCertOnConnect)"
        )
    allowed = router.guard.allowed_names
    if allowed is not None:
        names = ", ".join(sorted(allowed)) or "none"
        demands.append(
            f"a listener name other than the socket's own or {names} is refused "
            "(allowedListenerNames)"
        )
    if service.authorizer is not None:
        demands.append("authorization: the role must have a permission on the topic")
    return demands


def _owner(service: LookupService, answer: LookupAnswer) -> str:
    """Who serves the bundle, and where the metadata says so."""
    node = ownership_path(answer.topic.namespace_name, answer.bundle.name)
    if answer.peer_cluster is not None:
        return f"the namespace is served by cluster '{answer.peer_cluster}': a redirect there"
    if answer.response is ResponseKind.CONNECT:
        return f"broker {answer.broker_id} owns bundle {answer.bundle.name} ({node})"
    if not answer.needs_broker:
        return f"a redirect to broker {answer.broker_id}"
    taken = (
        "a lookup through the gateway asks that broker, which takes the bundle, and answers "
        "with the owner it names"
        if service.forwarded is not None
        else "the lookup is answered with this redirect"
    )
    return (
        f"nobody owns bundle {answer.bundle.name} ({node} is absent): a non-authoritative "
        f"redirect to broker {answer.broker_id}; {taken}"
    )


def _client_urls(socket: SocketFacts, answer: LookupAnswer) -> list[str]:
    """Which of the answer's URLs a client of this socket connects to next."""
    urls = answer.urls
    if socket.binary:
        pair = (("plaintext", "brokerServiceUrl", urls.service_url),
                ("TLS", "brokerServiceUrlTls", urls.service_url_tls))  # fmt: skip
    else:
        pair = (("plaintext", "brokerUrl", urls.service_url),
                ("TLS", "brokerUrlTls", urls.service_url_tls))  # fmt: skip
    notes = []
    goes = "connects to" if answer.response is ResponseKind.CONNECT else "is redirected to"
    for kind, field, url in pair:
        if url:
            notes.append(f"a {kind} client {goes} {field} {url}")
        else:
            notes.append(
                f"a {kind} client gets {field} '' (the owner advertises none for listener "
                f"'{answer.listener.name}'): the Pulsar clients fail with \"Invalid Url\""
            )
    return notes


__all__ = [
    "ClientFacts",
    "SocketFacts",
    "Step",
    "answer_fields",
    "explain",
    "find_socket",
    "steps_json",
]


def find_socket(sockets: list[SocketFacts], wanted: str | None) -> SocketFacts:
    """The socket `wanted` names: its URL, `LISTENER:SCHEME`, a listener (its first socket) or
    a legacy port's key (brokerServicePort...); None: the first socket. ValueError lists the
    sockets there are."""
    if not sockets:
        raise ValueError("the config opens no socket")
    if wanted is None or not wanted.strip():
        return sockets[0]
    wanted = wanted.strip()
    for socket in sockets:
        tag = socket.listener or "-"
        if wanted in (socket.url, f"{tag}:{socket.scheme}", socket.origin):
            return socket
    for socket in sockets:
        if wanted == socket.listener:
            return socket
    there = ", ".join(f"{s.listener or '-'}:{s.scheme} ({s.url})" for s in sockets)
    raise ValueError(f"no socket '{wanted[:100]}': the sockets are {there}")
