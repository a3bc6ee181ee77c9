"""Bad input against a running binary server: random, truncated and oversize frames.

The server runs on its own event loop in a thread for the whole module; every example opens a
fresh connection, sends its bytes, half-closes, and reads until the server closes. After each
example a second, well-behaved connection (open for the whole module) must still answer a lookup,
and whatever the server sent on the bad connection must be well-formed frames.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pulsar_lookup_gateway.listeners.binary import BinaryServer, BinarySettings
from pulsar_lookup_gateway.listeners.endpoints.addresses import Endpoint, Scheme
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import BaseCommand, FrameDecoder, LookupType
from pulsar_lookup_gateway.metadata_store.file import FileSource
from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
from pulsar_lookup_gateway.metadata_store.synthetic import cluster, listeners_of, topic_in_range
from pulsar_lookup_gateway.serving.service import LookupService
from tests.broker_peer import frame_of, raw_command

HOST = "127.0.0.1"
MAX_FRAME = 4096
IO_TIMEOUT = 10.0
TOPIC = topic_in_range(0, 0x40000000)
EXPECTED_URL = listeners_of(1)["external"]["brokerServiceUrl"]
ANSWER_TYPES = {
    BaseCommand.CONNECTED,
    BaseCommand.LOOKUP_RESPONSE,
    BaseCommand.PARTITIONED_METADATA_RESPONSE,
    BaseCommand.PONG,
    BaseCommand.ERROR,
}
FUZZ = settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)


class _Errors(logging.Handler):
    """Collects ERROR records of the server: an internal error is a bug, whatever the input."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@dataclass
class RunningServer:
    port: int
    good: socket.socket
    errors: _Errors
    decoder: FrameDecoder = field(default_factory=FrameDecoder)
    request_id: int = 0

    def receive(self) -> BaseCommand:
        for _ in range(100):
            command = self.decoder.next_command()
            if command is not None:
                assert isinstance(command, BaseCommand)
                return command
            data = self.good.recv(65536)  # bounded by the socket timeout
            assert data, "the server closed the well-behaved connection"
            self.decoder.feed(data)
        raise AssertionError("no complete frame")

    def assert_alive(self) -> None:
        """The well-behaved connection still gets its lookups answered."""
        self.request_id += 1
        self.good.sendall(codec.lookup(TOPIC, self.request_id))
        command = self.receive()
        body = command.lookupTopicResponse
        assert (body.request_id, body.response) == (self.request_id, LookupType.Connect)
        assert body.brokerServiceUrl == EXPECTED_URL
        assert not self.errors.records, [r.getMessage() for r in self.errors.records]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    path: Path = tmp_path_factory.mktemp("fuzz") / "cluster.json"
    write_snapshot(path, cluster(brokers=2, owned={"0x00000000_0x40000000": 1}))
    errors = _Errors()
    logger = logging.getLogger("pulsar_lookup_gateway.listeners.binary")
    logger.addHandler(errors)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="fuzzed-server", daemon=True)
    thread.start()
    source = FileSource(path, poll_interval=60)
    spec = SocketSpec(Endpoint(Scheme.PULSAR, HOST, 0), "external", "fuzz")
    binary = BinaryServer(
        spec,
        LookupService(source, internal_listener="internal"),
        BinarySettings(
            max_frame_size=MAX_FRAME, max_connections=0, keep_alive_interval=0, handshake_timeout=5
        ),
    )

    async def start() -> None:
        await source.start()
        await binary.start()

    async def stop() -> None:
        await binary.stop(timeout=5)
        await source.close()

    try:
        asyncio.run_coroutine_threadsafe(start(), loop).result(IO_TIMEOUT)
        good = socket.create_connection((HOST, binary.port), timeout=IO_TIMEOUT)
        good.sendall(codec.connect("fuzz-good-client", 21))
        running = RunningServer(binary.port, good, errors)
        assert running.receive().type == BaseCommand.CONNECTED
        yield running
        good.close()
    finally:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), loop).result(IO_TIMEOUT)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(IO_TIMEOUT)
        loop.close()
        logger.removeHandler(errors)


def exchange(port: int, data: bytes, *, connect_first: bool) -> bytes | None:
    """Send ``data`` on a fresh connection, half-close, read until the server closes.
    None when the server reset the connection (then what it sent may be lost)."""
    with socket.create_connection((HOST, port), timeout=IO_TIMEOUT) as sock:
        try:
            if connect_first:
                sock.sendall(codec.connect("fuzz-client", 21))
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            return None  # the server already closed this connection: fine
        received = bytearray()
        try:
            while chunk := sock.recv(65536):  # the socket timeout bounds every wait
                received += chunk
        except ConnectionResetError:
            return None
        return bytes(received)


