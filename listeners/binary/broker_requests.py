"""PARTITIONED_METADATA, GET_TOPICS_OF_NAMESPACE and GET_SCHEMA: one handler per command family.

What the metadata store knows is answered from it, with the broker's rules (lookup.topic_list,
lookup.auto_creation); what only a broker can answer (schemas, non-persistent topics, creating a
partitioned topic) is forwarded to a broker through the interface gateway/ wires in
(forwarding.BrokerForwarding), which answers with the frame for the client's request id."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from pulsar_lookup_gateway.listeners.binary.forwarding import BrokerForwarding
from pulsar_lookup_gateway.listeners.binary.replies import (
    error_failed,
    partitions_failed,
    schema_failed,
)
from pulsar_lookup_gateway.listeners.binary.requests import RequestRunner
from pulsar_lookup_gateway.listeners.binary.session import Session
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import (
    CommandGetSchema,
    CommandGetTopicsOfNamespace,
    CommandPartitionedTopicMetadata,
)
from pulsar_lookup_gateway.lookup.auto_creation import Partitions, TopicNotFound, topic_not_found
from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.serving.service import LookupService

#: Requests of one connection waiting on a broker at once; beyond, TooManyRequests at once.
#: (A broker's answer can be megabytes: what a connection has in flight is what it can make
#: the gateway hold; the reply budget bounds what it has not read.)
MAX_FORWARDED_PER_CONNECTION = 64


class _BrokerBacked:
    def __init__(self, service: LookupService, forwarding: BrokerForwarding | None) -> None:
        self._service = service
        self._forwarding = forwarding

    def _broker(self) -> BrokerForwarding:
        """Where requests only a broker can answer go; BROKER_UNAVAILABLE where the gateway
        has none."""
        if self._forwarding is None:
            raise LookupFailure(
                FailureKind.BROKER_UNAVAILABLE, "this request needs a broker; none is configured"
            )
        return self._forwarding


@contextlib.contextmanager
def _waiting_on_broker(session: Session) -> Iterator[None]:
    """Count a request of `session` waiting on a broker, within its connection's limit."""
    if session.forwarded >= MAX_FORWARDED_PER_CONNECTION:
        raise LookupFailure(
            FailureKind.TOO_MANY_REQUESTS,
            f"{MAX_FORWARDED_PER_CONNECTION} requests of this connection are waiting on the "
            "brokers; retry later",
        )
    session.forwarded += 1
    try:
        yield
    finally:
        session.forwarded -= 1


class PartitionedMetadata(_BrokerBacked):
    def handle(
        self,
        session: Session,
        body: CommandPartitionedTopicMetadata,
        runner: RequestRunner,
        out: list[bytes],
    ) -> None:
        request = self._frame(
            session, body.topic, body.metadata_auto_creation_enabled, body.request_id
        )
        runner.run(request, body.request_id, partitions_failed, out)

    async def _frame(self, session: Session, topic: str, creation: bool, request_id: int) -> bytes:
        """The count, TopicNotFound, or a broker's answer (it creates a partitioned topic; it
        knows whether a non-persistent topic exists)."""
        decision = await self._service.partition_metadata(
            topic, client_creation=creation, role=session.role
        )
        if isinstance(decision, Partitions):
            return codec.partitioned_metadata_response(request_id, decision.count)
        name = TopicName.parse(topic)
        if isinstance(decision, TopicNotFound):
            return partitions_failed(request_id, topic_not_found(name))
        with _waiting_on_broker(session):
            return await self._broker().partitioned_metadata(
                request_id,
                name.full,
                auto_creation=decision.auto_creation,
                principal=session.principal,
                owner=session,
            )


class TopicsOfNamespace(_BrokerBacked):
    def handle(
        self,
        session: Session,
        body: CommandGetTopicsOfNamespace,
        runner: RequestRunner,
        out: list[bytes],
    ) -> None:
        runner.run(self._frame(session, body), body.request_id, error_failed, out)

    async def _frame(self, session: Session, body: CommandGetTopicsOfNamespace) -> bytes:
        """The persistent topics from the metadata store; other modes (non-persistent topics
        exist only in brokers' memory) from a broker. The client's `properties` (PIP-452) are
        passed on to that broker; the persistent list ignores them, as master's default
        listing (DefaultPulsarResourcesExtended) does."""
        pattern = body.topics_pattern if body.HasField("topics_pattern") else None
        client_hash = body.topics_hash if body.HasField("topics_hash") else None
        if body.mode != CommandGetTopicsOfNamespace.PERSISTENT:
            namespace = await self._service.namespaces.access(body.namespace, role=session.role)
            with _waiting_on_broker(session):
                return await self._broker().topics_of_namespace(
                    body.request_id,
                    str(namespace),
                    body.mode,
                    topics_pattern=pattern,
                    topics_hash=client_hash,
                    properties=[(item.key, item.value) for item in body.properties],
                    principal=session.principal,
                    owner=session,
                )
        listing = await self._service.namespaces.topics_of_namespace(
            body.namespace, pattern=pattern, client_hash=client_hash, role=session.role
        )
        return codec.get_topics_of_namespace_response(
            body.request_id,
            listing.topics,
            filtered=listing.filtered,
            topics_hash=listing.topics_hash,
            changed=listing.changed,
        )


class Schemas(_BrokerBacked):
    def handle(
        self, session: Session, body: CommandGetSchema, runner: RequestRunner, out: list[bytes]
    ) -> None:
        runner.run(self._frame(session, body), body.request_id, schema_failed, out)

    async def _frame(self, session: Session, body: CommandGetSchema) -> bytes:
        """A broker's GET_SCHEMA_RESPONSE (schemas live in BookKeeper)."""
        topic = TopicName.parse(body.topic)
        if session.role is not None:
            await self._service.authorize(topic, session.role)
        version = body.schema_version if body.HasField("schema_version") else None
        with _waiting_on_broker(session):
            return await self._broker().schema(
                body.request_id, topic.full, version, principal=session.principal, owner=session
            )
