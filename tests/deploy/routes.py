"""The gateway's HTTP routes as docs/protocols/http.md documents them, one example path each, in
the three groups the proxy recipes (deploy/nginx, deploy/istio) treat differently: the routes
Pulsar's clients use, the ownership watch (a WebSocket), and the operations routes, which stay
inside."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

TOPIC = "persistent/public/default/t1"
#: name -> an example path (with its query) of each route a client uses.
CLIENT_ROUTES = {
    "lookup": f"/lookup/v2/topic/{TOPIC}",
    "bundle": f"/lookup/v2/topic/{TOPIC}/bundle",
    "protocol": f"/lookup/v2/topic/{TOPIC}/protocol/kafka",
    "partitions": "/admin/v2/persistent/public/default/orders/partitions",
    "topics": "/admin/v2/namespaces/public/default/topics?mode=PERSISTENT",
    "topics forwarded": "/admin/v2/namespaces/public/default/topics?mode=NON_PERSISTENT",
    "schema": "/admin/v2/schemas/public/default/s/schema",
    "schema version": "/admin/v2/schemas/public/default/s/schema/0",
}
WATCH = "/lookup/v2/watch"
OPERATIONS = (
    "/metrics",
    "/admin/v2/gateway/listeners",
    "/admin/v2/gateway/explain?topic=t1",
    "/openapi.json",
    "/health",
    "/ready",
    "/status.html",
)


def path_of(url_path: str) -> str:
    return url_path.partition("?")[0]


def istio_matches(match: dict[str, Any], path: str) -> bool:
    """Whether an Istio HTTPMatchRequest's `uri` matches `path` (a regex matches the whole
    path, as Envoy's RE2 does; these regexes mean the same in Python)."""
    uri = match["uri"]
    if "exact" in uri:
        return bool(path == uri["exact"])
    if "prefix" in uri:
        return path.startswith(uri["prefix"])
    return re.fullmatch(uri["regex"], path) is not None


def uncovered(patterns: Iterable[re.Pattern[str] | str], paths: Iterable[str]) -> list[str]:
    """The route patterns (an aiohttp route's regex or plain path) that no path of `paths`
    matches."""
    bare = [path_of(path) for path in paths]
    return [
        str(pattern)
        for pattern in patterns
        if not any(
            (pattern.fullmatch(p) if isinstance(pattern, re.Pattern) else pattern == p)
            for p in bare
        )
    ]
