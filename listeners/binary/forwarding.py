"""What the binary handlers ask of a broker, as an interface: listeners/ never imports the
broker link (it stands on a floor above); gateway/ wires one in (brokers.binary_forwarder).

Each request is answered with the finished answer frame under the client's request id, the
broker's refusal included, so the handlers relay it as they would their own answer and need no
type of the broker link's; a link failure raises LookupFailure (the handler's failure frame).
`owner`: the connection's session, which the answer is charged to in the one byte budget
(serving.held_bytes) until its frame is handed back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pulsar_lookup_gateway.listeners.auth import Principal
from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import CommandGetTopicsOfNamespace

__all__ = ["BrokerForwarding"]


class BrokerForwarding(Protocol):
    async def partitioned_metadata(
        self,
        request_id: int,
        topic: str,
        *,
        auto_creation: bool,
        principal: Principal,
        owner: object = None,
    ) -> bytes:
        """PARTITIONED_METADATA_RESPONSE: the broker's partition count of `topic` (or its
        refusal); it may create the partitioned topic where `auto_creation` allows."""
        ...

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
        """GET_TOPICS_OF_NAMESPACE_RESPONSE (or ERROR): the broker's topics of `namespace`
        in `mode`."""
        ...

    async def schema(
        self,
        request_id: int,
        topic: str,
        version: bytes | None,
        *,
        principal: Principal,
        owner: object = None,
    ) -> bytes:
        """GET_SCHEMA_RESPONSE: the schema of `topic` (its latest, or `version`), or the
        broker's refusal."""
        ...
