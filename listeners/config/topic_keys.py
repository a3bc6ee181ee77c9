"""The keys of what a lookup answers beyond a topic's owner: topic auto-creation, topic-list
patterns, and the protocol handlers' listeners (lookup.protocol_listeners)."""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, field_validator

from pulsar_lookup_gateway.listeners.config.key_group import KeyGroup
from pulsar_lookup_gateway.lookup.auto_creation import TopicType
from pulsar_lookup_gateway.lookup.protocol_listeners import (
    GRPC,
    KAFKA,
    MQTT,
    parse_kafka_protocol_map,
    parse_listener_map,
)
from pulsar_lookup_gateway.lookup.topic_list import DEFAULT_PATTERN_MAX_LENGTH

#: A protocol handler's `<listener>:<handler name>` pairs; None: the key is unset.
ListenerMap = tuple[tuple[str, str], ...] | None


def _listener_map(protocol: str, value: Any) -> Any:
    """A protocol's `<listener>:<handler name>,...` (blank: unset)."""
    if not isinstance(value, str):
        return value
    return parse_listener_map(protocol, value) if value.strip() else None


class TopicKeys(KeyGroup):
    # Topic auto-creation (Pulsar's broker keys): what PARTITIONED_METADATA answers for a topic
    # that does not exist; a namespace policy's autoTopicCreationOverride wins over them.
    allow_auto_topic_creation: bool = True
    allow_auto_topic_creation_type: TopicType = TopicType.NON_PARTITIONED
    default_num_partitions: int = Field(1, ge=1)
    # Topic listing: patterns longer than this are answered unfiltered (the client filters).
    subscription_pattern_max_length: int = Field(DEFAULT_PATTERN_MAX_LENGTH, ge=0)
    enable_broker_side_subscription_pattern_evaluation: bool = True


class ProtocolHandlerKeys(KeyGroup):
    # Protocol handlers' endpoints per listener (lookup.protocol_listeners): each protocol's
    # `<listener>:<handler name>,...` (None: unset, the unambiguous guess), and KoP's own
    # kafkaProtocolMap for the security protocol of its named listeners.
    kafka_listener_map: Annotated[ListenerMap, BeforeValidator(partial(_listener_map, KAFKA))] = (
        None
    )
    mqtt_listener_map: Annotated[ListenerMap, BeforeValidator(partial(_listener_map, MQTT))] = None
    grpc_listener_map: Annotated[ListenerMap, BeforeValidator(partial(_listener_map, GRPC))] = None
    kafka_protocol_map: tuple[tuple[str, str], ...] = ()

    @field_validator("kafka_protocol_map", mode="before")
    @classmethod
    def _kafka_protocol_map(cls, value: Any) -> Any:
        return parse_kafka_protocol_map(value) if isinstance(value, str) else value
