"""The one place a lookup failure becomes an HTTP answer: a status and a JSON `{"reason": ...}`."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from aiohttp import web

from lookup.errors import FailureKind, LookupFailure

# PIP-95: an unknown listener is the client's mistake (400), not the broker's (stable Pulsar
# answers 500 by accident). Retriable conditions are 503, so clients and proxies retry them.
STATUS: Mapping[FailureKind, int] = MappingProxyType(
    {
        FailureKind.INVALID_TOPIC: 400,
        FailureKind.LISTENER_NOT_FOUND: 400,
        FailureKind.NAMESPACE_NOT_FOUND: 404,
        FailureKind.NO_BROKER: 503,
        FailureKind.TOO_MANY_REQUESTS: 503,
        FailureKind.METADATA_UNAVAILABLE: 503,
        FailureKind.BUNDLE_UNLOADING: 503,
        FailureKind.METADATA_MALFORMED: 500,
    }
)


def json_error(
    status: int, reason: str, *, headers: Mapping[str, str] | None = None
) -> web.Response:
    return web.json_response({"reason": reason}, status=status, headers=headers)


def failure_response(failure: LookupFailure) -> web.Response:
    return json_error(STATUS[failure.kind], failure.message)
