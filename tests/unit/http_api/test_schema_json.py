"""The broker's binary schema answer as its REST GetSchemaResponse."""

from __future__ import annotations

import json
import struct

import pytest

from pulsar_lookup_gateway.brokers.answers import BrokerSchema, schema_of
from pulsar_lookup_gateway.http_api.schemas import schema_body, schema_json, version_bytes
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import BaseCommand, Schema

AVRO = '{"type":"record","name":"R","fields":[]}'


def answer(schema: Schema, version: int = 3) -> BrokerSchema:
    """The schema as the broker link reads it from a broker's GET_SCHEMA_RESPONSE."""
    command = BaseCommand(type=BaseCommand.GET_SCHEMA_RESPONSE)
    command.getSchemaResponse.request_id = 1
    command.getSchemaResponse.schema.CopyFrom(schema)
    command.getSchemaResponse.schema_version = version.to_bytes(8, "big")
    read = schema_of(command)
    assert isinstance(read, BrokerSchema)
    return read


def test_a_schema_as_rest_json() -> None:
    body = schema_json(answer(codec.schema("t/n/x", Schema.AVRO, AVRO.encode(), {"a": "b"}), 7))
    assert body == {
        "version": 7,
        "type": "AVRO",
        "timestamp": 0,
        "data": AVRO,
        "properties": {"a": "b"},
    }
    assert list(body) == ["version", "type", "timestamp", "data", "properties"]


def test_key_value_data_is_shown_as_the_broker_shows_it() -> None:
    key = b""  # a primitive (STRING) key has no schema definition
    value = AVRO.encode()
    raw = struct.pack(">i", len(key)) + key + struct.pack(">i", len(value)) + value
    body = schema_json(answer(codec.schema("t/n/x", Schema.KEY_VALUE, raw, {})))
    assert body["type"] == "KEY_VALUE"
    assert json.loads(body["data"]) == {"key": "", "value": json.loads(AVRO)}


@pytest.mark.parametrize(("text", "raw"), [("0", bytes(8)), ("5", (5).to_bytes(8, "big"))])
def test_version_bytes(text: str, raw: bytes) -> None:
    assert version_bytes(text) == raw


@pytest.mark.parametrize("text", ["x", "", "1.5", "9" * 21, "99999999999999999999"])
def test_bad_versions(text: str) -> None:
    with pytest.raises(ValueError):
        version_bytes(text)


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (b"x" * 100_000, Schema.STRING),  # plain ASCII: written as it is
        (AVRO.encode(), Schema.AVRO),  # quotes
        (b'{\n\t"doc": "a \\\\ b\\r"\n}', Schema.JSON),  # newline, tab, return, backslash
        (b"\x01\x7f\x0c\x08 rare controls", Schema.PROTOBUF),  # json.dumps asked
        ("caf\u00e9 \u2603".encode(), Schema.STRING),  # not ASCII: json.dumps asked
        (b"\xff\xfe not UTF-8", Schema.PROTOBUF),
        (b"", Schema.NONE),
    ],
)
def test_the_body_is_the_json_of_the_answer_byte_for_byte(data: bytes, kind: int) -> None:
    schema = answer(codec.schema("t/n/x", kind, data, {"k": 'v"'}), 9)  # type: ignore[arg-type]
    assert schema_body(schema) == json.dumps(schema_json(schema)).encode()


def test_a_key_value_body_is_the_json_of_the_answer() -> None:
    key = AVRO.encode()
    data = len(key).to_bytes(4, "big") + key + (-1).to_bytes(4, "big", signed=True)
    schema = answer(codec.schema("t/n/x", Schema.KEY_VALUE, data, {}))
    assert schema_body(schema) == json.dumps(schema_json(schema)).encode()
