"""Protocol-handler lookups over HTTP: where a Kafka, MQTT or gRPC client finds a topic.

`GET /lookup/v2/topic/{domain}/{tenant}/{ns}/{topic}/protocol/{protocol}` answers with the
owning broker's endpoints of that protocol handler for the client's listener (chosen as for a
Pulsar lookup); the rules are in lookup.protocol_data.

A bundle nobody owns has no broker to send a protocol client to, and a protocol client cannot
follow a Pulsar redirect. So the gateway does what a Pulsar client's lookup does: it sends a
non-authoritative LOOKUP for the topic to the load-manager leader over the broker link
(following one Redirect), so that the broker the load manager picks takes the bundle, then
waits (bounded, `OWNERSHIP_WAIT`) for the ownership node to reach its watched view and answers
from it. Concurrent requests for one bundle share one LOOKUP. When the broker refuses, or the
node does not show up in time, the answer is 503 with Retry-After.
"""

from __future__ import annotations

import asyncio

from pulsar_lookup_gateway.brokers.answers import BrokerLookup
from pulsar_lookup_gateway.brokers.link import BrokerLink
from pulsar_lookup_gateway.listeners.auth import ANONYMOUS, Principal
from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure
from pulsar_lookup_gateway.lookup.protocol_data import ProtocolAnswer
from pulsar_lookup_gateway.lookup.selection import ListenerChoice
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.lookup.untrusted import printable
from pulsar_lookup_gateway.serving.service import LookupService

OWNERSHIP_WAIT = 2.0  # seconds a request waits for a bundle it had a broker take
VIEW_POLL = 0.02  # seconds between looks at the view while waiting


class ProtocolLookups:
    """The protocol route's logic, shared by the route of every socket of a gateway."""

    def __init__(
        self,
        service: LookupService,
        link: BrokerLink | None,
        *,
        wait: float = OWNERSHIP_WAIT,
    ) -> None:
        self.service = service
        self.link = link  # None: an unowned bundle answers 503
        self.wait = wait
        self._takeovers: dict[tuple[str, str], asyncio.Future[None]] = {}

    async def answer(
        self,
        topic: TopicName,
        choice: ListenerChoice,
        protocol: str,
        *,
        role: str | None = None,
        principal: Principal = ANONYMOUS,
    ) -> ProtocolAnswer:
        service = self.service
        answer = await service.protocol_lookup(topic, choice, protocol, role=role)
        # As for a lookup: a persistent topic that neither exists nor may be created is 404
        # (checked once the client may know, and before any broker is asked to take it).
        await service.check_lookup_allowed(topic)
        if answer.owned:
            return answer
        await self._take(answer, principal)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait
        seen = -1
        while True:
            if service.source.view.version != seen:
                answer = await service.protocol_lookup(topic, choice, protocol, role=role)
                if answer.owned:
                    return answer
                seen = service.source.view.version
            if loop.time() >= deadline:
                raise LookupFailure(
                    FailureKind.BROKER_UNAVAILABLE,
                    f"bundle {topic.namespace_name}/{answer.bundle.name} has no owner yet (a "
                    f"broker was asked to take it {self.wait:g}s ago); retry",
                )
            await asyncio.sleep(VIEW_POLL)

    async def _take(self, answer: ProtocolAnswer, principal: Principal) -> None:
        """Have a broker take the bundle of `answer` (one LOOKUP per bundle at a time)."""
        link = self.link
        if link is None:
            raise LookupFailure(
                FailureKind.BROKER_UNAVAILABLE,
                f"bundle {answer.topic.namespace_name}/{answer.bundle.name} has no owner, and "
                "no broker link is configured to have one take it; retry",
            )
        key = (str(answer.topic.namespace_name), answer.bundle.name)
        task = self._takeovers.get(key)
        if task is None:
            task = asyncio.ensure_future(_ask(link, answer, principal))
            self._takeovers[key] = task
            task.add_done_callback(lambda done: self._taken(key, done))
        await asyncio.shield(task)

    def _taken(self, key: tuple[str, str], task: asyncio.Future[None]) -> None:
        self._takeovers.pop(key, None)
        if not task.cancelled():
            task.exception()  # retrieved here too: every waiter may have gone away


async def _ask(link: BrokerLink, answer: ProtocolAnswer, principal: Principal) -> None:
    reply = await link.lookup(answer.topic.full, answer.broker_id, principal=principal)
    if isinstance(reply, BrokerLookup):
        if reply.connect:
            return
        why = "it was redirected twice"
    else:
        why = reply.message or f"error {reply.code}"
    raise LookupFailure(
        FailureKind.BROKER_UNAVAILABLE,
        f"no broker took bundle {answer.topic.namespace_name}/{answer.bundle.name}: "
        f"{printable(why)}; retry",
    )
