"""The byte-level fast path of LOOKUP (listeners.protocol.lookup_frames): the key and request
id it reads off a LOOKUP, and the answer frames it writes, against protobuf's own encoder and
decoder (differential, hypothesis) and against golden bytes."""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import BaseCommand, FrameDecoder, LookupType
from pulsar_lookup_gateway.listeners.protocol.lookup_frames import (
    LOOKUP_HEAD,
    AnswerFrames,
    AnswerTemplate,
    answer_run,
    is_canonical,
    split_lookup,
    topic_and_tail,
)
from pulsar_lookup_gateway.listeners.protocol.wire import bytes_field, encode_varint, varint_field
from pulsar_lookup_gateway.lookup.bundles import NamespaceBundles
from pulsar_lookup_gateway.lookup.resolve import BrokerUrls, LookupAnswer, ResponseKind
from pulsar_lookup_gateway.lookup.selection import ChoiceSource, ListenerChoice
from pulsar_lookup_gateway.lookup.topics import TopicName

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


# --- answer_run: the one-pass reader of whole frames ------------------------------------------

_SIZES = struct.Struct(">II")
_ANSWER = codec.lookup_response(
    7, response=LookupType.Connect, broker_url="pulsar://b1:6650", authoritative=True
)


def _template() -> AnswerTemplate:
    command = BaseCommand.FromString(_ANSWER[8:])
    return AnswerTemplate.of(command)


def padded_varint(value: int) -> bytes:
    minimal = encode_varint(value)
    return minimal[:-1] + bytes([minimal[-1] | 0x80, 0])


def _frame(command: bytes, payload: bytes = b"") -> bytes:
    return _SIZES.pack(len(command) + len(payload) + 4, len(command)) + command + payload


LOOKUP_FRAMES = st.builds(
    lambda topic, rid, name, shape: (
        _frame(lookup_body(topic, rid, None, name))
        if shape == "canonical"
        else _frame(lookup_body(topic, rid, None, name), b"\x00\x01")  # a payload after it
        if shape == "payload"
        else _frame(wrap(bytes_field(1, topic.encode()) + varint_field(2, rid)) + b"\x10\x01")
        if shape == "trailing-field"  # a BaseCommand field after lookupTopic
        else _frame(wrap(bytes_field(1, topic.encode()) + b"\x10" + padded_varint(rid % 2**56)))
        if shape == "padded-id"  # a request id in one byte more than protobuf writes
        else _frame(wrap(varint_field(2, rid) + bytes_field(1, topic.encode())))
    ),
    st.sampled_from(["t", "persistent://public/default/t", "x" * 120, "é" * 70]) | TOPICS,
    st.sampled_from([0, 1, 127, 128, 300, 2**35, 2**63 - 1, 2**63, 2**64 - 1]) | REQUEST_IDS,
    NAMES,
    st.sampled_from(["canonical"] * 5 + ["payload", "trailing-field", "padded-id", "swapped"]),
)
OTHER_FRAMES = st.sampled_from([codec.ping(), codec.connect("x", 21)]) | st.binary(
    min_size=1, max_size=40
)  # (b"" is no frame)


def _reference(data: bytes, entries: dict[bytes, Any], max_frame_size: int) -> list[bytes]:
    """What the full reader answers from the memo, frame by frame, up to the first frame it
    would not answer from there: the frame decoder's split, then split_lookup."""
    decoder, answers = FrameDecoder(max_frame_size), list[bytes]()
    decoder.feed(data)
    while True:
        try:
            body = decoder.next_body()
        except Exception:
            return answers
        if body is None:
            return answers
        split = split_lookup(body)
        entry = None if split is None else entries.get(split[0])
        if split is None or entry is None:
            return answers
        answers.append(entry[0].frame(split[1]))


