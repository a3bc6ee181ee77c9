"""The HTTP face of the gateway: Pulsar's lookup REST routes and the operations routes.

One application per server socket, tagged with that socket's listener (None: a legacy port). The
Pulsar C++ and Python clients send no listener name over HTTP, so for them the socket (or a header
an ingress injects) is what picks the listener; `?listenerName=` wins over the
`X-Pulsar-ListenerName` header, which wins over the socket.

Authentication: on a socket whose listener requires it, every route but the probes
(`/health`, `/ready`, `/status.html`) needs credentials: `Authorization: Bearer <jwt>`, or the
client certificate an `https://` socket verified (its CN is the role); failures answer 401 with
`WWW-Authenticate: Bearer`. The role is authorized for the topic (403 when it may not look it
up). `listenerName` and `X-Pulsar-ListenerName` are limited to the socket's
`allowedListenerNames` (400 otherwise, without listing them). On such a socket the listener
table and `/metrics` (`authenticateMetricsEndpoint`, default true) are for `superUserRoles`
only (403 for other roles), a path or method no route has is 401 before it is 404 or 405 (as
Pulsar's web service authenticates before routing), and `/ready` gives strangers a generic
reason (the metadata store's address and chroot stay in the log).

A 307 goes to the target broker's web URL *for the chosen listener*; when the target has none
for it, the answer is 503 with `Retry-After` (never another listener's address).

Client text echoed in an answer (listener names, paths, methods) is escaped and cut by
`lookup.untrusted.printable`.

Topic routes read the topic from the *raw* request path: `%2F` inside the topic segment stays
part of that segment and is decoded exactly once, so a topic with a slash in its local name
reaches the name parser (and is refused with 400) instead of changing the route.
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Callable, Collection, Hashable, Sequence
from typing import Any
from urllib.parse import quote, urlencode

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from pulsar_lookup_gateway.brokers.answers import TOPIC_LIST_MODES, BrokerRefusal
from pulsar_lookup_gateway.brokers.link import ANONYMOUS, BrokerLink, Principal, required
from pulsar_lookup_gateway.http_api.answer_memo import (
    MAX_TARGET,
    Entry,
    HttpAnswerMemo,
    open_guard,
)
from pulsar_lookup_gateway.http_api.errors import (
    broker_error_response,
    failure_response,
    json_error,
)
from pulsar_lookup_gateway.http_api.openapi import OPENAPI
from pulsar_lookup_gateway.http_api.protocols import ProtocolLookups
from pulsar_lookup_gateway.http_api.schemas import schema_json, schema_refusal, version_bytes
from pulsar_lookup_gateway.http_api.server import client_of
from pulsar_lookup_gateway.http_api.watch import PATH as WATCH_PATH
from pulsar_lookup_gateway.http_api.watch import WatchEndpoint, WatchSettings, watches_for
from pulsar_lookup_gateway.listeners.auth import (
    AuthenticationFailed,
    Authenticator,
    Credentials,
    Identity,
    ListenerGuard,
    bearer_token,
    not_authenticated,
    verified_peer_certificate,
)
from pulsar_lookup_gateway.listeners.endpoints.client_origin import AddressSource, ClientOrigin
from pulsar_lookup_gateway.listeners.endpoints.forwarded import (
    FORWARDED,
    HEADERS,
    X_FORWARDED_FOR,
    forwarded_for,
)
from pulsar_lookup_gateway.listeners.routing import Route, Router
from pulsar_lookup_gateway.lookup.auto_creation import Partitions, TopicNotFound, topic_not_found
from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure
from pulsar_lookup_gateway.lookup.networks import NetworkTable, parse_address
from pulsar_lookup_gateway.lookup.protocol_data import PROTOCOL_NAME_RULE, is_protocol_name
from pulsar_lookup_gateway.lookup.resolve import BrokerUrls, LookupAnswer, ResponseKind
from pulsar_lookup_gateway.lookup.selection import (
    ChoiceSource,
    ListenerChoice,
)
from pulsar_lookup_gateway.lookup.service_urls import service_hosts
from pulsar_lookup_gateway.lookup.topics import TopicName, is_system_service_namespace
from pulsar_lookup_gateway.lookup.untrusted import printable
from pulsar_lookup_gateway.serving.service import LookupService

LISTENER_HEADER = "X-Pulsar-ListenerName"
AUTH_METHOD_HEADER = "X-Pulsar-Auth-Method-Name"  # Pulsar's: names the provider to use
# Route segments: anything but a separator (aiohttp's default also refuses '{' and '}').
_SEGMENT = r"[^/]+"
_TOPIC_PATH = (
    f"{{domain:{_SEGMENT}}}/{{tenant:{_SEGMENT}}}/{{namespace:{_SEGMENT}}}/{{topic:{_SEGMENT}}}"
)
_NAMESPACE_TOPICS = f"/admin/v2/namespaces/{{tenant:{_SEGMENT}}}/{{namespace:{_SEGMENT}}}/topics"
_SCHEMA_PATH = (
    f"/admin/v2/schemas/{{tenant:{_SEGMENT}}}/{{namespace:{_SEGMENT}}}/{{topic:{_SEGMENT}}}/schema"
)
_MODES = TOPIC_LIST_MODES

# Pure functions of their arguments, cached: parsing the path and encoding LookupData are a good
# part of a lookup's cost. Bounded, so arbitrary paths cannot grow them.
# Parsed topic paths, by count and by length: a client chooses the paths (up to aiohttp's 8 KiB
# request line), so only paths up to CACHED_PATH_LENGTH are kept, about 25 MiB at most.
TOPIC_CACHE_SIZE = 16_384
CACHED_PATH_LENGTH = 512
BODY_CACHE_SIZE = 4_096
#: The application's memo of warm lookup answers, where it has one (for tests and operators).
ANSWER_MEMO = web.AppKey("answer_memo", HttpAnswerMemo)


def build_app(
    service: LookupService,
    *,
    listener: str | None,
    listener_table: list[dict[str, object]],
    authenticator: Authenticator | None = None,
    super_users: Collection[str] = (),
    trusted_proxies: NetworkTable[bool] | None = None,
    forwarded_headers: Sequence[str] = HEADERS,
    broker_link: BrokerLink | None = None,
    authenticate_metrics: bool = True,
    watch_settings: WatchSettings | None = None,
    memoise_lookups: bool = True,
) -> web.Application:
    """The application for one socket; `listener` is the listener that socket is tagged with.
    `authenticator`: who must authenticate, and how (None: nobody, any listener name);
    `super_users`: the roles that may read the listener table where authentication is on;
    `trusted_proxies`: peers whose X-Forwarded-For / Forwarded headers are believed;
    `forwarded_headers`: which of the two, in order of preference (trustedForwardedHeaders);
    `authenticate_metrics`: authenticateMetricsEndpoint; `watch_settings`: the watch* keys
    (the ownership watch of `service`'s process, shared by its sockets, is made with them);
    `memoise_lookups`: warm lookups are answered from the socket's memo (http_api.answer_memo)."""
    routes = _Routes(
        service, listener, listener_table, authenticator or Authenticator(), super_users
    )
    routes.use_memo(memoise_lookups)
    routes.trusted_proxies = trusted_proxies or NetworkTable()
    routes.forwarded_headers = tuple(forwarded_headers)
    routes.broker_link = broker_link  # None: requests only a broker can answer fail (503)
    routes.authenticate_metrics = authenticate_metrics
    routes.protocols = ProtocolLookups(service, broker_link)
    routes.watches = WatchEndpoint(watches_for(service, watch_settings))
    # No middleware: aiohttp adds a layer of its own to every request once there is one, and a
    # lookup is cheap enough for that to show. Topic routes answer their failures themselves
    # (mapped in http_api.errors); anything else ends in the catch-all route below.
    app = web.Application(client_max_size=64 * 1024)
    if routes.memo is not None:
        app[ANSWER_MEMO] = routes.memo
    app.add_routes(
        [
            web.get(f"/lookup/v2/topic/{_TOPIC_PATH}", routes.lookup),
            web.get(f"/lookup/v2/topic/{_TOPIC_PATH}/bundle", routes.bundle),
            web.get(
                f"/lookup/v2/topic/{_TOPIC_PATH}/protocol/{{protocol:{_SEGMENT}}}",
                routes.protocol,
            ),
            web.get(f"/admin/v2/{_TOPIC_PATH}/partitions", routes.partitions),
            web.get(_NAMESPACE_TOPICS, routes.namespace_topics),
            web.get(_SCHEMA_PATH, routes.schema),
            web.get(_SCHEMA_PATH + f"/{{version:{_SEGMENT}}}", routes.schema),
            web.get(WATCH_PATH, routes.watch),
            web.get("/admin/v2/gateway/listeners", routes.listeners),
            web.get("/status.html", routes.status_page),
            web.get("/health", routes.health),
            web.get("/ready", routes.ready),
            web.get("/metrics", routes.metrics),
            web.get("/openapi.json", routes.openapi),
        ]
    )
    # Matched only when no route above has the path: 404, or 405 when one has it for another
    # method; both as JSON like every other error.
    # ([\s\S], not '.': a decoded path may hold a newline.)
    routes.catch_all = app.router.add_route("*", r"/{path:[\s\S]*}", routes.no_route).resource
    app.on_shutdown.append(routes.watches.close_all)
    app.on_cleanup.append(routes.watches.cleanup)
    return app


class _Routes:
    def __init__(
        self,
        service: LookupService,
        listener: str | None,
        listener_table: list[dict[str, object]],
        authenticator: Authenticator,
        super_users: Collection[str],
    ) -> None:
        self.service = service
        self.listener = listener
        self.listener_table = listener_table
        self.guard = authenticator.for_listener(listener)
        self.super_users = frozenset(super_users)
        self.router = Router(service, self.guard)  # the listener of each request
        self.trusted_proxies: NetworkTable[bool] = NetworkTable()
        self.forwarded_headers: tuple[str, ...] = HEADERS
        self.broker_link: BrokerLink | None = None
        self.protocols = ProtocolLookups(service, None)
        self.watches: WatchEndpoint | None = None
        self.catch_all: web.AbstractResource | None = None
        self.authenticate_metrics = True
        self.memo: HttpAnswerMemo | None = None
        self._socket_entries: dict[Hashable, Entry] | None = None

    def use_memo(self, memoise: bool) -> None:
        """Memoise warm lookups (not on a socket that requires authentication: every route of
        it does). Where the route of requests that name no listener is the socket's own, its
        memo is held here (when it needs no credentials): a hit then needs no routing
        decision."""
        self.memo = self._socket_entries = None
        if not memoise or self.guard.required:
            return
        self.memo = HttpAnswerMemo(self.service)
        route = self.router.socket_route
        if not self.router.located and open_guard(route.guard):
            self._socket_entries = self.memo.entries_for(route.choice)

    # -- Pulsar's REST routes -----------------------------------------------------------------

    async def lookup(self, request: web.Request) -> web.Response:
        memo, entries, key = self.memo, None, None
        mark = memo.mark() if memo is not None else None
        if mark is not None and (key := _memo_key(request)) is not None:
            entries = self._socket_entries
            if entries is not None:
                assert memo is not None
                if (hit := memo.answer(entries, key)) is not None:
                    return hit
        unnamed, client = self._route(request)
        if key is not None and entries is None and open_guard(unnamed.guard):
            assert memo is not None
            entries = memo.entries_for(unnamed.choice)
            if (hit := memo.answer(entries, key)) is not None:
                return hit
        choice: ListenerChoice | None = None
        try:
            role = self._role(request, unnamed.guard)
            topic = _topic(request, trailing=0)
            route = self._choose(request, unnamed, client, topic)
            choice = route.choice
            if route.guard is not unnamed.guard:  # the named listener requires authentication
                role = self._role(request, route.guard)
            answer = await self.service.lookup(
                topic, choice, protocol="http", role=role, client=client
            )
            if answer.peer_cluster is None:  # (another cluster's topics are not in our store)
                # As the broker's web service: after the namespace checks and authorization,
                # a persistent topic that neither exists nor may be created is 404.
                await self.service.check_lookup_allowed(topic)
            connect = answer.response is ResponseKind.CONNECT
            respond: Callable[[Any], web.Response]
            argument: Any  # the body's bytes, or the redirect's location
            if connect:
                respond, argument = _connect_response, _lookup_body(answer.urls)
            else:
                respond, argument = (
                    _redirect_response,
                    redirect_location(answer, secure=request.secure),
                )
        except LookupFailure as failure:
            # (the raw path: the topic may be what failed to parse)
            self.service.log_refused("http", client, choice, request.rel_url.raw_path, failure)
            return failure_response(failure)
        # Not memoised: a redirect to a peer cluster (a host of it chosen at random), an
        # answer for a listener that requires credentials (a role was authorized for it).
        if entries is not None and answer.peer_cluster is None and open_guard(route.guard):
            assert memo is not None and mark is not None and key is not None
            tally = self.service.tally_for(choice, "http")
            size = len(key[0]) + len(key[1] or "") + len(argument)
            memo.remember(mark, entries, key, size, (respond, argument, tally, connect))
        return respond(argument)

    async def protocol(self, request: web.Request) -> web.Response:
        """The owner's endpoints of a protocol handler for the client's listener (chosen as for
        a lookup; authenticated and authorized as a lookup); see http_api.protocols."""
        unnamed, client = self._route(request)
        choice: ListenerChoice | None = None
        try:
            role = self._role(request, unnamed.guard)
            topic = _topic(request, trailing=2)
            protocol = request.match_info["protocol"]
            if not is_protocol_name(protocol):
                return json_error(
                    400, f"'{printable(protocol)}' is not a protocol name ({PROTOCOL_NAME_RULE})"
                )
            route = self._choose(request, unnamed, client, topic)
            choice = route.choice
            if route.guard is not unnamed.guard:  # the named listener requires authentication
                role = self._role(request, route.guard)
            answer = await self.protocols.answer(
                topic, choice, protocol, role=role, principal=_principal(request, role)
            )
        except LookupFailure as failure:
            self.service.log_refused("http", client, choice, request.rel_url.raw_path, failure)
            return failure_response(failure)
        return web.json_response(answer.to_json())

    async def watch(self, request: web.Request) -> web.StreamResponse:
        """The ownership watch (http_api.watch): its upgrade request is routed and
        authenticated as a lookup, once for the stream."""
        unnamed, client = self._route(request)
        try:
            identity = self._identity(request, unnamed.guard)
            route = self._choose(request, unnamed, client, None)
            if route.guard is not unnamed.guard:  # the named listener requires authentication
                identity = self._identity(request, route.guard)
        except LookupFailure as failure:
            self.service.log_refused("http", client, None, None, failure)
            return failure_response(failure)
        assert self.watches is not None
        return await self.watches.serve(request, route, identity, client)

    async def bundle(self, request: web.Request) -> web.Response:
        try:
            role = self._role(request)
            bundle = await self.service.bundle(_topic(request, trailing=1), role=role)
        except LookupFailure as failure:
            return failure_response(failure)
        return web.Response(text=bundle.name)

    async def partitions(self, request: web.Request) -> web.Response:
        """The broker's rules (lookup.auto_creation): `checkAllowAutoCreation=true` lets a
        missing topic be created where the cluster allows it (a partitioned one by a broker);
        without it a missing topic is 404."""
        try:
            role = self._role(request)
            topic = _topic(request, trailing=1)
            creation = request.query.get("checkAllowAutoCreation", "").lower() == "true"
            decision = await self.service.partition_metadata(
                topic, client_creation=creation, role=role
            )
            if isinstance(decision, Partitions):
                return web.json_response({"partitions": decision.count})
            if isinstance(decision, TopicNotFound):
                raise topic_not_found(topic)
            answer = await self._link().partitioned_metadata(
                topic.full,
                auto_creation=decision.auto_creation,
                principal=_principal(request, role),
            )
        except LookupFailure as failure:
            return failure_response(failure)
        if isinstance(answer, BrokerRefusal):
            return broker_error_response(answer)
        return web.json_response({"partitions": answer.count})

    async def namespace_topics(self, request: web.Request) -> web.Response:
        """`GET /admin/v2/namespaces/{tenant}/{namespace}/topics?mode=&includeSystemTopic=`, as
        Namespaces.getTopics: 404 for a missing namespace in every mode; the persistent topics
        (PERSISTENT, ALL) from the metadata store; the non-persistent ones (NON_PERSISTENT,
        ALL) from the brokers that own the namespace's bundles, as NamespacesBase.
        internalGetNonPersistentTopics asks each bundle's owner (an unowned bundle has none);
        system topics only with includeSystemTopic=true."""
        mode_name = request.query.get("mode", "PERSISTENT").upper()
        system = request.query.get("includeSystemTopic", "").lower() == "true"
        try:
            role = self._role(request)  # (first: a stranger learns nothing of the parameters)
            if mode_name not in _MODES:
                return json_error(400, f"mode must be one of {', '.join(_MODES)}")
            namespace = f"{request.match_info['tenant']}/{request.match_info['namespace']}"
            # BrokerService.isSystemTopic: every topic of a system service namespace
            brokers = mode_name != "PERSISTENT" and (
                system or not is_system_service_namespace(namespace)
            )
            read = await self.service.rest_topics(
                namespace,
                role=role,
                system=system,
                persistent=mode_name != "NON_PERSISTENT",
                holders=brokers,
            )
            if not brokers:
                return web.json_response(list(read.persistent))
            answer = await self._link().non_persistent_topics(
                str(read.namespace), read.holders, principal=_principal(request, role)
            )
        except LookupFailure as failure:
            return failure_response(failure)
        if isinstance(answer, BrokerRefusal):
            return broker_error_response(answer)
        return web.json_response([*read.persistent, *answer.topics])

    async def schema(self, request: web.Request) -> web.Response:
        """`GET /admin/v2/schemas/{tenant}/{namespace}/{topic}/schema[/{version}]`, asked of
        a broker over the binary protocol and shown as the broker's REST answer."""
        try:
            role = self._role(request)  # (first: a stranger learns nothing of the parameters)
            version = request.match_info.get("version")
            raw = version_bytes(version) if version is not None else None
        except ValueError as exc:
            return json_error(400, printable(str(exc)))
        except LookupFailure as failure:
            return failure_response(failure)
        try:
            topic = _schema_topic(request)
            if role is not None:
                await self.service.authorize(topic, role)
            answer = await self._link().schema(topic.full, raw, principal=_principal(request, role))
        except LookupFailure as failure:
            return failure_response(failure)
        if isinstance(answer, BrokerRefusal):
            return broker_error_response(schema_refusal(answer))
        return web.json_response(schema_json(answer))

    def _link(self) -> BrokerLink:
        return required(self.broker_link)

    def _client(self, request: web.Request) -> tuple[ClientOrigin | None, str | None]:
        """Where the client is (its connection's origin, or what the believed forwarded header
        of a trusted proxy says), and the TLS server name it dialled."""
        origin, server_name = client_of(request)
        trusted, believed = self.trusted_proxies, self.forwarded_headers
        if origin is None or not trusted or not believed:
            return origin, server_name
        if not trusted.holds(parse_address(origin.address)):
            return origin, server_name
        headers = request.headers
        forwarded = headers.getall(FORWARDED, ())
        x_forwarded_for = headers.getall(X_FORWARDED_FOR, ())
        if forwarded or x_forwarded_for:
            address = forwarded_for(forwarded, x_forwarded_for, trusted, believed)
            if address is not None:
                return origin.via(AddressSource.FORWARDED, str(address), None), server_name
        return origin, server_name

    def _route(self, request: web.Request) -> tuple[Route, ClientOrigin | None]:
        """The route of a request that names no listener (by the socket's routing decision:
        the client's place or TLS server name, else the socket's listener), and its client."""
        client, server_name = self._client(request)
        return self.router.route(client, server_name), client

    def _choose(
        self,
        request: web.Request,
        unnamed: Route,
        client: ClientOrigin | None,
        topic: TopicName | None,
    ) -> Route:
        """The route of a lookup of `topic` (None: of a watch stream's topics): to the listener
        the request names (listenerName, then X-Pulsar-ListenerName) if it may, else `unnamed`
        (Router.decide)."""
        explicit = request.query.get("listenerName") if request.query_string else None
        header = request.headers.get(LISTENER_HEADER)
        if not explicit and not header:  # (the common case: clients name none)
            return unnamed
        if topic is None:
            route = self.router.named(unnamed, explicit, header)
            refused = self.router.refusal(route)
            if refused is not None:
                self.service.refuse("http", client, route.choice, None, refused)
                raise refused
            return route
        return self.router.decide(
            unnamed, explicit, header, protocol="http", client=client, topic=topic
        )

    def _role(self, request: web.Request, guard: ListenerGuard | None = None) -> str | None:
        """The role the request authenticates as under `guard` (by default the guard of its
        route); None where the guard requires no authentication. Raises
        LookupFailure(NOT_AUTHENTICATED)."""
        identity = self._identity(request, guard)
        return identity.role if identity is not None else None

    def _identity(
        self, request: web.Request, guard: ListenerGuard | None = None
    ) -> Identity | None:
        """`_role`'s identity (its token's expiry too)."""
        if guard is None:
            guard = self._route(request)[0].guard
        if not guard.required and guard.certificate_of is None:
            return None  # (the common case: a trusted network)
        transport = request.transport
        ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
        if guard.certificate_missing(ssl_object):
            raise not_authenticated(
                f"listener '{guard.certificate_of}' requires a client certificate presented to "
                "its own TLS socket or server name"
            )
        if not guard.required:
            return None
        credentials = Credentials(
            method=request.headers.get(AUTH_METHOD_HEADER) or None,
            data=bearer_token(request.headers.get("Authorization")),
            peer_certificate=verified_peer_certificate(ssl_object),
        )
        try:
            return guard.authenticate(credentials)
        except AuthenticationFailed as failed:
            raise not_authenticated(failed.reason) from None

    def _authenticated(self, request: web.Request) -> web.Response | None:
        """None if the request may use an operations route, else the 401 answer."""
        try:
            self._role(request)
        except LookupFailure as failure:
            return failure_response(failure)
        return None

    # -- operations ---------------------------------------------------------------------------

    async def status_page(self, request: web.Request) -> web.Response:
        return web.Response(text="OK")

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "alive"})

    async def ready(self, request: web.Request) -> web.Response:
        status = self.service.source.status()
        if self.guard.required:
            # The probe is open to anyone, and the source's reason names the ZooKeeper hosts
            # and chroot; the source logs that detail itself.
            reason = "" if status.ready else "metadata store not ready"
        else:
            reason = status.reason if status.ready else (status.reason or "metadata not ready")
        return web.json_response(
            {"ready": status.ready, "stale": status.stale, "reason": reason},
            status=200 if status.ready else 503,
        )

    async def metrics(self, request: web.Request) -> web.Response:
        if self.authenticate_metrics and (refused := self._super_user(request, "/metrics")):
            return refused
        metrics = self.service.metrics
        if metrics.multiprocess:  # run --workers N: every worker's samples, from their files
            metrics.refresh()  # this worker's gauges as of now (the others': their last second)
            registry = _shared_registry()
        else:
            registry = metrics.registry
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def listeners(self, request: web.Request) -> web.Response:
        # Every socket's address, listener and settings: a map of the network, for operators.
        if (refused := self._super_user(request, "the listener table")) is not None:
            return refused
        return web.json_response(self.listener_table)

    def _super_user(self, request: web.Request, what: str) -> web.Response | None:
        """None if the request may read an operators' route (on a socket that requires
        authentication: a role of superUserRoles), else its 401 or 403."""
        try:
            role = self._role(request)
        except LookupFailure as failure:
            return failure_response(failure)
        if role is not None and role not in self.super_users:
            return json_error(403, f"{what} is for super-users (superUserRoles)")
        return None

    async def openapi(self, request: web.Request) -> web.Response:
        if (refused := self._authenticated(request)) is not None:
            return refused
        return web.json_response(OPENAPI)

    async def no_route(self, request: web.Request) -> web.Response:
        # As Pulsar's web service: credentials are checked before routing, so a stranger
        # cannot tell which paths and methods exist (a 405 would confirm a route).
        if (refused := self._authenticated(request)) is not None:
            return refused
        allowed: set[str] = set()
        for resource in request.app.router.resources():
            if resource is not self.catch_all:
                _, methods = await resource.resolve(request)
                allowed |= methods
        if allowed:
            allow = ",".join(sorted(allowed))
            return json_error(405, "Method Not Allowed", headers={"Allow": allow})
        return json_error(404, f"no route {printable(request.method)} {printable(request.path)}")


