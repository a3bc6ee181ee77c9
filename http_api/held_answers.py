"""Forwarded answers over HTTP within the one byte budget (serving.held_bytes).

A schema or a topic list a broker sent is charged to the asking connection from the moment it
is read (brokers.connection) until its body is written out: the hold is switched to the body's
size once the body is made (the broker's answer is dropped then: one copy is held, not three),
and the body is written in slices, each waiting for the client to take the one before. So a
client that does not read holds one body, charged; one whose answer does not fit its own bound
(16 MiB) or the total is answered 503 with a JSON `reason` instead, and while a client sits on
a body it does not read it may be closed to make room for one that reads (longest idle first).
"""

from __future__ import annotations

import logging

from aiohttp import web

from pulsar_lookup_gateway.http_api.errors import failure_response
from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure
from pulsar_lookup_gateway.serving.held_bytes import Hold
from pulsar_lookup_gateway.serving.log_throttle import LogThrottle

__all__ = ["SLICE", "owner_of", "send_held"]

log = logging.getLogger(__package__)
_CLOSED_LOG = LogThrottle(log, logging.WARNING)
#: Bytes of a held body written at a time; the next waits until the client took them.
SLICE = 256 * 1024


def owner_of(request: web.Request) -> object:
    """What a request's held bytes are charged to: its connection."""
    return request.protocol


async def send_held(request: web.Request, hold: Hold, body: bytes) -> web.StreamResponse:
    """`body` (JSON) written to the client, charged to `hold` until it is written out; 503 if
    it cannot be held. The caller releases the hold."""
    refused = hold.keep(len(body))
    if refused is not None:
        return failure_response(
            LookupFailure(
                FailureKind.TOO_MANY_REQUESTS,
                f"the answer ({len(body)} bytes) cannot be held for this client: {refused}; "
                "retry later",
            )
        )
    response = web.StreamResponse(headers={"Content-Type": "application/json; charset=utf-8"})
    response.content_length = len(body)
    await response.prepare(request)
    budget, owner = hold.budget, hold.owner

    def close(reason: str) -> None:
        _CLOSED_LOG.event("closing HTTP connection from %s: %s", request.remote or "?", reason)
        if request.transport is not None:
            request.transport.abort()

    view = memoryview(body)
    try:
        for start in range(0, len(body), SLICE):
            # Marked again before each slice: the longest idle client is the first closed.
            budget.reading(owner)
            budget.stalled(owner, close)
            await response.write(view[start : start + SLICE])
        await response.write_eof()
    except ConnectionError:
        pass  # closed (by the client, or to make room): nothing more to write
    finally:
        budget.reading(owner)
    return response
