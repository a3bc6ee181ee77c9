"""The byte-level fast path of LOOKUP: a LOOKUP's memo key and request id read straight off
its bytes, and LOOKUP_RESPONSE frames written from a template with a hole for the request id, so
that a warm lookup costs no protobuf decode and no encode. Sans-IO: bytes in, bytes out. The one
place outside the codec that reads the wire format by hand (varints included).

The key: only requests in protobuf's canonical shape are memoised (BaseCommand = type LOOKUP
then the lookupTopic body and nothing else; the body = topic, then request_id, then the other
fields in field order, as every client's protobuf library writes them), keyed by their bytes
with the request id cut out. An answer is kept from the full path's own answer to such a
request (`is_canonical`), so a later request with the same bytes but for the request id is the
same question: same topic, same flags, same listener name, each written once. Anything else
(another field order, a repeated field, unknown fields) does not match a canonical key's bytes
and takes the full path.

Two readers of the same key: `split_lookup` (one serialized BaseCommand, any size) and
`answer_run` (the one call of a socket read: a run of whole frames straight off the read, for
the common shape: command and topic shorter than 128 bytes), which does the frame split, the
key and the answer of each frame in one pass, so that a warm pipelined lookup costs one dict
read and a handful of bytecodes. `topic_and_tail` reads a key's topic and the fields after the
request id (the cold answers by bundle are kept per request shape).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import LookupType
from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import BaseCommand
from pulsar_lookup_gateway.listeners.protocol.wire import encode_varint, read_varint
from pulsar_lookup_gateway.lookup.resolve import LookupAnswer, ResponseKind

#: BaseCommand field 1 (type) = LOOKUP (23), then field 23 (lookupTopic), length-delimited.
LOOKUP_HEAD = b"\x08\x17\xba\x01"
#: BaseCommand field 1 (type) = LOOKUP_RESPONSE (24), then field 24 (lookupTopicResponse).
RESPONSE_HEAD = b"\x08\x18\xc2\x01"
_TOPIC_TAG = 0x0A  # CommandLookupTopic field 1, length-delimited
_REQUEST_ID_TAG = 0x10  # CommandLookupTopic field 2, varint
_RESPONSE_REQUEST_ID_FIELD = 4  # CommandLookupTopicResponse.request_id
_RESPONSE_REQUEST_ID_TAG = b"\x20"  # field 4, varint
_SIZES = struct.Struct(">II")
#: A frame's sizes, then BaseCommand's head, the lookupTopic length, the topic's tag and length:
#: all one byte wide for a command shorter than 128 bytes (answer_run's shape).
_SHORT_LOOKUP = struct.Struct(">IIIBBB")
_LOOKUP_HEAD_INT = int.from_bytes(LOOKUP_HEAD, "big")
_SHORT_HEAD_SIZE = _SHORT_LOOKUP.size  # sizes (8), head (4), length, tag, topic length
_KEY_OFFSET = _SHORT_HEAD_SIZE - 2  # the key starts at the topic's tag
#: The widest request id a template takes (a varint of 9 bytes: ids below 2**63).
_TEMPLATE_ID_LIMIT = 2**63


def split_lookup(body: bytes) -> tuple[bytes, bytes] | None:
    """(key, request id) of a serialized BaseCommand that is a LOOKUP in canonical shape, the
    key being its lookupTopic body without the request id field, and the request id its varint
    as sent; None for anything else, and for a request id that is not a minimal varint below
    2**63 (echoing those bytes would not be what protobuf writes for the value)."""
    if body[:4] != LOOKUP_HEAD:
        return None
    size = len(body)
    # Lengths below 128 are one byte: the common case is read inline.
    length = body[4] if size > 4 else 0x80
    if length < 0x80:
        start = 5
    else:
        read = read_varint(body, 4)
        if read is None:
            return None
        length, start = read
    if start + length != size or start >= size or body[start] != _TOPIC_TAG:
        return None
    topic_length = body[start + 1] if start + 1 < size else 0x80
    if topic_length < 0x80:
        topic_end = start + 2 + topic_length
    else:
        read = read_varint(body, start + 1)
        if read is None:
            return None
        topic_end = read[1] + read[0]
    if topic_end >= size or body[topic_end] != _REQUEST_ID_TAG:
        return None
    end = topic_end + 1
    while end < size and body[end] & 0x80:
        end += 1
    end += 1  # the varint's last byte
    width = end - topic_end - 1
    if end > size or width > 9 or (width > 1 and body[end - 1] == 0):
        return None
    return body[start:topic_end] + body[end:], body[topic_end + 1 : end]


def answer_run(
    data: bytes,
    pos: int,
    max_frame_size: int,
    entries: dict[bytes, Any],
    out: list[bytes],
    hits: list[Any],
    cold: Callable[[bytes, bytes, bytes], Any] | None = None,
) -> int:
    """Answer the whole frames of `data` from `pos` on, in order, for as long as each is a
    LOOKUP in canonical shape, shorter than 128 bytes, no larger than `max_frame_size`, whose
    key is in `entries` (values: (AnswerTemplate, outcome)), or, given `cold`, for which
    `cold(key, topic, the fields after the request id)` gives such a value: its answer frame is
    appended to `out` and its outcome to `hits`. Returns where it stopped: the end of `data`,
    a partial frame, or a frame for the caller's full path (any other command, shape or size,
    a key not memoised, a malformed frame), which the caller's frame decoder reads and checks
    as usual.

    Reads exactly what `split_lookup` reads from the body (a property test holds them equal);
    `data` is bytes, so the key's slices are hashable without a copy more."""
    get, append, hit, unpack = entries.get, out.append, hits.append, _SHORT_LOOKUP.unpack_from
    end = len(data)
    while end - pos >= _SHORT_HEAD_SIZE:
        total, size, head, length, tag, topic_length = unpack(data, pos)
        following = pos + 4 + total
        if (
            following > end
            or total + 4 > max_frame_size
            or size != total - 4  # (a LOOKUP carries no payload)
            or head != _LOOKUP_HEAD_INT
            or length >= 0x80  # (a longer varint: split_lookup reads it)
            or length != size - 5  # lookupTopic ends the command
            or tag != _TOPIC_TAG
        ):
            break
        # (a topic length of 128 or more, one byte or two, puts its end past the command)
        topic_end = pos + _SHORT_HEAD_SIZE + topic_length
        if topic_end + 1 >= following or data[topic_end] != _REQUEST_ID_TAG:
            break
        request_id = end_of_id = topic_end + 1
        while end_of_id < following and data[end_of_id] & 0x80:
            end_of_id += 1
        if end_of_id >= following:
            break  # (the varint runs past the command)
        end_of_id += 1
        width = end_of_id - request_id
        if width > 9 or (width > 1 and not data[end_of_id - 1]):
            break  # not a minimal varint below 2**63: split_lookup refuses it too
        key = data[pos + _KEY_OFFSET : topic_end] + data[end_of_id:following]
        entry = get(key)
        if entry is None:
            if cold is None:
                break
            topic = data[pos + _SHORT_HEAD_SIZE : topic_end]
            entry = cold(key, topic, data[end_of_id:following])
            if entry is None:
                break
        template = entry[0]
        append(template.heads[width] + data[request_id:end_of_id] + template.after)
        hit(entry[1])
        pos = following
    return pos