@given(
    st.lists(LOOKUP_FRAMES | OTHER_FRAMES, max_size=12),
    st.data(),
    st.sampled_from([64, 160, 1024 * 1024]),
)
def test_answer_run_answers_what_split_lookup_answers(
    frames: list[bytes], data: st.DataObject, max_frame_size: int
) -> None:
    """Frame by frame, answer_run answers exactly as the frame decoder plus split_lookup plus
    the memo would, and stops only where they would stop or at a frame whose lengths it
    leaves to them (128 bytes or more, or a payload after the command); it never reads a frame
    past a partial one."""
    stream = b"".join(frames)
    stream = stream[: data.draw(st.integers(0, len(stream)), label="cut")]
    template = _template()
    entries: dict[bytes, Any] = {}
    for frame in frames:  # memoise some of the requests that split
        split = split_lookup(frame[8:])
        if split is not None and data.draw(st.booleans(), label="memoised"):
            entries[split[0]] = (template, ("tally", True))
    out: list[bytes] = []
    hits: list[Any] = []
    pos = answer_run(stream, 0, max_frame_size, entries, out, hits)
    expected = _reference(stream, entries, max_frame_size)
    assert out == expected[: len(out)]
    assert len(hits) == len(out) and all(hit == ("tally", True) for hit in hits)
    assert pos == sum(len(frames[i]) for i in range(len(out)))  # whole frames, in order
    if len(out) < len(expected):
        # It left a frame the memo answers: only a long one, or one with a payload after the
        # command (which answer_run leaves to the frame decoder).
        left = frames[len(out)]
        total, size = _SIZES.unpack_from(left)
        assert size != total - 4 or size >= 128 + 5 or left[14] >= 0x80


def test_answer_run_answers_a_pipelined_run_and_stops_at_the_first_other_frame() -> None:
    template = _template()
    lookups = [codec.lookup(f"persistent://public/default/t{i}", 1000 + i) for i in range(20)]
    entries = {split_lookup(f[8:])[0]: (template, ("tally", True)) for f in lookups}  # type: ignore[index]
    stream = b"".join(lookups) + codec.ping() + lookups[0]
    out: list[bytes] = []
    hits: list[Any] = []
    pos = answer_run(stream, 0, 1024, entries, out, hits)
    assert pos == len(b"".join(lookups)) and len(hits) == 20
    assert out == [template.frame(encode_varint(1000 + i)) for i in range(20)]
    assert answer_run(stream, 0, 40, entries, [], []) == 0  # frames over the cap: not read


def test_answer_run_reads_no_key_out_of_what_the_full_path_refuses() -> None:
    """Frames made so that a careless reader would find a memoised key in them, each of which
    the full path answers otherwise (or refuses): none is answered from the memo."""
    template = _template()
    entries: dict[bytes, Any] = {}
    keys = {}
    for topic in ("persistent://public/default/t", "p" * 124):  # the second: a 2-byte length
        key, _ = split_lookup(lookup_body(topic, 5, True, None))  # type: ignore[misc]
        entries[key] = (template, ("tally", True))
        keys[topic] = key
    short, long_ = keys["persistent://public/default/t"], keys["p" * 124]
    crafted = [
        # the authoritative flag as a payload after the command, not in it
        _frame(lookup_body("persistent://public/default/t", 5, None, None), b"\x18\x01"),
        # the request id in two bytes (5, then a zero): protobuf reads 5 and writes one byte
        _frame(wrap(short[:-2] + b"\x10\x85\x00" + short[-2:])),
        # lookupTopic's length in one byte (the command's size less 5) where protobuf writes
        # two: protobuf cannot parse it at all
        _frame(LOOKUP_HEAD + bytes([len(long_) + 2]) + long_[:-2] + b"\x10\x05" + long_[-2:]),
    ]
    for frame in crafted:
        assert answer_run(frame, 0, 1024, entries, [], []) == 0, frame
    canonical = _frame(lookup_body("persistent://public/default/t", 5, True, None))
    assert answer_run(canonical, 0, 1024, entries, [], []) == len(canonical)


@given(st.binary(max_size=200), st.integers(0, 50))
def test_answer_run_reads_any_bytes_without_failing(data: bytes, pos: int) -> None:
    """Bytes off the wire, memoised or not, are read without an exception; only whole frames
    are consumed."""
    entries: dict[bytes, Any] = {data[13:20]: (_template(), ("tally", False))}
    out: list[bytes] = []
    end = answer_run(data, min(pos, len(data)), 1024, entries, out, [])
    assert min(pos, len(data)) <= end <= len(data)


# --- golden bytes ---------------------------------------------------------------------------


