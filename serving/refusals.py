"""A refused lookup's count and log line, the same wherever it was refused: by the service (a
failure of the lookup itself) or by the routing decision before the service was asked (a
listener name the client may not give, a proof the connection lacks).

The count is `pulsar_broker_lookup_failures{listener, chosen_by, protocol, error}`; the line
is one INFO line per failure, throttled per (protocol, error): clients can send thousands a
second, each with a name of their choosing, so the rest are counted by the throttle. Client
text in a line is escaped and cut short."""

from __future__ import annotations

import logging
from collections.abc import Callable

from pulsar_lookup_gateway.lookup.errors import LookupFailure
from pulsar_lookup_gateway.lookup.selection import ListenerChoice
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.lookup.untrusted import printable
from pulsar_lookup_gateway.serving.log_throttle import LogThrottle
from pulsar_lookup_gateway.serving.metrics import LookupMetrics

TOPIC_IN_LOG = 200  # characters of a topic name in a log line
LISTENER_IN_LOG = 64  # characters of a listener name in a log line
DETAIL_IN_LOG = 400  # characters of a failure's message in a log line
#: Lines per 10 s about refused lookups of one kind over one protocol; the rest are counted.
REFUSALS_LOGGED = 20

#: The metric labels of a lookup answered for a choice over a protocol: (listener, chosen_by,
#: protocol).
Labels = Callable[[ListenerChoice, str], tuple[str, str, str]]


class Refusals:
    """Where refused lookups are counted (`metrics`, under `labels`) and logged (`log`: the
    service's logger, which operators read for lookups)."""

    def __init__(self, metrics: LookupMetrics, labels: Labels, log: logging.Logger) -> None:
        self._failures = metrics.failures
        self._labels = labels
        self._log = log
        # by (protocol, failure): both from fixed sets, so at most a few dozen
        self._throttles: dict[tuple[str, str], LogThrottle] = {}

    def refuse(
        self,
        protocol: str,
        client: object,
        choice: ListenerChoice,
        topic: str | TopicName | None,
        failure: LookupFailure,
    ) -> None:
        """Count and log a lookup refused for `choice` over `protocol`, asked by `client`
        (its str() is made only when a line is written)."""
        self._failures.labels(*self._labels(choice, protocol), failure.code.name).inc()
        self.log(protocol, client, choice, topic, failure)

    def log(
        self,
        protocol: str,
        client: object,
        choice: ListenerChoice | None,
        topic: str | TopicName | None,
        failure: LookupFailure,
    ) -> None:
        """The INFO line of a refused or failed lookup, once per failure (a front end calls it
        for what fails before a route is taken or the service is asked: a bad topic name,
        credentials, an answer it cannot give)."""
        if failure.logged:
            return
        failure.logged = True
        outcome = failure.code.name
        throttle = self._throttles.get((protocol, outcome))
        if throttle is None:
            throttle = LogThrottle(self._log, logging.INFO, burst=REFUSALS_LOGGED)
            self._throttles[(protocol, outcome)] = throttle
        detail = failure.message
        if failure.detail:  # (what the client was not told)
            detail = f"{detail}; {failure.detail}"
        throttle.event(*lookup_line(protocol, client, choice, topic, outcome, detail))


def lookup_line(
    protocol: str,
    client: object,
    choice: ListenerChoice | None,
    topic: str | TopicName | None,
    outcome: str,
    detail: str,
) -> tuple[str, ...]:
    """The log line of one lookup: its format and arguments, client text escaped and cut."""
    return (
        "lookup %s: protocol=%s client=%s listener=%s chosen_by=%s topic=%s (%s)",
        outcome,
        protocol,
        str(client) if client is not None else "-",
        # (a name a client gave that breaks the rule: escaped, and cut short)
        printable((choice.name if choice is not None else None) or "-", LISTENER_IN_LOG),
        choice.source.value if choice is not None else "-",
        "-"
        if topic is None
        else printable(topic if isinstance(topic, str) else topic.full, TOPIC_IN_LOG),
        printable(detail, DETAIL_IN_LOG),
    )
