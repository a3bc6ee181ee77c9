"""`GET /admin/v2/gateway/explain?topic=T[&socket=S][&clientAddress=A][&serverName=N]
[&header=H][&listenerName=L]`: why a client with these facts gets the answer it gets on one of
the gateway's sockets (listeners.explain), for super-users as the listener table is.

The socket's Router is made as the socket's own is (the guard of its listener, from the one
authenticator); its decision and the lookup core's resolve give the answer."""

from __future__ import annotations

from aiohttp import web

from pulsar_lookup_gateway.http_api.callers import Callers
from pulsar_lookup_gateway.http_api.errors import json_error
from pulsar_lookup_gateway.http_api.settings import HttpSettings
from pulsar_lookup_gateway.listeners.explain import (
    ClientFacts,
    SocketFacts,
    explain,
    find_socket,
)
from pulsar_lookup_gateway.listeners.routing import Router
from pulsar_lookup_gateway.lookup.networks import parse_address
from pulsar_lookup_gateway.lookup.untrusted import printable
from pulsar_lookup_gateway.serving.service import LookupService

PATH = "/admin/v2/gateway/explain"
#: The longest value a parameter may have (a topic name, a host name, an address).
MAX_VALUE = 1024
PARAMETERS = ("topic", "socket", "clientAddress", "serverName", "header", "listenerName")


class ExplainRoute:
    def __init__(self, service: LookupService, callers: Callers, settings: HttpSettings) -> None:
        self.service = service
        self.callers = callers
        self.settings = settings

    def sockets(self) -> list[SocketFacts]:
        return [
            SocketFacts(
                f"{row['scheme']}://{row['address']}",
                str(row["scheme"]),
                str(row["listener"]) if row.get("listener") else None,
                str(row.get("origin", "")),
            )
            for row in self.settings.listener_table()
        ]

    async def explain(self, request: web.Request) -> web.Response:
        if (refused := self.callers.super_user(request, "explain")) is not None:
            return refused
        query = {name: request.query.get(name) or None for name in PARAMETERS}
        too_long = [name for name, value in query.items() if value and len(value) > MAX_VALUE]
        if too_long:
            return json_error(400, f"{too_long[0]}: at most {MAX_VALUE} characters")
        topic = query["topic"]
        if topic is None:
            return json_error(400, "topic: required (a topic name)")
        address = query["clientAddress"]
        if address is not None and parse_address(address) is None:
            return json_error(400, f"clientAddress: '{printable(address)}' is not an IP address")
        try:
            socket = find_socket(self.sockets(), query["socket"])
        except ValueError as exc:
            return json_error(400, printable(str(exc), MAX_VALUE))
        guard = self.settings.authenticator.for_listener(socket.listener)
        router = Router.of_service(self.service, guard)  # as the socket's own is made
        client = ClientFacts(address, query["serverName"], query["header"], query["listenerName"])
        return web.json_response(await explain(self.service, router, socket, topic, client))