@functools.cache
def _shared_registry() -> CollectorRegistry:
    """Multiprocess mode: a registry that merges the files of every process in
    PROMETHEUS_MULTIPROC_DIR at each collection (the dead workers' counts included)."""
    registry = CollectorRegistry()
    MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    return registry


def _topic(request: web.Request, *, trailing: int) -> TopicName:
    raw_path = request.rel_url.raw_path
    if len(raw_path) > CACHED_PATH_LENGTH:  # parsed each time: the cache stays small in bytes
        return _parse_topic_path(raw_path, trailing)
    return _topic_of_path(raw_path, trailing)


@functools.lru_cache(maxsize=TOPIC_CACHE_SIZE)
def _topic_of_path(raw_path: str, trailing: int) -> TopicName:
    return _parse_topic_path(raw_path, trailing)


def _parse_topic_path(raw_path: str, trailing: int) -> TopicName:
    """The topic named by the four raw path segments that end `trailing` segments from the end.

    The router matched on a path where `%2F` is not a separator, so the raw segments line up with
    the route's. Pure, so cached per path (invalid names are not cached: they raise).
    """
    segments = raw_path.split("/")
    end = len(segments) - trailing
    domain, tenant, namespace, local = segments[end - 4 : end]
    return TopicName.from_rest(domain, tenant, namespace, local)


