"""The operators' routes: the probes (`/status.html`, `/health`, `/ready`: open to anyone),
`/metrics`, the listener table, the OpenAPI document, and the answer to a path or method no
route has.

On a socket whose listener requires authentication, the listener table is for
`superUserRoles` only (403 for other roles), `/metrics` (`authenticateMetricsEndpoint`, default
true) for any authenticated role (as Pulsar's proxy: Prometheus gets a role with no rights), a
path or method no route has is 401 before it is 404 or 405 (as Pulsar's web service
authenticates before routing), and `/ready` gives strangers a generic reason (the metadata
store's address and chroot stay in the log)."""

from __future__ import annotations

import functools

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from pulsar_lookup_gateway.http_api.callers import Callers
from pulsar_lookup_gateway.http_api.errors import json_error
from pulsar_lookup_gateway.http_api.openapi import OPENAPI
from pulsar_lookup_gateway.http_api.settings import HttpSettings
from pulsar_lookup_gateway.lookup.untrusted import printable
from pulsar_lookup_gateway.serving.service import LookupService


class OperationsRoutes:
    """The operations routes of one socket."""

    def __init__(self, service: LookupService, callers: Callers, settings: HttpSettings) -> None:
        self.service = service
        self.callers = callers
        self.listener_table = settings.listener_table
        self.authenticate_metrics = settings.authenticate_metrics
        self.accepting = settings.accepting

    async def status_page(self, request: web.Request) -> web.Response:
        return web.Response(text="OK")

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "alive"})

    async def ready(self, request: web.Request) -> web.Response:
        # Ready: the metadata is loaded and every socket of the process accepts (a binary
        # socket listed after this one may still be making its answers ahead).
        status = self.service.source.status()
        if self.callers.guard.required:
            # The probe is open to anyone, and the source's reason names the ZooKeeper hosts
            # and chroot; the source logs that detail itself.
            reason = "" if status.ready else "metadata store not ready"
        else:
            reason = status.reason if status.ready else (status.reason or "metadata not ready")
        ready = status.ready
        if ready and not self.accepting():
            ready, reason = False, "not every socket accepts"
        return web.json_response(
            {"ready": ready, "stale": status.stale, "reason": reason},
            status=200 if ready else 503,
        )

    async def metrics(self, request: web.Request) -> web.Response:
        if self.authenticate_metrics and (refused := self.callers.authenticated(request)):
            return refused  # (any role: the series name no client and hold no secret)
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
        if (refused := self.callers.super_user(request, "the listener table")) is not None:
            return refused
        return web.json_response(list(self.listener_table()))

    async def openapi(self, request: web.Request) -> web.Response:
        if (refused := self.callers.authenticated(request)) is not None:
            return refused
        return web.json_response(OPENAPI)

    async def no_route(self, request: web.Request) -> web.Response:
        # As Pulsar's web service: credentials are checked before routing, so a stranger
        # cannot tell which paths and methods exist (a 405 would confirm a route).
        if (refused := self.callers.authenticated(request)) is not None:
            return refused
        allowed: set[str] = set()
        catch_all = request.match_info.route.resource  # (this route's: it matches anything)
        for resource in request.app.router.resources():
            if resource is not catch_all:
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
