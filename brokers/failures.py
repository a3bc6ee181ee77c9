"""The link's failures, as the one error vocabulary (LookupFailure) names them: the message is
for the client and never names a broker's (internal) address; the detail, naming it, is for
the log (brokers.cooldown writes it, once per broker and cooldown: a broker that is down fails
every request sent its way)."""

from __future__ import annotations

from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure

__all__ = ["cooling_down", "link_closed", "lost", "too_many_waiting", "unavailable"]


def unavailable(message: str, detail: str | None = None) -> LookupFailure:
    """A broker could not answer (binary ServiceNotReady, HTTP 503)."""
    return LookupFailure(FailureKind.BROKER_UNAVAILABLE, message, detail)


def lost(url: str, reason: str) -> LookupFailure:
    return unavailable("the connection to the broker was lost; retry", f"{url}: {reason}")


def cooling_down() -> LookupFailure:
    """A list that needs a broker in its failure cooldown (the log named it when it failed)."""
    return unavailable("a broker that owns bundles of the namespace failed recently; retry later")


def link_closed() -> LookupFailure:
    return unavailable("the broker link is closed")


def too_many_waiting() -> LookupFailure:
    """A broker has max_in_flight_per_broker requests waiting: refused at once (no queue)."""
    return LookupFailure(
        FailureKind.TOO_MANY_REQUESTS, "Too many requests waiting on the brokers; retry later"
    )
