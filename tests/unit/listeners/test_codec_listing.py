"""Codec additions for topic lists, schemas and auto-creation: golden bytes and round trips."""

from __future__ import annotations

from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import (
    BaseCommand,
    FeatureFlags,
    FrameDecoder,
    Schema,
)
from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import CommandGetTopicsOfNamespace


def decoded(frame: bytes) -> BaseCommand:
    decoder = FrameDecoder()
    decoder.feed(frame)
    command = decoder.next_command()
    assert isinstance(command, BaseCommand)
    return command


def test_get_topics_of_namespace_golden_bytes() -> None:
    # totalSize 29, cmdSize 25; type 32; field 32 (tag 0x82 0x02) of 20 bytes: request_id 1,
    # namespace "public/default", mode PERSISTENT (0, sent explicitly as the clients do).
    assert codec.get_topics_of_namespace("public/default", 1) == bytes.fromhex(
        "0000001d0000001908208202140801120e" + b"public/default".hex() + "1800"
    )


def test_get_topics_of_namespace_response_golden_bytes() -> None:
    frame = codec.get_topics_of_namespace_response(
        7, ["persistent://a/b/c"], filtered=True, topics_hash="0d0602ed", changed=False
    )
    assert frame == bytes.fromhex(
        "0000002d00000029"
        "0821"
        "8a0224"
        "0807"
        "1212" + b"persistent://a/b/c".hex() + "1801"
        "2208" + b"0d0602ed".hex() + "2800"
    )


def test_get_schema_golden_bytes() -> None:
    frame = codec.get_schema("persistent://a/b/c", 3, (5).to_bytes(8, "big"))
    assert frame == bytes.fromhex(
        "0000002900000025"
        "0822"
        "920220"
        "0803"
        "1212" + b"persistent://a/b/c".hex() + "1a08" + "0000000000000005"
    )


def test_get_schema_response_golden_bytes() -> None:
    schema = codec.schema("a/b/c", Schema.STRING, b"", {"k": "v"})
    frame = codec.get_schema_response(3, schema=schema, schema_version=(5).to_bytes(8, "big"))
    # Schema: name 1, schema_data 3 (empty), type 4 = STRING (1), properties 5.
    assert frame == bytes.fromhex(
        "0000002a00000026"
        "0823"
        "9a0221"
        "0803"
        "2213"
        "0a05" + b"a/b/c".hex() + "1a00"
        "2001"
        "2a060a016b120176"
        "2a08"
        "0000000000000005"
    )


def test_connected_carries_feature_flags() -> None:
    flags = FeatureFlags(supports_get_partitioned_metadata_without_auto_creation=True)
    frame = codec.connected("s", 21, None, flags)
    # CONNECTED field 4 (feature_flags) holds field 5 = true.
    assert frame == bytes.fromhex("000000110000000d08031a090a0173101522022801")
    assert decoded(frame).connected.feature_flags == flags


def test_partitioned_metadata_field_6() -> None:
    without = decoded(codec.partitioned_metadata("t", 2, metadata_auto_creation_enabled=False))
    assert without.partitionMetadata.HasField("metadata_auto_creation_enabled")
    assert not without.partitionMetadata.metadata_auto_creation_enabled
    default = decoded(codec.partitioned_metadata("t", 2))
    assert not default.partitionMetadata.HasField("metadata_auto_creation_enabled")
    assert default.partitionMetadata.metadata_auto_creation_enabled  # unset means true


def test_round_trips() -> None:
    listing = decoded(
        codec.get_topics_of_namespace(
            "t/n", 9, CommandGetTopicsOfNamespace.ALL, topics_pattern="t/n/x.*", topics_hash="h"
        )
    ).getTopicsOfNamespace
    assert (listing.mode, listing.topics_pattern, listing.topics_hash) == (
        CommandGetTopicsOfNamespace.ALL,
        "t/n/x.*",
        "h",
    )
    failed = decoded(
        codec.get_schema_response(4, error=codec.ServerError.TopicNotFound, message="no schema")
    ).getSchemaResponse
    assert (failed.request_id, failed.error_code, failed.error_message) == (
        4,
        codec.ServerError.TopicNotFound,
        "no schema",
    )
    assert not failed.HasField("schema")
    connect = decoded(
        codec.connect("c", 21, original_principal="alice", original_auth_data="jwt")
    ).connect
    assert (connect.original_principal, connect.original_auth_data) == ("alice", "jwt")
    assert not connect.HasField("original_auth_method")
