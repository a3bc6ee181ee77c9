"""The one place a lookup failure becomes an HTTP answer: a status and a JSON `{"reason": ...}`."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from aiohttp import web

from pulsar_lookup_gateway.brokers.answers import BrokerRefusal
from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure, ServerError
from pulsar_lookup_gateway.lookup.untrusted import printable

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
        # Access: no valid credentials (401, with WWW-Authenticate), a role without permission
        # (403), a listener name the socket does not allow (400: the request names it).
        FailureKind.NOT_AUTHENTICATED: 401,
        FailureKind.NOT_AUTHORIZED: 403,
        FailureKind.LISTENER_NOT_ALLOWED: 400,
        # Geo-replication, as Pulsar's web service answers: a deleted namespace or a missing
        # peer cluster is 404, a namespace the local cluster does not serve 412.
        FailureKind.NAMESPACE_DELETED: 404,
        FailureKind.PEER_CLUSTER_MISSING: 404,
        FailureKind.NOT_IN_CLUSTER: 412,
        FailureKind.OWNER_INACTIVE: 503,
        FailureKind.BUNDLE_DELETED: 503,
        # Pulsar answers 412 when a redirect target has no URL for the request's scheme.
        FailureKind.NO_TLS_REDIRECT: 412,
        # A missing topic where creation is off; a broker the gateway forwards to is not
        # reachable (or busy), retriable.
        FailureKind.TOPIC_NOT_FOUND: 404,
        FailureKind.BROKER_UNAVAILABLE: 503,
        # A protocol handler the owning broker does not run, or no endpoint of it for the
        # chosen listener: nothing to retry, the reason names what there is.
        FailureKind.PROTOCOL_NOT_ADVERTISED: 404,
        FailureKind.NO_PROTOCOL_ENDPOINT: 404,
        # A topic-list pattern (binary only; the REST list takes none).
        FailureKind.INVALID_PATTERN: 400,
    }
)
# RFC 6750 §3: a 401 names the scheme the client should use.
_CHALLENGE: Mapping[str, str] = MappingProxyType({"WWW-Authenticate": "Bearer"})
# Every 503 is worth retrying soon (RFC 9110 §10.2.3): say when, so proxies and clients that
# honour it do not retry at once nor give up.
RETRY_AFTER_SECONDS = 1
_RETRY: Mapping[str, str] = MappingProxyType({"Retry-After": str(RETRY_AFTER_SECONDS)})


def json_error(
    status: int, reason: str, *, headers: Mapping[str, str] | None = None
) -> web.Response:
    return web.json_response({"reason": reason}, status=status, headers=headers)


def failure_response(failure: LookupFailure) -> web.Response:
    status = STATUS[failure.kind]
    headers = (
        _CHALLENGE
        if failure.kind is FailureKind.NOT_AUTHENTICATED
        else _RETRY
        if status == 503
        else None
    )
    return json_error(status, failure.message, headers=headers)


# A broker's ServerError (a request the gateway forwarded) as an HTTP status, as Pulsar's web
# service answers the same conditions; anything else is 500.
BROKER_ERROR_STATUS: Mapping[int, int] = MappingProxyType(
    {
        ServerError.TopicNotFound: 404,
        ServerError.InvalidTopicName: 400,
        ServerError.AuthenticationError: 401,
        ServerError.AuthorizationError: 403,
        ServerError.NotAllowedError: 405,
        ServerError.TooManyRequests: 503,
        ServerError.ServiceNotReady: 503,
    }
)


def broker_error_response(refusal: BrokerRefusal) -> web.Response:
    """The answer to a forwarded request the broker refused (its code and message)."""
    status = BROKER_ERROR_STATUS.get(refusal.code, 500)
    return json_error(status, printable(refusal.reason), headers=_RETRY if status == 503 else None)
