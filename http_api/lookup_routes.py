"""Pulsar's lookup routes: a topic's owner for the client's listener (`/lookup/v2/topic/...`),
its bundle, and the owner's endpoints of a protocol handler.

A listener is chosen per request: `?listenerName=` wins over the `X-Pulsar-ListenerName`
header, which wins over the socket's route (the client's network or TLS server name, else the
socket's listener); the route's guard says who must authenticate, and the role is authorized
for the topic. A 307 goes to the target broker's web URL *for the chosen listener*
(http_api.lookup_answers). Warm lookups are answered from the socket's tables in the process's
answer memo (serving.memo), read and filled in `LookupRoutes.lookup` only.

The answer to `GET /lookup/v2/topic/...` is a function of the raw request target (the topic
and `?listenerName=`), the `X-Pulsar-ListenerName` header, the route the socket gives a
request that names no listener, whether the request came over TLS (a redirect's scheme), and
the cluster view. An entry is made from the full path's own answer, only when no write came
while it ran (the mark) and it needed no credentials; it is filed under the topic's bundle
(and, for a persistent topic, under the namespace's topic nodes: a topic that neither exists
nor may be created answers 404), and forgotten by what a write may change, as binary answers
are. Never memoised: failures (their count, log line and reason go through the service),
redirects to a peer cluster (one of its hosts is chosen at random), requests on a route that
requires authentication or a client certificate. The memo is not read while the service logs
every answer (DEBUG) nor when admission has no room (the full path refuses the lookup), and a
hit is counted in the service's tallies as the full path counts an answer."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from time import perf_counter
from typing import Any, NamedTuple

from aiohttp import web
from multidict import istr

from pulsar_lookup_gateway.brokers.link import BrokerLink
from pulsar_lookup_gateway.http_api.callers import LISTENER_HEADER, Callers, principal
from pulsar_lookup_gateway.http_api.errors import failure_response, json_error
from pulsar_lookup_gateway.http_api.lookup_answers import (
    connect_response,
    lookup_body,
    redirect_location,
    redirect_response,
)
from pulsar_lookup_gateway.http_api.protocols import ProtocolLookups
from pulsar_lookup_gateway.http_api.topic_paths import topic_of
from pulsar_lookup_gateway.listeners.auth import ListenerGuard
from pulsar_lookup_gateway.listeners.endpoints.client_origin import ClientOrigin
from pulsar_lookup_gateway.listeners.routing import Refusal, Route
from pulsar_lookup_gateway.lookup.errors import LookupFailure
from pulsar_lookup_gateway.lookup.protocol_data import PROTOCOL_NAME_RULE, is_protocol_name
from pulsar_lookup_gateway.lookup.resolve import LookupAnswer, ResponseKind
from pulsar_lookup_gateway.lookup.selection import ListenerChoice
from pulsar_lookup_gateway.lookup.topics import TopicDomain
from pulsar_lookup_gateway.lookup.untrusted import printable
from pulsar_lookup_gateway.serving.memo import Mark, SocketTables, place_of
from pulsar_lookup_gateway.serving.metrics import LookupTally
from pulsar_lookup_gateway.serving.service import LookupService

MAX_TARGET = 1024  # longer request targets or header values take the full path every time
_LISTENER_HEADER = istr(LISTENER_HEADER)  # (looked up in the headers without case-folding it)
#: A memoised answer: (respond, its argument, the tally it counts in, connect (not a redirect)).
Entry = tuple[Callable[[Any], web.Response], Any, LookupTally, bool]


def open_guard(guard: ListenerGuard) -> bool:
    """Whether a route with `guard` takes requests without credentials or a certificate (its
    answers do not depend on who asks)."""
    return not guard.required and guard.certificate_of is None


class _Answered(NamedTuple):
    """The full path's answer to a lookup: how to respond, and what it answered for."""

    respond: Callable[[Any], web.Response]
    argument: Any  # the body's bytes, or the redirect's location
    route: Route
    answer: LookupAnswer