def assert_well_formed(received: bytes | None) -> None:
    if received is None:
        return
    decoder = FrameDecoder()
    decoder.feed(received)
    while (command := decoder.next_command()) is not None:
        assert isinstance(command, BaseCommand)
        assert command.type in ANSWER_TYPES, BaseCommand.Type.Name(command.type)
    assert decoder.buffered_size == 0, "the server sent a truncated frame"


def valid_frames() -> st.SearchStrategy[bytes]:
    topics = st.one_of(st.just(TOPIC), st.text(max_size=40))
    ids = st.integers(0, 2**64 - 1)
    return st.one_of(
        st.builds(lambda v: codec.connect("c", v), st.integers(-(2**31), 2**31 - 1)),
        st.builds(lambda t, i: codec.lookup(t, i), topics, ids),
        st.builds(lambda t, i, name: codec.lookup(t, i, False, name), topics, ids, st.text()),
        st.builds(lambda t, i: codec.partitioned_metadata(t, i), topics, ids),
        st.just(codec.ping()),
        st.just(codec.pong()),
        st.builds(raw_command, st.integers(0, 200), st.none() | st.binary(max_size=64)),
        st.builds(frame_of, st.binary(max_size=64)),
    )


@FUZZ
@given(data=st.binary(max_size=2048), connect_first=st.booleans())
def test_random_bytes(server: RunningServer, data: bytes, connect_first: bool) -> None:
    assert_well_formed(exchange(server.port, data, connect_first=connect_first))
    server.assert_alive()


@FUZZ
@given(
    frames=st.lists(valid_frames(), min_size=1, max_size=8),
    garbage=st.lists(st.binary(max_size=16), max_size=3),
    connect_first=st.booleans(),
)
def test_sequences_of_frames_and_garbage(
    server: RunningServer, frames: list[bytes], garbage: list[bytes], connect_first: bool
) -> None:
    data = b"".join(frames) + b"".join(garbage)
    assert_well_formed(exchange(server.port, data, connect_first=connect_first))
    server.assert_alive()


@FUZZ
@given(frames=st.lists(valid_frames(), min_size=1, max_size=4), cut=st.integers(1, 2**16))
def test_truncated_frames(server: RunningServer, frames: list[bytes], cut: int) -> None:
    data = b"".join(frames)
    data = data[: max(len(data) - cut % len(data), 1)]  # always cut something off
    assert_well_formed(exchange(server.port, data, connect_first=True))
    server.assert_alive()


@FUZZ
@given(
    total_size=st.integers(MAX_FRAME - 3, 2**32 - 1),
    cmd_size=st.integers(0, 2**32 - 1),
    body=st.binary(max_size=256),
    connect_first=st.booleans(),
)
def test_oversize_frames(
    server: RunningServer, total_size: int, cmd_size: int, body: bytes, connect_first: bool
) -> None:
    data = struct.pack(">II", total_size, cmd_size) + body
    received = exchange(server.port, data, connect_first=connect_first)
    assert_well_formed(received)
    if received is not None:  # refused at once with an ERROR naming the limit
        decoder = FrameDecoder()
        decoder.feed(received)
        last = None
        while (command := decoder.next_command()) is not None:
            last = command
        assert isinstance(last, BaseCommand) and last.type == BaseCommand.ERROR
        assert "exceeds the limit" in last.error.message
    server.assert_alive()


# Type numbers whose body our .proto decodes (field number == type number), and `type` itself.
_DECODED_FIELDS = {f.number for f in BaseCommand.DESCRIPTOR.fields}


@FUZZ
@given(type_number=st.integers(0, 2**32 - 1), body=st.binary(max_size=128))
def test_commands_of_any_type(server: RunningServer, type_number: int, body: bytes) -> None:
    """A well-framed command of any type after CONNECT. One whose body we do not decode is
    refused with ERROR and the connection keeps answering; others may be protocol errors."""
    data = raw_command(type_number, body) + codec.lookup(TOPIC, 7)
    received = exchange(server.port, data, connect_first=True)
    assert_well_formed(received)
    if 2 <= type_number < 2**29 and type_number not in _DECODED_FIELDS:
        assert received is not None
        decoder = FrameDecoder()
        decoder.feed(received)
        answers = []
        while (command := decoder.next_command()) is not None:
            assert isinstance(command, BaseCommand)
            answers.append(command)
        assert [c.type for c in answers] == [
            BaseCommand.CONNECTED,
            BaseCommand.ERROR,
            BaseCommand.LOOKUP_RESPONSE,
        ]
        assert answers[1].error.error == codec.ServerError.NotAllowedError
        assert answers[2].lookupTopicResponse.request_id == 7
    server.assert_alive()
