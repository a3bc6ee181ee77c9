"""The binary server with its lookup memo answers byte for byte what it answers without it:
random LOOKUP frames (canonical and not, short and long, repeated, with and without listener
names, for owned, unowned, unloading, partitioned, missing and invalid topics) sent to both on
real sockets, over a change of the cluster view in the middle."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pulsar_lookup_gateway.listeners.binary import BinaryServer, BinarySettings
from pulsar_lookup_gateway.listeners.endpoints.addresses import Endpoint, Scheme
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.wire import bytes_field, encode_varint, varint_field
from pulsar_lookup_gateway.metadata_store.file import FileSource
from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
from pulsar_lookup_gateway.metadata_store.synthetic import (
    cluster,
    listeners_of,
    ownership_node,
    topic_in_range,
)
from pulsar_lookup_gateway.serving.service import LookupService
from tests.integration.serving.raw_conversation import HOST, Conversation

LOW, MID, HIGH = "0x00000000_0x40000000", "0x40000000_0x80000000", "0x80000000_0xc0000000"
OWNED_LOW = topic_in_range(0x00000000, 0x40000000)
TOPICS = [
    OWNED_LOW,
    topic_in_range(0x40000000, 0x80000000),  # owned by b2
    topic_in_range(0x80000000, 0xC0000000),  # being unloaded
    topic_in_range(0xC0000000, 0xFFFFFFFF),  # unowned: a redirect
    "orders",  # partitioned (its name answers like any topic)
    "persistent://public/missing-ns/t",
    "persistent://public/default/..",  # invalid
    "persistent://public/default/ünïcode-t",
    "persistent://public/default/" + "long" * 30,  # lengths past 127: two-byte varints
    "",
]
NAMES = [None, "", "internal", "external", "nope", "bad name!"]


def nodes(low_owner: int) -> dict[str, Any]:
    result = cluster(brokers=3, owned={LOW: low_owner, MID: 2}, leader=1)
    result[f"/namespace/public/default/{HIGH}"] = ownership_node(3, disabled=True)
    result["/admin/partitioned-topics/public/default/persistent/orders"] = {"partitions": 4}
    return result


def encode(topic: str, request_id: int, name: str | None, shape: str) -> bytes:
    """A LOOKUP frame; `shape` other than canonical writes what protobuf would not."""
    if shape == "canonical":
        return codec.lookup(topic, request_id, advertised_listener_name=name)
    if shape == "payload":  # bytes after the command (a LOOKUP has none): ignored
        frame = codec.lookup(topic, request_id, advertised_listener_name=name)
        (size,) = struct.unpack_from(">I", frame)
        return struct.pack(">I", size + 2) + frame[4:] + b"\x18\x01"
    if shape == "padded-id":
        request_id %= 2**63  # (a padded 10-byte varint would be 11 bytes: not protobuf at all)
    topic_field, id_field = bytes_field(1, topic.encode()), varint_field(2, request_id)
    name_field = bytes_field(7, name.encode()) if name is not None else b""
    inner = {
        "swapped": id_field + topic_field + name_field,
        "repeated-id": topic_field + id_field + name_field + varint_field(2, request_id + 7),
        "unknown-field": topic_field + id_field + name_field + varint_field(60, 3),
        "padded-id": topic_field + b"\x10" + encode_varint(request_id)[:-1]
        + bytes([encode_varint(request_id)[-1] | 0x80, 0]) + name_field,
    }[shape]  # fmt: skip
    command = varint_field(1, 23) + bytes_field(23, inner)
    return struct.pack(">II", len(command) + 4, len(command)) + command


REQUESTS = st.lists(
    st.tuples(
        st.sampled_from(TOPICS),
        st.integers(0, 2**64 - 1),
        st.sampled_from(NAMES),
        st.sampled_from(
            ["canonical"] * 4 + ["swapped", "repeated-id", "unknown-field", "padded-id", "payload"]
        ),
    ),
    min_size=1,
    max_size=30,
)


async def scenario(snapshot: Path, first: list[Any], second: list[Any]) -> None:
    write_snapshot(snapshot, nodes(low_owner=1))
    source = FileSource(snapshot, poll_interval=3600)
    await source.start()
    service = LookupService(source, internal_listener="internal")
    servers = []
    for memoise in (True, False):
        spec = SocketSpec(Endpoint(Scheme.PULSAR, HOST, 0), "external", "memo test")
        settings_ = BinarySettings(keep_alive_interval=0, memoise_lookups=memoise)
        server = BinaryServer(spec, service, settings_)
        await server.start()
        servers.append(server)
    conversations = [await Conversation.open(s.port) for s in servers]
    memo = servers[0].handlers.lookups.tables(servers[0].socket_choice)[0]
    first = [(OWNED_LOW, 5, None, "canonical"), *first]  # at least one answer to memoise
    try:
        for batch in (first, first, second):  # the first batch twice: the second time warm
            frames = [encode(*request) for request in batch]
            with_memo, without = [await c.ask(frames) for c in conversations]
            assert with_memo == without, batch
        assert memo, "the warm batch was not memoised"
        # The view changes: b2 now owns the low bundle. Memoised answers must not outlive it.
        write_snapshot(snapshot, nodes(low_owner=2))
        assert source.reload()
        frames = [encode(*request) for request in [*first, *second]]
        frames.append(codec.lookup(OWNED_LOW, 1))
        with_memo, without = [await c.ask(frames) for c in conversations]
        assert with_memo == without
        assert listeners_of(2)["external"]["brokerServiceUrl"].encode() in with_memo[-1]
    finally:
        for conversation in conversations:
            await conversation.close()
        for server in servers:
            await server.stop(timeout=5)
        await source.close()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(REQUESTS, REQUESTS)
def test_memoised_answers_equal_full_answers(
    tmp_path: Path, first: list[Any], second: list[Any]
) -> None:
    asyncio.run(scenario(tmp_path / "cluster.json", first, second))


async def counted(snapshot: Path) -> None:
    write_snapshot(snapshot, nodes(low_owner=1))
    source = FileSource(snapshot, poll_interval=3600)
    await source.start()
    service = LookupService(source, internal_listener="internal")
    spec = SocketSpec(Endpoint(Scheme.PULSAR, HOST, 0), "external", "memo test")
    server = BinaryServer(spec, service, BinarySettings(keep_alive_interval=0))
    await server.start()
    conversation = await Conversation.open(server.port)
    labels = {"listener": "external", "chosen_by": "socket", "protocol": "binary"}

    def count(name: str) -> float:
        return service.metrics.registry.get_sample_value(name, labels) or 0.0

    try:
        await conversation.ask([codec.lookup(OWNED_LOW, 1)])  # the full path, memoised
        assert server.handlers.lookups.tables(server.socket_choice)[0]
        # one read of memoised lookups only, then one with other frames among them
        await conversation.ask([codec.lookup(OWNED_LOW, 100 + i) for i in range(50)])
        mixed = [codec.lookup(OWNED_LOW, 200 + i) for i in range(30)]
        mixed.insert(10, encode(OWNED_LOW, 7, None, "swapped"))
        answers = await conversation.ask(mixed)
        assert len(answers) == 31
        assert count("pulsar_broker_lookup_count") == 82
        assert count("pulsar_broker_lookup_answers_total") == 82
        assert count("pulsar_broker_lookup_sum") > 0
    finally:
        await conversation.close()
        await server.stop(timeout=5)
        await source.close()


def test_memoised_answers_are_counted_in_the_lookup_metrics(tmp_path: Path) -> None:
    asyncio.run(counted(tmp_path / "cluster.json"))