@dataclass(frozen=True, slots=True)
class AnswerTemplate:
    """A LOOKUP_RESPONSE frame with a hole for the request id: the response's fields before
    field 4 (request_id) and after it, serialized in field order as protobuf does, and the
    frame's head for each width of the request id's varint (1 to 9 bytes), made once."""

    before: bytes
    after: bytes
    heads: tuple[bytes, ...]  # heads[w]: sizes, BaseCommand head, fields before, request id tag

    @classmethod
    def of(cls, command: BaseCommand) -> AnswerTemplate:
        """The template of `command`, a LOOKUP_RESPONSE (its request id is ignored)."""
        head, tail = BaseCommand(), BaseCommand()
        head.CopyFrom(command)
        tail.CopyFrom(command)
        response_head, response_tail = head.lookupTopicResponse, tail.lookupTopicResponse
        for field, _ in command.lookupTopicResponse.ListFields():
            if field.number <= _RESPONSE_REQUEST_ID_FIELD:
                response_tail.ClearField(field.name)
            if field.number >= _RESPONSE_REQUEST_ID_FIELD:
                response_head.ClearField(field.name)
        before = response_head.SerializePartialToString()
        after = response_tail.SerializePartialToString()
        heads = [b""]
        for width in range(1, 10):
            inner = len(before) + 1 + width + len(after)
            size = len(RESPONSE_HEAD) + len(encode_varint(inner)) + inner
            heads.append(
                _SIZES.pack(size + 4, size)
                + RESPONSE_HEAD
                + encode_varint(inner)
                + before
                + _RESPONSE_REQUEST_ID_TAG
            )
        return cls(before, after, tuple(heads))

    def frame(self, request_id: bytes) -> bytes:
        """The frame for the request id whose varint (1 to 9 bytes, as split_lookup gives
        it) is `request_id`."""
        return self.heads[len(request_id)] + request_id + self.after