def _schema_topic(request: web.Request) -> TopicName:
    """The topic of a schema route (`/admin/v2/schemas/<tenant>/<ns>/<topic>/schema...`, raw
    segments decoded once, as topic routes are); schemas are of persistent topics."""
    segments = request.rel_url.raw_path.split("/")
    tenant, namespace, local = segments[4:7]
    return TopicName.from_rest("persistent", tenant, namespace, local)


def _principal(request: web.Request, role: str | None) -> Principal:
    """Who a forwarded request is made for: the authenticated role, and its token (sent to the
    broker only with forwardAuthorizationCredentials)."""
    if role is None:
        return ANONYMOUS
    token = bearer_token(request.headers.get("Authorization"))
    if token is None:
        return Principal(role)
    return Principal(role, "token", token.decode("ascii", errors="replace"))


def lookup_data(urls: BrokerUrls) -> dict[str, str]:
    """Pulsar's LookupData: all six keys, always strings (the C++ client needs the keys)."""
    broker_url = urls.service_url or ""
    return {
        "brokerUrl": broker_url,
        "brokerUrlTls": urls.service_url_tls or "",
        "httpUrl": urls.http_url or "",
        "httpUrlTls": urls.http_url_tls or "",
        "nativeUrl": broker_url,
        "brokerUrlSsl": "",
    }


