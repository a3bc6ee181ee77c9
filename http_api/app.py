"""The HTTP face of the gateway: one aiohttp application per server socket, tagged with that
socket's listener (None: a legacy port), built complete from the socket's settings
(http_api.settings) out of the route families:

- lookup (http_api.lookup_routes): Pulsar's lookup REST routes, the bundle and protocol routes;
- admin (http_api.admin_routes): partitioned metadata, a namespace's topics, schemas;
- operations (http_api.operations): probes, metrics, the listener table, OpenAPI, no route;
- watch (http_api.watch): the ownership watch over a WebSocket;
- explain (http_api.explain_route): why a client gets its answer, for super-users.

Who asks, and the route a request takes, are decided for all of them by the socket's
`Callers` (http_api.callers). The Pulsar C++ and Python clients send no listener name over
HTTP, so for them the socket (or a header an ingress injects) is what picks the listener.

Authentication: on a socket whose listener requires it, every route but the probes
(`/health`, `/ready`, `/status.html`) needs credentials: `Authorization: Bearer <jwt>`, or the
client certificate an `https://` socket verified (its CN is the role); failures answer 401 with
`WWW-Authenticate: Bearer`. `listenerName` and `X-Pulsar-ListenerName` are limited to the
socket's `allowedListenerNames` (400 otherwise, without listing them).

Client text echoed in an answer (listener names, paths, methods) is escaped and cut by
`lookup.untrusted.printable`.
"""

from __future__ import annotations

from aiohttp import web

from pulsar_lookup_gateway.brokers.link import BrokerLink
from pulsar_lookup_gateway.http_api.admin_routes import AdminRoutes
from pulsar_lookup_gateway.http_api.callers import Callers
from pulsar_lookup_gateway.http_api.explain_route import PATH as EXPLAIN_PATH
from pulsar_lookup_gateway.http_api.explain_route import ExplainRoute
from pulsar_lookup_gateway.http_api.lookup_routes import LookupRoutes
from pulsar_lookup_gateway.http_api.operations import OperationsRoutes
from pulsar_lookup_gateway.http_api.settings import HttpSettings
from pulsar_lookup_gateway.http_api.topic_paths import (
    NAMESPACE_TOPICS,
    SCHEMA_PATH,
    SEGMENT,
    TOPIC_PATH,
)
from pulsar_lookup_gateway.http_api.watch import PATH as WATCH_PATH
from pulsar_lookup_gateway.http_api.watch import WatchEndpoint, watches_for
from pulsar_lookup_gateway.serving.memo import SocketTables
from pulsar_lookup_gateway.serving.service import LookupService

#: The application's memo of warm lookup answers, where it has one (for tests and operators).
ANSWER_MEMO = web.AppKey("answer_memo", SocketTables)


def build_app(
    service: LookupService,
    settings: HttpSettings,
    *,
    broker_link: BrokerLink | None = None,
) -> web.Application:
    """The application of one socket, answering for `service`. `broker_link`: where requests
    only a broker can answer go (None: they fail with 503)."""
    callers = Callers(service, settings)
    lookups = LookupRoutes(service, callers, broker_link, memoise=settings.memoise_lookups)
    admin = AdminRoutes(service, callers, broker_link)
    operations = OperationsRoutes(service, callers, settings)
    held = broker_link.held if broker_link is not None else None  # (the one byte budget)
    watch = WatchEndpoint(watches_for(service, settings.watch, held), callers)
    explainer = ExplainRoute(service, callers, settings)
    # No middleware: aiohttp adds a layer of its own to every request once there is one, and a
    # lookup is cheap enough for that to show. Topic routes answer their failures themselves
    # (mapped in http_api.errors); anything else ends in the catch-all route below.
    app = web.Application(client_max_size=64 * 1024)
    if lookups.memo is not None:
        app[ANSWER_MEMO] = lookups.memo
    app.add_routes(
        [
            web.get(f"/lookup/v2/topic/{TOPIC_PATH}", lookups.lookup),
            web.get(f"/lookup/v2/topic/{TOPIC_PATH}/bundle", lookups.bundle),
            web.get(
                f"/lookup/v2/topic/{TOPIC_PATH}/protocol/{{protocol:{SEGMENT}}}",
                lookups.protocol,
            ),
            web.get(f"/admin/v2/{TOPIC_PATH}/partitions", admin.partitions),
            web.get(NAMESPACE_TOPICS, admin.namespace_topics),
            web.get(SCHEMA_PATH, admin.schema),
            web.get(SCHEMA_PATH + f"/{{version:{SEGMENT}}}", admin.schema),
            web.get(WATCH_PATH, watch.route),
            web.get("/admin/v2/gateway/listeners", operations.listeners),
            web.get(EXPLAIN_PATH, explainer.explain),
            web.get("/status.html", operations.status_page),
            web.get("/health", operations.health),
            web.get("/ready", operations.ready),
            web.get("/metrics", operations.metrics),
            web.get("/openapi.json", operations.openapi),
            # Matched only when no route above has the path: 404, or 405 when one has it for
            # another method; both as JSON like every other error.
            # ([\s\S], not '.': a decoded path may hold a newline.)
            web.route("*", r"/{path:[\s\S]*}", operations.no_route),
        ]
    )
    app.on_shutdown.append(watch.close_all)
    app.on_cleanup.append(watch.cleanup)
    app.on_cleanup.append(lookups.release_memo)
    return app
