"""What a broker answers to a request forwarded over the broker link, as plain values: the front
ends (binary and HTTP) show these in their own protocol and never read broker protobuf."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pulsar_lookup_gateway.listeners.protocol.codec import BaseCommand
from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import (
    CommandGetTopicsOfNamespace,
    Schema,
)

__all__ = [
    "TOPIC_LIST_MODES",
    "BrokerLookup",
    "BrokerRefusal",
    "BrokerSchema",
    "PartitionCount",
    "TopicList",
    "lookup_of",
    "partitions_of",
    "schema_of",
    "topics_of",
]


@dataclass(frozen=True, slots=True)
class BrokerRefusal:
    """The broker refused the request: its ServerError code (Pulsar's number) and message."""

    code: int
    message: str

    @property
    def reason(self) -> str:
        return self.message or f"the broker refused the request (error {self.code})"


@dataclass(frozen=True, slots=True)
class PartitionCount:
    count: int  # 0: not partitioned


@dataclass(frozen=True, slots=True)
class TopicList:
    topics: tuple[str, ...]
    filtered: bool = False
    topics_hash: str | None = None
    changed: bool = True


@dataclass(frozen=True, slots=True)
class BrokerSchema:
    name: str
    type_number: int  # Pulsar's Schema.Type
    data: bytes
    version: bytes  # the broker's 8-byte schema version
    properties: Mapping[str, str] = field(default_factory=dict)

    @property
    def type_name(self) -> str:
        return Schema.Type.Name(self.type_number)


@dataclass(frozen=True, slots=True)
class BrokerLookup:
    """A LOOKUP_RESPONSE that did not fail: Connect (the broker serves the topic) or Redirect."""

    connect: bool
    broker_url: str | None
    broker_url_tls: str | None
    authoritative: bool


#: The topic-list modes a request names (Pulsar's names) and the broker link asks for.
TOPIC_LIST_MODES: Mapping[str, CommandGetTopicsOfNamespace.Mode] = {
    "PERSISTENT": CommandGetTopicsOfNamespace.PERSISTENT,
    "NON_PERSISTENT": CommandGetTopicsOfNamespace.NON_PERSISTENT,
    "ALL": CommandGetTopicsOfNamespace.ALL,
}
_UNKNOWN_ERROR = 0  # Pulsar's ServerError.UnknownError


def _refusal(answer: BaseCommand) -> BrokerRefusal:
    if answer.type == BaseCommand.ERROR:
        return BrokerRefusal(answer.error.error, answer.error.message)
    name = BaseCommand.Type.Name(answer.type)
    return BrokerRefusal(_UNKNOWN_ERROR, f"the broker answered {name}")


def partitions_of(answer: BaseCommand) -> PartitionCount | BrokerRefusal:
    if answer.type != BaseCommand.PARTITIONED_METADATA_RESPONSE:
        return _refusal(answer)
    body = answer.partitionMetadataResponse
    if body.HasField("error") or body.response == body.Failed:
        return BrokerRefusal(body.error, body.message)
    return PartitionCount(body.partitions)


def topics_of(answer: BaseCommand) -> TopicList | BrokerRefusal:
    if answer.type != BaseCommand.GET_TOPICS_OF_NAMESPACE_RESPONSE:
        return _refusal(answer)
    body = answer.getTopicsOfNamespaceResponse
    return TopicList(
        tuple(body.topics),
        filtered=body.filtered,
        topics_hash=body.topics_hash if body.HasField("topics_hash") else None,
        changed=body.changed,
    )


def schema_of(answer: BaseCommand) -> BrokerSchema | BrokerRefusal:
    if answer.type != BaseCommand.GET_SCHEMA_RESPONSE:
        return _refusal(answer)
    body = answer.getSchemaResponse
    if body.HasField("error_code"):
        return BrokerRefusal(body.error_code, body.error_message)
    schema = body.schema
    return BrokerSchema(
        name=schema.name,
        type_number=schema.type,
        data=schema.schema_data,
        version=body.schema_version,
        properties={item.key: item.value for item in schema.properties},
    )


def lookup_of(answer: BaseCommand) -> BrokerLookup | BrokerRefusal:
    if answer.type != BaseCommand.LOOKUP_RESPONSE:
        return _refusal(answer)
    body = answer.lookupTopicResponse
    if not body.HasField("response") or body.response == body.Failed:
        return BrokerRefusal(body.error, body.message)
    return BrokerLookup(
        connect=body.response == body.Connect,
        broker_url=body.brokerServiceUrl if body.HasField("brokerServiceUrl") else None,
        broker_url_tls=body.brokerServiceUrlTls if body.HasField("brokerServiceUrlTls") else None,
        authoritative=body.authoritative,
    )