def _memo_key(request: web.Request) -> tuple[str, str | None, bool] | None:
    """What a lookup's answer depends on in the request (http_api.answer_memo): its raw target
    (path and query, from which aiohttp derives both), the listener header (as `_choose`
    reads it) and TLS (a redirect's scheme); None for targets too long to keep."""
    target = request.raw_path
    header = request.headers.get(LISTENER_HEADER)
    if len(target) > MAX_TARGET or (header is not None and len(header) > MAX_TARGET):
        return None
    return target, header, request.secure


# The two answers of a lookup, made by the full path and by the memo alike (byte for byte).
# (aiohttp copies ready headers faster than it builds the Content-Type; a dict copies fastest.)
_JSON_HEADERS = {"Content-Type": "application/json; charset=utf-8"}  # never changed


def _connect_response(body: bytes) -> web.Response:
    return web.Response(body=body, headers=_JSON_HEADERS)


def _redirect_response(location: str) -> web.Response:
    return web.Response(status=307, headers={"Location": location})


@functools.lru_cache(maxsize=BODY_CACHE_SIZE)
def _lookup_body(urls: BrokerUrls) -> bytes:
    # A cluster has few distinct answers (brokers x listeners): encode each once.
    return json.dumps(lookup_data(urls)).encode()


def redirect_location(answer: LookupAnswer, *, secure: bool) -> str:
    """Where a 307 sends the client: the target's lookup route, with `authoritative` and the
    chosen listener in the query (headers do not survive a redirect). A request that came over
    TLS goes to the target's https URL only: when the target has none but a plain one, the
    lookup fails as NO_TLS_REDIRECT (412, as Pulsar answers), never downgrading the client to
    http://. A plain request goes to the http URL, else to the https one.

    `answer.urls` are the chosen listener's only; when the target has no web URL for it, the
    lookup fails as NO_BROKER (503, retriable: the target, or the listener's web URLs, may
    change), naming neither the target nor its other addresses."""
    urls = answer.urls
    base = urls.http_url_tls if secure else (urls.http_url or urls.http_url_tls)
    if secure and not base and urls.http_url:
        listener = answer.listener.name or "internal"
        raise LookupFailure(
            FailureKind.NO_TLS_REDIRECT,
            f"the broker for this lookup has no https URL on listener '{printable(listener)}'; "
            "an https lookup is not redirected to http",
        )
    if not base:
        listener = answer.listener.name or "internal"
        raise LookupFailure(
            FailureKind.NO_BROKER,
            f"no broker can take this lookup over HTTP on listener '{printable(listener)}' "
            "now; retry later",
        )
    if answer.peer_cluster is not None:
        # A cluster's serviceUrl may list several hosts: one of them, chosen at random as
        # PulsarWebResource.getRedirectionUrl's PulsarServiceNameResolver chooses it.
        base = random.choice(service_hosts(base))
    topic = answer.topic
    path = (
        f"/lookup/v2/topic/{topic.domain.value}/{quote(topic.tenant, safe='')}/"
        f"{quote(topic.namespace, safe='')}/{quote(topic.local_name, safe='')}"
    )
    query = {"authoritative": "true" if answer.authoritative else "false"}
    if answer.listener.source is not ChoiceSource.INTERNAL and answer.listener.name:
        query["listenerName"] = answer.listener.name
    return f"{base.rstrip('/')}{path}?{urlencode(query)}"