def test_a_lookup_splits_into_golden_bytes() -> None:
    # BaseCommand{type: LOOKUP, lookupTopic{topic: "a", request_id: 300, authoritative: true}}
    body = bytes.fromhex("0817ba01080a0161 10ac02 1801".replace(" ", ""))
    assert BaseCommand.FromString(body).lookupTopic.request_id == 300
    assert split_lookup(body) == (bytes.fromhex("0a01611801"), bytes.fromhex("ac02"))
    assert topic_and_tail(bytes.fromhex("0a01611801")) == (b"a", b"\x18\x01")


def test_an_answer_frame_is_golden_bytes() -> None:
    command = codec.lookup_response_command(
        0, response=LookupType.Connect, broker_url="pulsar://b:1", authoritative=True
    )
    frame = AnswerTemplate.of(command).frame(bytes.fromhex("ac02"))
    # sizes (32, 28), BaseCommand{type: 24, lookupTopicResponse{brokerServiceUrl: "pulsar://b:1",
    # response: Connect, request_id: 300, authoritative: true, proxy_through_service_url: false}}
    assert frame == bytes.fromhex(
        "00000020" "0000001c" "0818c20117" "0a0c70756c7361723a2f2f623a31" "1801" "20ac02" "2801"
        "4000"
    )  # fmt: skip
    assert frame == codec.encode_command(
        codec.lookup_response_command(
            300, response=LookupType.Connect, broker_url="pulsar://b:1", authoritative=True
        )
    )


def test_topic_and_tail_read_a_memo_key() -> None:
    assert topic_and_tail(b"\x0a\x03abc\x18\x01") == (b"abc", b"\x18\x01")
    assert topic_and_tail(b"\x0a\x05abc") is None
    assert topic_and_tail(b"\x12\x01a") is None
    assert topic_and_tail(b"") is None


@given(TOPICS, REQUEST_IDS, st.none() | st.booleans(), NAMES)
def test_topic_and_tail_read_what_the_codec_wrote(
    topic: str, request_id: int, authoritative: bool | None, name: str | None
) -> None:
    body = lookup_body(topic, request_id, authoritative, name)
    split = split_lookup(body)
    if split is None:
        return
    read = topic_and_tail(split[0])
    assert read is not None and read[0] == topic.encode()
    tail = BaseCommand(type=BaseCommand.LOOKUP)
    tail.lookupTopic.ParseFromString(read[1])
    assert tail.lookupTopic.authoritative == bool(authoritative)
    assert tail.lookupTopic.advertised_listener_name == (name or "")


def test_a_canonical_body_is_what_protobuf_writes() -> None:
    body = lookup_body("t", 5, None, None)
    assert is_canonical(BaseCommand.FromString(body), body)
    swapped = wrap(varint_field(2, 5) + bytes_field(1, b"t"))
    assert not is_canonical(BaseCommand.FromString(swapped), swapped)


@given(st.integers(0, 2**64 - 1), st.sampled_from(["pulsar://b:6650", "pulsar://x" * 20]))
def test_answer_frames_write_what_the_codec_writes(request_id: int, url: str) -> None:
    topic = TopicName.parse("persistent://t/ns/x")
    answer = LookupAnswer(
        topic, NamespaceBundles.full().ranges[0], ResponseKind.REDIRECT, False, "b",
        BrokerUrls(url, None, None, None), ListenerChoice(None, ChoiceSource.INTERNAL, True),
    )  # fmt: skip
    expected = codec.lookup_response(
        request_id, response=LookupType.Redirect, broker_url=url, authoritative=False
    )
    assert AnswerFrames().frame(request_id, answer) == expected


def test_no_product_module_outside_the_protocol_package_reads_varint_bits() -> None:
    """The wire format is read by hand in listeners/protocol/ only (the codec, wire.py and this
    fast path): a varint's continuation bit tested anywhere else is a second reader of it."""
    root = Path(__file__).resolve().parents[3]
    continuation = re.compile(r"&\s*(0x80|128)\b")
    found = [
        str(path.relative_to(root))
        for folder in ("gateway", "http_api", "brokers", "listeners", "serving", "lookup", "zones")
        for path in sorted((root / folder).rglob("*.py"))
        if "protocol" not in path.relative_to(root).parts
        and continuation.search(path.read_text(encoding="utf-8"))
    ]
    assert found == []