def is_canonical(command: object, body: bytes) -> bool:
    """Whether `body`, decoded as `command`, is what protobuf writes for it (the full path's
    answer to it may be kept under split_lookup's key: a repeated request id, say, would be
    read differently by the key)."""
    return isinstance(command, BaseCommand) and command.SerializeToString() == body


def topic_and_tail(key: bytes) -> tuple[bytes, bytes] | None:
    """(topic bytes, the fields after the request id) of a key split_lookup made (the topic
    field, then those fields)."""
    if not key or key[0] != _TOPIC_TAG:
        return None
    read = read_varint(key, 1)
    if read is None:
        return None
    length, start = read
    if start + length > len(key):
        return None
    return key[start : start + length], key[start + length :]


# -- the answers' frames -----------------------------------------------------------------------

_LOOKUP_TYPE = {
    ResponseKind.CONNECT: LookupType.Connect,
    ResponseKind.REDIRECT: LookupType.Redirect,
}
_AnswerKey = tuple[ResponseKind, str | None, str | None, bool]


class AnswerFrames:
    """LOOKUP_RESPONSE frames of answers with an address, made from the answer itself. Lookups
    share few distinct answers (one per broker, listener and response kind), so each is built
    once, as a template (the same template the memo keeps); after that a frame is the template
    around the id's varint."""

    LIMIT = 4096  # distinct answers kept; more (a huge cluster) starts over

    def __init__(self) -> None:
        self._templates: dict[_AnswerKey, AnswerTemplate] = {}

    def frame(self, request_id: int, answer: LookupAnswer) -> bytes:
        if request_id < _TEMPLATE_ID_LIMIT:
            return self.template(answer).frame(encode_varint(request_id))
        return codec.encode_command(_command(request_id, answer))

    def template(self, answer: LookupAnswer) -> AnswerTemplate:
        """The frame of `answer` with a hole for the request id."""
        urls = answer.urls
        key = (answer.response, urls.service_url, urls.service_url_tls, answer.authoritative)
        template = self._templates.get(key)
        if template is None:
            if len(self._templates) >= self.LIMIT:
                self._templates.clear()
            template = self._templates[key] = AnswerTemplate.of(_command(0, answer))
        return template


def _command(request_id: int, answer: LookupAnswer) -> BaseCommand:
    urls = answer.urls
    return codec.lookup_response_command(
        request_id,
        response=_LOOKUP_TYPE[answer.response],
        broker_url=urls.service_url,
        broker_url_tls=urls.service_url_tls,
        authoritative=answer.authoritative,
    )
