"""A broker's binary GET_SCHEMA_RESPONSE rendered as the broker's REST GetSchemaResponse.

``GET /admin/v2/schemas/{tenant}/{ns}/{topic}/schema[/{version}]`` answers
``{"version": <long>, "type": "<SchemaType name>", "timestamp": <long>, "data": "<text>",
"properties": {...}}`` (the C++ client reads ``type``, ``data`` and ``properties``, and needs
``properties`` present). The binary answer carries no timestamp (the broker's REST answer has
``SchemaData.timestamp``, the time the version was stored, kept in BookKeeper): it is 0. A
schema that does not exist is 404 ``Schema not found``, as SchemasResourceBase.
convertToSchemaResponse says it (the broker's binary GET_SCHEMA answers a missing and a deleted
schema alike: TopicNotFound "Topic not found or no-schema <topic>"). A schema version is
a long on the REST side and its 8 bytes, big-endian, on the binary side. ``KEY_VALUE`` data is
shown as the broker shows it: ``{"key": <key schema>, "value": <value schema>}``, each the
schema's JSON, or ``""`` for a primitive (schema-less) part.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from pulsar_lookup_gateway.brokers.answers import BrokerRefusal, BrokerSchema
from pulsar_lookup_gateway.lookup.errors import ServerError

__all__ = ["SCHEMA_NOT_FOUND", "schema_body", "schema_json", "schema_refusal", "version_bytes"]

#: SchemasResourceBase.convertToSchemaResponse: a null SchemaAndMetadata is RestException 404.
SCHEMA_NOT_FOUND = "Schema not found"

#: ASCII bytes json.dumps escapes as \uXXXX or \b, \f (rare in a schema: json.dumps is asked).
_RARE = bytes([*range(0x20), 0x7F]).translate(None, b"\n\r\t")
#: The others and their escapes (the backslash first).
_ESCAPES = ((b"\\", b"\\\\"), (b'"', b'\\"'), (b"\n", b"\\n"), (b"\r", b"\\r"), (b"\t", b"\\t"))
_LONG = struct.Struct(">q")
_INT = struct.Struct(">i")


def version_bytes(text: str) -> bytes:
    """The binary schema version of a REST `{version}` (a long); ValueError if it is not one."""
    if not text.lstrip("-").isdigit() or len(text) > 20:
        raise ValueError(f"'{text[:24]}' is not a schema version")
    try:
        return _LONG.pack(int(text))
    except struct.error:
        raise ValueError(f"'{text[:24]}' is not a schema version") from None


def schema_json(schema: BrokerSchema) -> dict[str, Any]:
    if schema.type_name == "KEY_VALUE":
        data = _key_value_data(schema.data)
    else:
        data = schema.data.decode("utf-8", errors="replace")
    return {
        "version": _version(schema.version),
        "type": schema.type_name,
        "timestamp": 0,
        "data": data,
        "properties": dict(schema.properties),
    }


def schema_body(schema: BrokerSchema) -> bytes:
    """`json.dumps(schema_json(schema))`, encoded, with the data written in one pass where it
    is ASCII (the usual JSON definition or text): a 5 MB schema costs a few milliseconds
    instead of ~50 (a body is made for every forwarded answer a client may hold)."""
    data = None if schema.type_name == "KEY_VALUE" else _json_string(schema.data)
    if data is None:
        return json.dumps(schema_json(schema)).encode()
    head = json.dumps(
        {"version": _version(schema.version), "type": schema.type_name, "timestamp": 0}
    )
    tail = json.dumps(dict(schema.properties))
    return b"".join(
        (head[:-1].encode(), b', "data": ', data, b', "properties": ', tail.encode(), b"}")
    )


def _json_string(data: bytes) -> bytes | None:
    """`data` as json.dumps writes it as a string, for ASCII with no control character but
    newline, return and tab (None otherwise: json.dumps is asked)."""
    if not data.isascii() or len(data.translate(None, _RARE)) != len(data):
        return None
    for raw, escaped in _ESCAPES:
        if raw in data:
            data = data.replace(raw, escaped)
    return b'"' + data + b'"'


def schema_refusal(refusal: BrokerRefusal) -> BrokerRefusal:
    """A broker's refusal of GET_SCHEMA as the REST route words it: TopicNotFound (no schema,
    or a deleted one; ServerCnx.handleGetSchema) is the REST answer's "Schema not found"."""
    if refusal.code == ServerError.TopicNotFound:
        return BrokerRefusal(refusal.code, SCHEMA_NOT_FOUND)
    return refusal


def _version(raw: bytes) -> int:
    return _LONG.unpack(raw)[0] if len(raw) == _LONG.size else 0


def _key_value_data(raw: bytes) -> str:
    """Pulsar's KEY_VALUE schema data (int32 length and bytes of the key schema, then of the
    value schema; -1 for none) as the REST API shows it."""
    parts: list[Any] = []
    offset = 0
    for _ in range(2):
        if offset + _INT.size > len(raw):
            parts.append("")
            continue
        (size,) = _INT.unpack_from(raw, offset)
        offset += _INT.size
        chunk = raw[offset : offset + max(size, 0)]
        offset += max(size, 0)
        try:
            parts.append(json.loads(chunk) if chunk else "")
        except (UnicodeDecodeError, json.JSONDecodeError):
            parts.append("")  # a primitive schema has no JSON definition
    return json.dumps({"key": parts[0], "value": parts[1]}, separators=(",", ":"))
