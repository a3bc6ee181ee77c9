"""Who an HTTP request comes from, for every route family of one socket: where its client is
(its connection, or a trusted proxy's forwarded header), the identity its credentials prove
under a route's guard, and the route it takes (decided by the socket's Router from what the
request says: listeners.routing)."""

from __future__ import annotations

import functools

from aiohttp import web

from pulsar_lookup_gateway.http_api.errors import failure_response, json_error
from pulsar_lookup_gateway.http_api.server import client_of
from pulsar_lookup_gateway.http_api.settings import HttpSettings
from pulsar_lookup_gateway.listeners.auth import (
    ANONYMOUS,
    AuthenticationFailed,
    Credentials,
    Identity,
    ListenerGuard,
    Principal,
    bearer_token,
    not_authenticated,
    verified_peer_certificate,
)
from pulsar_lookup_gateway.listeners.endpoints.client_origin import AddressSource, ClientOrigin
from pulsar_lookup_gateway.listeners.endpoints.forwarded import (
    FORWARDED,
    X_FORWARDED_FOR,
    forwarded_for,
)
from pulsar_lookup_gateway.listeners.routing import NO_PROOF, Facts, Proof, Refusal, Route, Router
from pulsar_lookup_gateway.lookup.errors import LookupFailure
from pulsar_lookup_gateway.lookup.networks import parse_address
from pulsar_lookup_gateway.lookup.selection import ListenerChoice
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.serving.service import LookupService

LISTENER_HEADER = "X-Pulsar-ListenerName"
AUTH_METHOD_HEADER = "X-Pulsar-Auth-Method-Name"  # Pulsar's: names the provider to use


class Callers:
    """The callers of one socket's routes (its guard, its routing decision, its proxies)."""

    def __init__(self, service: LookupService, settings: HttpSettings) -> None:
        self.guard = settings.authenticator.for_listener(settings.listener)
        self.router = Router.of_service(service, self.guard)  # the listener of each request
        self.super_users = settings.super_users
        self._trusted = settings.trusted_proxies
        self._believed = settings.forwarded_headers
        self._refusals = service.refusals

    def client(self, request: web.Request) -> tuple[ClientOrigin | None, str | None]:
        """Where the client is (its connection's origin, or what the believed forwarded header
        of a trusted proxy says), and the TLS server name it dialled."""
        origin, server_name = client_of(request)
        trusted, believed = self._trusted, self._believed
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

    def unnamed(self, request: web.Request) -> tuple[Route, ClientOrigin | None]:
        """The route of a request that names no listener (by the socket's routing decision:
        the client's place or TLS server name, else the socket's listener), and its client."""
        client, server_name = self.client(request)
        return self.router.route(client, server_name), client

    def decide(
        self,
        request: web.Request,
        unnamed: Route,
        client: ClientOrigin | None,
        topic: TopicName | None,
        identity: Identity | None,
    ) -> Route | Refusal:
        """The route of a lookup of `topic` (None: of a watch stream's topics) by a request
        whose unnamed route is `unnamed`, and that proved `identity` under it: the listener the
        request names (listenerName, then X-Pulsar-ListenerName), if it may take it with the
        credentials it presents, else `unnamed` (Router.decide)."""
        explicit = request.query.get("listenerName") if request.query_string else None
        header = request.headers.get(LISTENER_HEADER)
        if explicit or header:  # (credentials are read again only for a named listener)
            proof = Proof(identity, presented=functools.partial(_presented, request))
        else:
            proof = Proof(identity) if identity is not None else NO_PROOF
        facts = Facts(unnamed, "http", client, explicit, header, topic, proof)
        return self.router.decide(facts)

    def log_failure(
        self,
        client: ClientOrigin | None,
        choice: ListenerChoice | None,
        topic: str | None,
        failure: LookupFailure,
    ) -> None:
        """The INFO line of a lookup that failed in the HTTP shell (credentials, a topic name,
        an answer it cannot give), unless it was logged already (by the routing decision or
        the service)."""
        self._refusals.log("http", client, choice, topic, failure)

    def role(self, request: web.Request, guard: ListenerGuard | None = None) -> str | None:
        """The role the request authenticates as under `guard` (by default the guard of its
        route); None where the guard requires no authentication. Raises
        LookupFailure(NOT_AUTHENTICATED)."""
        identity = self.identity(request, guard)
        return identity.role if identity is not None else None

    def identity(self, request: web.Request, guard: ListenerGuard | None = None) -> Identity | None:
        """`role`'s identity (its token's expiry too)."""
        if guard is None:
            guard = self.unnamed(request)[0].guard
        if not guard.required and guard.certificate_of is None:
            return None  # (the common case: a trusted network)
        ssl_object = _ssl_object(request)
        if guard.certificate_missing(ssl_object):
            raise not_authenticated(
                f"listener '{guard.certificate_of}' requires a client certificate presented to "
                "its own TLS socket or server name"
            )
        if not guard.required:
            return None
        try:
            return guard.authenticate(_credentials(request, ssl_object))
        except AuthenticationFailed as failed:
            raise not_authenticated(failed.reason) from None

    def authenticated(self, request: web.Request) -> web.Response | None:
        """None if the request may use an operations route, else the 401 answer."""
        try:
            self.role(request)
        except LookupFailure as failure:
            return failure_response(failure)
        return None

    def super_user(self, request: web.Request, what: str) -> web.Response | None:
        """None if the request may read an operators' route (on a socket that requires
        authentication: a role of superUserRoles), else its 401 or 403."""
        try:
            role = self.role(request)
        except LookupFailure as failure:
            return failure_response(failure)
        if role is not None and role not in self.super_users:
            return json_error(403, f"{what} is for super-users (superUserRoles)")
        return None


def _ssl_object(request: web.Request) -> object:
    transport = request.transport
    return transport.get_extra_info("ssl_object") if transport is not None else None


def _presented(request: web.Request) -> tuple[object, Credentials]:
    """The request's TLS session and credentials (for a named listener that demands more)."""
    ssl_object = _ssl_object(request)
    return ssl_object, _credentials(request, ssl_object)


def _credentials(request: web.Request, ssl_object: object) -> Credentials:
    """What the request presents: a Bearer token, the method it names, and the client
    certificate its TLS session verified."""
    return Credentials(
        method=request.headers.get(AUTH_METHOD_HEADER) or None,
        data=bearer_token(request.headers.get("Authorization")),
        peer_certificate=verified_peer_certificate(ssl_object),
    )


def principal(request: web.Request, role: str | None) -> Principal:
    """Who a forwarded request is made for: the authenticated role, and its token (sent to the
    broker only with forwardAuthorizationCredentials)."""
    if role is None:
        return ANONYMOUS
    token = bearer_token(request.headers.get("Authorization"))
    if token is None:
        return Principal(role)
    return Principal(role, "token", token.decode("ascii", errors="replace"))
