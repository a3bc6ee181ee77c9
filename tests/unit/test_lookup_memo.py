"""The lookup memo's byte work: the key and request id it reads off a LOOKUP, and the answer
frame it writes, against protobuf's own encoder and decoder."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from listeners.lookup_memo import AnswerTemplate, LookupMemo, split_lookup
from listeners.protocol import codec
from listeners.protocol.codec import BaseCommand, FrameDecoder, LookupType
from listeners.protocol.wire import bytes_field, encode_varint, varint_field

REQUEST_IDS = st.integers(0, 2**64 - 1)
TOPICS = st.text(max_size=300)
NAMES = st.none() | st.text(max_size=40)


def body_of(frame: bytes) -> bytes:
    decoder = FrameDecoder(16 * 1024 * 1024)
    decoder.feed(frame)
    body = decoder.next_body()
    assert body is not None
    return body


def lookup_body(topic: str, request_id: int, authoritative: bool | None, name: str | None) -> bytes:
    command = BaseCommand(type=BaseCommand.LOOKUP)
    command.lookupTopic.topic = topic
    command.lookupTopic.request_id = request_id
    if authoritative is not None:
        command.lookupTopic.authoritative = authoritative
    if name is not None:
        command.lookupTopic.advertised_listener_name = name
    return command.SerializeToString()


def wrap(inner: bytes) -> bytes:
    """A BaseCommand of type LOOKUP around a hand-written lookupTopic body."""
    return varint_field(1, BaseCommand.LOOKUP) + bytes_field(BaseCommand.LOOKUP, inner)


@given(TOPICS, REQUEST_IDS, st.none() | st.booleans(), NAMES)
def test_a_canonical_lookup_splits_into_its_request_id_and_the_rest(
    topic: str, request_id: int, authoritative: bool | None, name: str | None
) -> None:
    body = lookup_body(topic, request_id, authoritative, name)
    split = split_lookup(body)
    if request_id >= 2**63:
        assert split is None  # a 10-byte varint is not echoed
        return
    assert split is not None
    key, raw_id = split
    assert raw_id == encode_varint(request_id)
    # two requests differing only in their request id have the same key, and no other pair does
    other = lookup_body(topic, (request_id + 1) % 2**63, authoritative, name)
    assert split_lookup(other) is not None and split_lookup(other)[0] == key  # type: ignore[index]
    changed = lookup_body(topic + "x", request_id, authoritative, name)
    assert split_lookup(changed)[0] != key  # type: ignore[index]


@given(TOPICS, st.integers(0, 2**63 - 1), st.sampled_from(["swap", "twice", "unknown", "padded"]))
def test_other_shapes_are_left_to_the_full_path(topic: str, request_id: int, shape: str) -> None:
    """A request whose bytes are not protobuf's canonical shape either does not split, or
    splits into a key no canonical request has (so it can never hit a memo entry)."""
    name_field, id_field = bytes_field(1, topic.encode()), varint_field(2, request_id)
    inner = {
        "swap": id_field + name_field,
        "twice": name_field + id_field + varint_field(2, request_id + 1),
        "unknown": name_field + id_field + varint_field(99, 1),
        "padded": name_field + b"\x10" + encode_varint(request_id)[:-1]
        + bytes([encode_varint(request_id)[-1] | 0x80, 0x00]),
    }[shape]  # fmt: skip
    split = split_lookup(wrap(inner))
    canonical = split_lookup(lookup_body(topic, request_id, None, None))
    assert canonical is not None
    assert split is None or split[0] != canonical[0]


@given(
    st.sampled_from([LookupType.Connect, LookupType.Redirect]),
    st.none() | st.text(max_size=80),
    st.none() | st.text(max_size=80),
    st.booleans(),
    st.integers(0, 2**63 - 1),
)
def test_the_template_writes_what_the_codec_writes(
    response: Any, url: str | None, url_tls: str | None, authoritative: bool, request_id: int
) -> None:
    def frame(rid: int) -> bytes:
        return codec.lookup_response(
            rid,
            response=response,
            broker_url=url,
            broker_url_tls=url_tls,
            authoritative=authoritative,
        )

    decoder = FrameDecoder(16 * 1024 * 1024)
    decoder.feed(frame(12345))  # the template ignores the request id it was made from
    command = decoder.next_command()
    assert isinstance(command, BaseCommand)
    template = AnswerTemplate.of(command)
    assert template.frame(encode_varint(request_id)) == frame(request_id)


def test_the_memo_is_bounded_and_forgets_an_older_view() -> None:
    memo = LookupMemo(max_entries=3, max_key_bytes=100)
    entries = memo.entries_for("choice")
    view = object()
    memo.check_view(view, 1)
    for i in range(3):
        memo.remember(entries, bytes([i]), i)
    assert len(entries) == 3
    memo.remember(entries, b"x", "x")  # over the count: start over
    assert entries == {b"x": "x"}
    memo.remember(entries, b"y" * 100, "y")  # over the bytes (1 + 100 > 100): start over
    assert entries == {b"y" * 100: "y"}
    memo.check_view(view, 1)
    assert entries
    memo.check_view(view, 2)  # the view changed: everything goes
    assert entries == {} and memo.entries_for("choice") is entries