class LookupRoutes:
    """The lookup routes of one socket."""

    def __init__(
        self,
        service: LookupService,
        callers: Callers,
        broker_link: BrokerLink | None,
        *,
        memoise: bool,
    ) -> None:
        self.service = service
        self.callers = callers
        self.protocols = ProtocolLookups(service, broker_link)
        # Warm lookups, not on a socket that requires authentication (every route of it does).
        # Where the route of requests that name no listener is the socket's own, its memo is
        # held here (when it needs no credentials): a hit then needs no routing decision.
        self.memo: SocketTables | None = None
        self._socket_entries: dict[Hashable, Entry] | None = None
        if memoise and not callers.guard.required:
            self.memo = SocketTables(service.memo)
            router = callers.router
            if not router.located and open_guard(router.socket_route.guard):
                self._socket_entries = self.memo.table(router.socket_route.choice)

    async def release_memo(self, _app: web.Application) -> None:
        """Give back what this socket's tables hold (the application is cleaned up)."""
        if self.memo is not None:
            self.memo.release()

    def _mark(self) -> Mark | None:
        """Where the view is now, for a full path about to start; None when the memo may not
        be read or filled now (the full path refuses the lookup, or logs each answer)."""
        service = self.service
        if not service.admission.has_room() or service.logs_each_answer:
            return None
        return service.memo.mark(service.source.view)

    async def lookup(self, request: web.Request) -> web.Response:
        """A warm lookup from the memo, else the full path (whose answer the memo keeps)."""
        memo, entries, key, mark = self.memo, None, None, None
        if memo is not None and (mark := self._mark()) is not None:
            socket_entries = self._socket_entries
            # Every warm lookup on a socket whose route is its own comes here: `_memo_key`
            # spelled out, without its length checks (what they refuse is never kept).
            if socket_entries is not None and (
                entry := socket_entries.get(
                    (request.raw_path, request.headers.get(_LISTENER_HEADER), request.secure)
                )
            ):
                return _from_memo(entry)
            if (key := _memo_key(request)) is not None:
                entries = socket_entries
        unnamed, client = self.callers.unnamed(request)
        if key is not None and entries is None and open_guard(unnamed.guard):
            assert memo is not None
            entries = memo.table(unnamed.choice)
            if entry := entries.get(key):
                return _from_memo(entry)
        answered = await self._answer(request, unnamed, client)
        if isinstance(answered, web.Response):
            return answered  # a failure
        respond, argument, route, answer = answered
        # Not memoised: a redirect to a peer cluster (a host of it chosen at random), an
        # answer for a listener that requires credentials (a role was authorized for it).
        # Nor a broker's answer (kept apart: serving.forwarded_lookups).
        if (
            entries is not None
            and answer.peer_cluster is None
            and not answer.forwarded
            and open_guard(route.guard)
        ):
            assert memo is not None and mark is not None and key is not None
            connect = answer.response is ResponseKind.CONNECT
            tally = self.service.tally_for(route.choice, "http")
            size = len(key[0]) + len(key[1] or "") + len(argument)
            topic = answer.topic
            place = place_of(
                str(topic.namespace_name),
                answer.bundle.lower,
                reads_topics=topic.domain is TopicDomain.PERSISTENT,  # (check_lookup_allowed)
            )
            entry = (respond, argument, tally, connect)
            self.service.memo.remember(mark, entries, key, entry, place, size)
        return respond(argument)

    async def _answer(
        self, request: web.Request, unnamed: Route, client: ClientOrigin | None
    ) -> _Answered | web.Response:
        """The full path of a lookup: its answer, or the response to its failure."""
        callers = self.callers
        choice: ListenerChoice | None = None
        try:
            identity = callers.identity(request, unnamed.guard)
            topic = topic_of(request, trailing=0)
            route = callers.decide(request, unnamed, client, topic, identity)
            if isinstance(route, Refusal):
                return failure_response(route.failure)
            choice = route.choice
            checked = False

            async def check_allowed() -> None:
                # As the broker's web service: after the namespace checks and authorization,
                # a persistent topic that neither exists nor may be created is 404 (checked
                # before a broker is asked too: it would take the bundle).
                nonlocal checked
                await self.service.check_lookup_allowed(topic)
                checked = True

            answer = await self.service.lookup(
                topic,
                choice,
                protocol="http",
                role=route.role,
                client=client,
                principal=principal(request, route.role),
                before_forward=check_allowed,
            )
            # (another cluster's topics are not in our store)
            if answer.peer_cluster is None and not checked:
                await check_allowed()
            if answer.response is ResponseKind.CONNECT:
                return _Answered(connect_response, lookup_body(answer.urls), route, answer)
            location = redirect_location(answer, secure=request.secure)
            return _Answered(redirect_response, location, route, answer)
        except LookupFailure as failure:
            # (the raw path: the topic may be what failed to parse)
            callers.log_failure(client, choice, request.rel_url.raw_path, failure)
            return failure_response(failure)

    async def protocol(self, request: web.Request) -> web.Response:
        """The owner's endpoints of a protocol handler for the client's listener (chosen as for
        a lookup; authenticated and authorized as a lookup); see http_api.protocols."""
        callers = self.callers
        unnamed, client = callers.unnamed(request)
        choice: ListenerChoice | None = None
        try:
            identity = callers.identity(request, unnamed.guard)
            topic = topic_of(request, trailing=2)
            protocol = request.match_info["protocol"]
            if not is_protocol_name(protocol):
                return json_error(
                    400, f"'{printable(protocol)}' is not a protocol name ({PROTOCOL_NAME_RULE})"
                )
            route = callers.decide(request, unnamed, client, topic, identity)
            if isinstance(route, Refusal):
                return failure_response(route.failure)
            choice, role = route.choice, route.role
            answer = await self.protocols.answer(
                topic, choice, protocol, role=role, principal=principal(request, role)
            )
        except LookupFailure as failure:
            callers.log_failure(client, choice, request.rel_url.raw_path, failure)
            return failure_response(failure)
        return web.json_response(answer.to_json())

    async def bundle(self, request: web.Request) -> web.Response:
        try:
            role = self.callers.role(request)
            bundle = await self.service.bundle(topic_of(request, trailing=1), role=role)
        except LookupFailure as failure:
            return failure_response(failure)
        return web.Response(text=bundle.name)


def _from_memo(entry: Entry) -> web.Response:
    """A memoised answer, counted as the full path counts one (read entries only after `_mark`
    gave a mark: it follows the view's writes)."""
    started = perf_counter()
    respond, argument, tally, connect = entry
    response = respond(argument)
    tally.answered_together(1, perf_counter() - started, connect)
    return response


def _memo_key(request: web.Request) -> tuple[str, str | None, bool] | None:
    """What a lookup's answer depends on in the request (see the module's text): its raw target
    (path and query, from which aiohttp derives both), the listener header (as the routing
    decision reads it) and TLS (a redirect's scheme); None for targets too long to keep.
    (`LookupRoutes.lookup` builds the same key for a socket's own table itself.)"""
    target = request.raw_path
    header = request.headers.get(_LISTENER_HEADER)
    if len(target) > MAX_TARGET or (header is not None and len(header) > MAX_TARGET):
        return None
    return target, header, request.secure
