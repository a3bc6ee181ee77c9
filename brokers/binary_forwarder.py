"""BinaryForwarder: the binary handlers' forwarded requests (listeners.binary.forwarding) over
the broker link; the broker's typed answer (brokers.answers) is written as the client's answer
frame, under the client's request id. The answer is charged to its connection (`owner`) in the
one byte budget from the moment it is read until its frame is handed back, which the
connection then weighs as part of its send buffer (listeners.binary.reply_budget)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from pulsar_lookup_gateway.brokers.answers import BrokerRefusal, BrokerSchema
from pulsar_lookup_gateway.brokers.link import BrokerLink
from pulsar_lookup_gateway.listeners.auth import Principal
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import (
    CommandGetTopicsOfNamespace,
    Schema,
)

__all__ = ["BinaryForwarder"]


class BinaryForwarder:
    def __init__(self, link: BrokerLink) -> None:
        self.link = link
        self.held = link.held  # the process's one byte budget

    async def partitioned_metadata(
        self,
        request_id: int,
        topic: str,
        *,
        auto_creation: bool,
        principal: Principal,
        owner: object = None,
    ) -> bytes:
        hold = self.held.hold(owner)
        try:
            answer = await self.link.partitioned_metadata(
                topic, auto_creation=auto_creation, principal=principal, hold=hold
            )
        finally:
            hold.release()  # (a few bytes: only the answer's making follows)
        if isinstance(answer, BrokerRefusal):
            return codec.partitioned_metadata_response(
                request_id, error=_error(answer), message=answer.message
            )
        return codec.partitioned_metadata_response(request_id, answer.count)

    async def topics_of_namespace(
        self,
        request_id: int,
        namespace: str,
        mode: CommandGetTopicsOfNamespace.Mode,
        *,
        topics_pattern: str | None,
        topics_hash: str | None,
        properties: Sequence[tuple[str, str]],
        principal: Principal,
        owner: object = None,
    ) -> bytes:
        hold = self.held.hold(owner)
        try:
            listing = await self.link.topics_of_namespace(
                namespace,
                mode,
                topics_pattern=topics_pattern,
                topics_hash=topics_hash,
                properties=properties,
                principal=principal,
                hold=hold,
            )
            if isinstance(listing, BrokerRefusal):
                return codec.error(request_id, _error(listing), listing.message)
            return codec.get_topics_of_namespace_response(
                request_id,
                listing.topics,
                filtered=listing.filtered,
                topics_hash=listing.topics_hash,
                changed=listing.changed,
            )
        finally:
            hold.release()  # (the frame is weighed as part of the send buffer from here)

    async def schema(
        self,
        request_id: int,
        topic: str,
        version: bytes | None,
        *,
        principal: Principal,
        owner: object = None,
    ) -> bytes:
        hold = self.held.hold(owner)
        try:
            answer = await self.link.schema(topic, version, principal=principal, hold=hold)
            if isinstance(answer, BrokerRefusal):
                return codec.get_schema_response(
                    request_id, error=_error(answer), message=answer.message
                )
            return codec.get_schema_response(
                request_id, schema=_schema(answer), schema_version=answer.version
            )
        finally:
            hold.release()


def _error(refusal: BrokerRefusal) -> codec.ServerError:
    return cast(codec.ServerError, refusal.code)


def _schema(answer: BrokerSchema) -> Schema:
    return codec.schema(
        answer.name, cast(Schema.Type, answer.type_number), answer.data, dict(answer.properties)
    )
