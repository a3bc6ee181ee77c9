"""Warm LOOKUPs answered from bytes: the answer frame of a LOOKUP the gateway has answered
before, kept by the request's bytes with the request id cut out, so that asking again costs
no protobuf decode, no lookup and no encode. Sans-IO: bytes in, bytes out.

Only requests in protobuf's canonical shape are memoised (BaseCommand = type LOOKUP then the
lookupTopic body and nothing else; the body = topic, then request_id, then the other fields in
field order, as every client's protobuf library writes them). A memo entry is made from the
full path's own answer to such a request, so a later request with the same bytes but for the
request id is the same question: same topic, same flags, same listener name, each written
once. Anything else (another field order, a repeated field, unknown fields) does not match a
canonical key's bytes and takes the full path. Entries are filed under their topic's bundle and
dropped by what a write of the cluster view may change (lookup.view_writes).

Two readers of the same key: `split_lookup` (one serialized BaseCommand, any size) and
`answer_run` (a run of whole frames straight off a socket read, for the common shape: command
and topic shorter than 128 bytes), which does the frame split, the key and the answer of each
frame in one pass, so that a warm pipelined lookup costs a handful of bytecodes.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import BaseCommand
from pulsar_lookup_gateway.listeners.protocol.wire import encode_varint, read_varint

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

MAX_ENTRIES = 65_536  # per listener choice; at the bound the bundles filed first go
MAX_BYTES = 32 * 1024 * 1024  # all entries together (keys are client bytes), by ENTRY_OVERHEAD
#: What an entry holds besides its key's bytes: the dict slot, the key object, the value and
#: bundle tuples, its filing (tracemalloc of 60,000 entries: ~300 bytes with a 50-byte key).
ENTRY_OVERHEAD = 250


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


class LookupMemo:
    """The memoised answers of one binary socket, per listener choice (a connection holds the
    dict of its own choice, so a lookup is one dict read), each filed under its topic's bundle.
    Kept fresh by a lookup.view_writes.WriteFollower, which tells it what each write of the
    view may change: a write of one bundle's owner drops that bundle's entries only."""

    def __init__(self, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> None:
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._by_choice: dict[Any, dict[bytes, Any]] = {}
        # bundle ((`tenant/namespace`, lower bound)) -> its entries: (choice's entries, key),
        # in the order bundles were first filed (the first go first at a bound)
        self._filed: OrderedDict[tuple[str, int], list[tuple[dict[bytes, Any], bytes]]] = (
            OrderedDict()
        )
        self._bundles_of: dict[str, set[tuple[str, int]]] = {}  # namespace -> bundles filed
        self._bytes = 0

    @property
    def bytes_held(self) -> int:
        """What the entries hold, by the accounting of MAX_BYTES."""
        return self._bytes

    def entries_for(self, choice: Any) -> dict[bytes, Any]:
        """The memo of one listener choice: key -> whatever the caller keeps (its template and
        counters). Cleared in place, never replaced, so a caller may hold it."""
        entries = self._by_choice.get(choice)
        if entries is None:
            entries = self._by_choice[choice] = {}
        return entries

    def remember(
        self, entries: dict[bytes, Any], key: bytes, value: Any, bundle: tuple[str, int]
    ) -> None:
        """Keep `value` for `key` in `entries`, filed under `bundle` ((`tenant/namespace`,
        lower bound): what the answer was read from); at a bound, the bundles filed first are
        forgotten until there is room (not everything: the full path answers a storm's first
        topic of each bundle, and starting over at each would re-make the whole memo)."""
        if key in entries:
            entries[key] = value
            return
        while self._filed and not self._has_room(entries, key):
            self._forget(*self._filed.popitem(last=False))
        if self._has_room(entries, key):
            self._file(entries, key, value, bundle)

    def remember_if_room(
        self, entries: dict[bytes, Any], key: bytes, value: Any, bundle: tuple[str, int]
    ) -> None:
        """Remember unless a bound is reached (then nothing: a storm of distinct topics must
        not make the memo start over again and again)."""
        if key not in entries and self._has_room(entries, key):
            self._file(entries, key, value, bundle)

    def _has_room(self, entries: dict[bytes, Any], key: bytes) -> bool:
        return (
            len(entries) < self._max_entries
            and self._bytes + len(key) + ENTRY_OVERHEAD <= self._max_bytes
        )

    def _file(
        self, entries: dict[bytes, Any], key: bytes, value: Any, bundle: tuple[str, int]
    ) -> None:
        entries[key] = value
        filed = self._filed.get(bundle)
        if filed is None:
            filed = self._filed[bundle] = []
            bundles = self._bundles_of.get(bundle[0])
            if bundles is None:
                bundles = self._bundles_of[bundle[0]] = set()
            bundles.add(bundle)
        filed.append((entries, key))
        self._bytes += len(key) + ENTRY_OVERHEAD

    def forget_bundle(self, namespace: str, lower: int) -> None:
        filed = self._filed.pop((namespace, lower), None)
        if filed is not None:
            self._forget((namespace, lower), filed)

    def forget_namespace(self, namespace: str) -> None:
        for bundle in self._bundles_of.pop(namespace, ()):
            self._drop(self._filed.pop(bundle, ()))

    def _forget(self, bundle: tuple[str, int], filed: list[tuple[dict[bytes, Any], bytes]]) -> None:
        """Drop the entries filed under `bundle` (taken out of the filing already)."""
        self._drop(filed)
        bundles = self._bundles_of.get(bundle[0])
        if bundles is not None:
            bundles.discard(bundle)
            if not bundles:
                del self._bundles_of[bundle[0]]

    def _drop(self, filed: list[tuple[dict[bytes, Any], bytes]] | tuple[()]) -> None:
        for entries, key in filed:
            if entries.pop(key, None) is not None:
                self._bytes -= len(key) + ENTRY_OVERHEAD

    def clear(self) -> None:
        for entries in self._by_choice.values():
            entries.clear()
        self._filed.clear()
        self._bundles_of.clear()
        self._bytes = 0
