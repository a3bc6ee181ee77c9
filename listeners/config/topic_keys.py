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
    """Whether a topic that does not exist may be created when a client asks for it (a
    namespace's `autoTopicCreationOverride` wins); false: such topics are not found."""
    allow_auto_topic_creation_type: TopicType = TopicType.NON_PARTITIONED
    """What auto-creation creates: `non-partitioned` or `partitioned` (a broker creates it)."""
    default_num_partitions: int = Field(1, ge=1)
    """The partitions of an auto-created partitioned topic."""
    subscription_pattern_max_length: int = Field(DEFAULT_PATTERN_MAX_LENGTH, ge=0)
    """Topic-list patterns longer than this are answered unfiltered (the client filters)."""
    enable_broker_side_subscription_pattern_evaluation: bool = True
    """Filter topic lists by the client's pattern; false: never filter."""


class ProtocolHandlerKeys(KeyGroup):
    # Protocol handlers' endpoints per listener (lookup.protocol_listeners): each protocol's
    # `<listener>:<handler name>,...` (None: unset, the unambiguous guess), and KoP's own
    # kafkaProtocolMap for the security protocol of its named listeners.
    kafka_listener_map: Annotated[ListenerMap, BeforeValidator(partial(_listener_map, KAFKA))] = (
        None
    )
    """Which listener gets which Kafka-on-Pulsar endpoint: `<listener>:<handler name>,...` (a
    listener may get several names and a name go to several listeners); set, only what it maps
    is given out; unset: the unambiguous guess (see Protocol handlers)."""
    mqtt_listener_map: Annotated[ListenerMap, BeforeValidator(partial(_listener_map, MQTT))] = None
    """As `kafkaListenerMap`, for the MQTT handler's endpoints."""
    grpc_listener_map: Annotated[ListenerMap, BeforeValidator(partial(_listener_map, GRPC))] = None
    """As `kafkaListenerMap`, for the gRPC handler's endpoints."""
    kafka_protocol_map: tuple[tuple[str, str], ...] = ()
    """Kafka-on-Pulsar's own key (`kafka_internal:PLAINTEXT,kafka_external:SASL_SSL`): the
    security protocol of each KoP listener name, shown with its endpoints."""

    @field_validator("kafka_protocol_map", mode="before")
    @classmethod
    def _kafka_protocol_map(cls, value: Any) -> Any:
        return parse_kafka_protocol_map(value) if isinstance(value, str) else value
