"""The broker link: what only a broker can answer, asked of a live broker over the binary protocol.

Pulsar's proxy, in lookup mode, forwards some requests to a broker; the gateway does the same
for GET_TOPICS_OF_NAMESPACE of non-persistent topics (they exist only in brokers' memory),
GET_SCHEMA (schemas live in BookKeeper), and PARTITIONED_METADATA that must create a
partitioned topic (the gateway only reads the metadata store) or tell whether a non-persistent
topic exists; and a non-authoritative LOOKUP (to the load-manager leader, one Redirect followed)
when a protocol-handler client asks about a bundle nobody owns, so that a broker takes it.

BrokerLink asks, and hands back typed answers (brokers.answers); the floor's other modules
do one part each:

- settings.py: LinkSettings and the link's bounds (connections, requests in flight, timeouts).
- identity.py: who asks (the gateway's token, the client named as original principal).
- addresses.py: which broker, at which address (the internal listener), in turn.
- dispatch.py: one request to the next broker in turn, or to a named one.
- pool.py and connection.py: the pooled connections, and one connection to one broker.
- cooldown.py: a broker that failed, skipped for a while. failures.py: the link's failures.
- fan_out.py: the REST topic list's fan-out to the brokers that hold a namespace's bundles.
- binary_forwarder.py: the binary handlers' forwarded requests, answered as the client's frame.

Link failures raise LookupFailure: ``BROKER_UNAVAILABLE`` (binary ServiceNotReady, HTTP 503),
``NO_BROKER``, ``TOO_MANY_REQUESTS``. Credentials are never logged.

An answer that can be large (a schema, a topic list) is charged to the asking client's `hold`
(serving.held_bytes: the one byte budget) the moment it is read off the broker's connection;
the caller releases the hold once the answer is written out. An answer the client cannot
take is dropped there (TOO_MANY_REQUESTS): the connection is read at the broker's pace, so
one client's unread answers never hold back another's. Before asking, the hold is charged
what the same request's answer weighed last time (brokers.answer_sizes): a client the budget
cannot hold is refused at once, and puts no megabytes in front of the others' answers. While
that size is not known (a request never asked before), one client asks and the others wait,
within the request timeout, for its answer to be weighed: the first burst of strangers for a
big answer costs the broker one answer, not one per stranger.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import TypeVar

from pulsar_lookup_gateway.brokers.addresses import BrokerAddresses
from pulsar_lookup_gateway.brokers.answer_sizes import AnswerSizes
from pulsar_lookup_gateway.brokers.answers import (
    BrokerLookup,
    BrokerRefusal,
    BrokerSchema,
    PartitionCount,
    TopicList,
    lookup_of,
    partitions_of,
    schema_of,
    topics_of,
)
from pulsar_lookup_gateway.brokers.connection import AnswerNotHeld
from pulsar_lookup_gateway.brokers.dispatch import Dispatcher
from pulsar_lookup_gateway.brokers.failures import link_closed, unavailable
from pulsar_lookup_gateway.brokers.fan_out import TopicFanOut
from pulsar_lookup_gateway.brokers.identity import sent_principal
from pulsar_lookup_gateway.brokers.pool import ConnectionPool
from pulsar_lookup_gateway.brokers.settings import FORWARD_TIMEOUT, LinkSettings
from pulsar_lookup_gateway.listeners.auth import ANONYMOUS, Principal
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import BaseCommand
from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import CommandGetTopicsOfNamespace
from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure
from pulsar_lookup_gateway.serving.held_bytes import HeldBytes, Hold
from pulsar_lookup_gateway.serving.service import LookupService

T = TypeVar("T")

#: Principal and ANONYMOUS (listeners.auth) are named here too: the link's requests take them.
__all__ = [
    "ANONYMOUS",
    "FORWARD_TIMEOUT",
    "BrokerLink",
    "LinkSettings",
    "Principal",
    "required",
]


def required(link: BrokerLink | None) -> BrokerLink:
    """`link`, for a request only a broker can answer; LookupFailure(BROKER_UNAVAILABLE) where
    the gateway has none."""
    if link is None:
        raise unavailable("this request needs a broker; none is configured")
    return link


class BrokerLink:
    """Connections to the cluster's brokers, shared by every server socket of a gateway."""

    def __init__(
        self,
        service: LookupService,
        settings: LinkSettings | None = None,
        held: HeldBytes | None = None,
    ) -> None:
        """`held`: the process's one byte budget, which the front ends charge the answers
        they forward to (None: one of the link's own)."""
        self.service = service
        self.held = held if held is not None else HeldBytes()
        self._sizes = AnswerSizes()
        self.settings = settings or LinkSettings(internal_listener=service.internal_listener)
        self._pool = ConnectionPool(self.settings)
        self._addresses = BrokerAddresses(service.source, self.settings, self._pool.cooldown)
        self._dispatch = Dispatcher(self._addresses, self._pool)
        self._fan_out = TopicFanOut(service, self._addresses, self._pool)

    # -- what the front ends ask ---------------------------------------------------------------

    async def partitioned_metadata(
        self,
        topic: str,
        *,
        auto_creation: bool,
        principal: Principal = ANONYMOUS,
        hold: Hold | None = None,
    ) -> PartitionCount | BrokerRefusal:
        """The broker's partition count of `topic` (or its refusal)."""

        def build(request_id: int) -> bytes:
            return codec.partitioned_metadata(
                topic, request_id, metadata_auto_creation_enabled=auto_creation
            )

        # A broker that does not honour field 6 would create the topic it was asked about.
        answer = await self.request(
            build, principal, needs_no_creation_flag=not auto_creation, hold=hold
        )
        return partitions_of(answer)

    async def topics_of_namespace(
        self,
        namespace: str,
        mode: CommandGetTopicsOfNamespace.Mode,
        *,
        topics_pattern: str | None = None,
        topics_hash: str | None = None,
        properties: Sequence[tuple[str, str]] = (),
        principal: Principal = ANONYMOUS,
        hold: Hold | None = None,
    ) -> TopicList | BrokerRefusal:
        """The broker's topics of `namespace` in `mode` (or its refusal); `properties`: the
        client's PIP-452 context, passed on (a broker's PulsarResourcesExtended may list by
        them)."""

        def build(request_id: int) -> bytes:
            return codec.get_topics_of_namespace(
                namespace,
                request_id,
                mode,
                topics_pattern=topics_pattern,
                topics_hash=topics_hash,
                properties=properties,
            )

        key = f"topics {mode} {namespace}"
        return topics_of(await self._held(key, hold, self.request(build, principal, hold=hold)))

    async def non_persistent_topics(
        self,
        namespace: str,
        holders: Collection[str] | None,
        *,
        principal: Principal = ANONYMOUS,
        hold: Hold | None = None,
    ) -> TopicList | BrokerRefusal:
        """The non-persistent topics of `namespace` that the brokers `holders` (ids; None:
        every live broker) have loaded, joined and sorted: the REST topic list's
        (brokers.fan_out). No holder: no topic, and no broker is asked."""
        if self._pool.closed:
            raise link_closed()
        sent = sent_principal(self.settings, principal)
        return await self._held(
            f"non-persistent {namespace}",
            hold,
            self._fan_out.non_persistent_topics(namespace, holders, sent, hold),
        )

    async def schema(
        self,
        topic: str,
        version: bytes | None = None,
        *,
        principal: Principal = ANONYMOUS,
        hold: Hold | None = None,
    ) -> BrokerSchema | BrokerRefusal:
        """The schema of `topic` (its latest, or `version`), or the broker's refusal."""
        asked = self.request(
            lambda rid: codec.get_schema(topic, rid, version), principal, hold=hold
        )
        answer = await self._held(f"schema {topic} {version!r}", hold, asked)
        return schema_of(answer)

    async def lookup(
        self, topic: str, broker_id: str | None, *, principal: Principal = ANONYMOUS
    ) -> BrokerLookup | BrokerRefusal:
        """LOOKUP `topic` as a Pulsar client would: non-authoritative, at `broker_id`'s internal
        URL (the load-manager leader; None or unknown: the next broker in turn), following a
        Redirect once, so that the broker the load manager picks takes the bundle (the gateway
        itself never hands a bundle out). Returns the last answer, or the broker's refusal.
        The lookup names the internal listener where the broker advertises it, so a
        Redirect points at an address the link can reach."""
        if self._pool.closed:
            raise link_closed()
        registry = await self._addresses.registry()
        broker = registry.brokers.get(broker_id) if broker_id is not None else None
        url = self._addresses.url_of(broker) if broker is not None else None
        if url is None:
            candidates = await self._addresses.in_turn()
            if not candidates:
                raise LookupFailure(FailureKind.NO_BROKER, "No broker was available")
            url = candidates[0]
        internal = self.settings.internal_listener
        listener = internal if broker is None or internal in broker.advertised_listeners else None

        def ask(authoritative: bool) -> Callable[[int], bytes]:
            return lambda request_id: codec.lookup(topic, request_id, authoritative, listener)

        sent = sent_principal(self.settings, principal)
        first = lookup_of(await self._dispatch.to(url, ask(False), sent))
        if not isinstance(first, BrokerLookup) or first.connect:
            return first
        tls = self.settings.tls
        target = (first.broker_url_tls if tls else first.broker_url) or (
            first.broker_url if tls else first.broker_url_tls
        )
        if not target:
            return first
        return lookup_of(await self._dispatch.to(target, ask(first.authoritative), sent))

    # -- the link ------------------------------------------------------------------------------

    async def request(
        self,
        build: Callable[[int], bytes],
        principal: Principal = ANONYMOUS,
        *,
        needs_no_creation_flag: bool = False,
        hold: Hold | None = None,
    ) -> BaseCommand:
        """Send the command `build(request_id)` to a broker and return its answer (charged to
        `hold` when it is read)."""
        if self._pool.closed:
            raise link_closed()
        sent = sent_principal(self.settings, principal)
        return await self._dispatch.to_any(
            build, sent, needs_no_creation_flag=needs_no_creation_flag, hold=hold
        )

    async def _held(self, key: str, hold: Hold | None, asking: Awaitable[T]) -> T:
        """`asking` awaited with `hold` charged first what `key`'s answer weighed last time;
        TOO_MANY_REQUESTS, and nothing asked, if that cannot be held for the client. While
        that is not known, one client asks and the others wait for its answer to be weighed
        (brokers.answer_sizes): a first burst of strangers costs the broker one answer."""
        if hold is None:
            return await asking
        sizes = self._sizes
        try:
            async with sizes.turn(key, self.settings.request_timeout) as estimate:
                refused = hold.reserve(estimate) if estimate else None
                if refused is not None:
                    raise LookupFailure(
                        FailureKind.TOO_MANY_REQUESTS,
                        f"the answer (last {estimate} bytes) cannot be held for this client: "
                        f"{refused}; retry later",
                    )
                try:
                    answer = await asking
                except AnswerNotHeld as dropped:  # (weighed all the same)
                    sizes.put(key, hold.read + dropped.weighed)
                    raise
                if hold.read:
                    sizes.put(key, hold.read)
                return answer
        finally:
            if inspect.iscoroutine(asking):
                asking.close()  # (never started when refused or timed out: nothing was sent)

    async def close(self) -> None:
        self._pool.close()

    @property
    def closed(self) -> bool:
        return self._pool.closed

    @property
    def addresses(self) -> BrokerAddresses:
        """The live brokers and their internal URLs (for brokers.lookup_forwarder)."""
        return self._addresses

    @property
    def dispatch(self) -> Dispatcher:
        """Requests sent to one broker within the link's bounds (brokers.lookup_forwarder)."""
        return self._dispatch

    @property
    def connection_count(self) -> int:
        return self._pool.count

    def broker_failed(self, url: str) -> bool:
        """Whether `url` is being skipped after a failure."""
        return self._pool.cooldown.active(url)
