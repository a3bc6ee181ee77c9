"""The request handlers of one binary socket, one per command family, shared by its
connections."""

from __future__ import annotations

from dataclasses import dataclass

from pulsar_lookup_gateway.listeners.binary.broker_requests import (
    PartitionedMetadata,
    Schemas,
    TopicsOfNamespace,
)
from pulsar_lookup_gateway.listeners.binary.handshake import Handshake
from pulsar_lookup_gateway.listeners.binary.lookups import Lookups
from pulsar_lookup_gateway.listeners.protocol.codec import BaseCommand

# The requests a connected client may send (the other commands are refused or handled as
# connection control).
CLIENT_REQUESTS = frozenset(
    {
        BaseCommand.LOOKUP,
        BaseCommand.PARTITIONED_METADATA,
        BaseCommand.GET_TOPICS_OF_NAMESPACE,
        BaseCommand.GET_SCHEMA,
    }
)


@dataclass(frozen=True, slots=True)
class Handlers:
    """The request handlers of one socket, shared by its connections."""

    handshake: Handshake
    lookups: Lookups
    partitions: PartitionedMetadata
    topics: TopicsOfNamespace
    schemas: Schemas
    requests: frozenset[int] = CLIENT_REQUESTS
