"""The binary protocol server on real sockets (127.0.0.1), answering from snapshot files."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from pulsar_lookup_gateway.gateway import factories
from pulsar_lookup_gateway.listeners.binary import (
    PROTOCOL_VERSION,
    BinaryServer,
    BinarySettings,
)
from pulsar_lookup_gateway.listeners.binary import requests as binary_requests
from pulsar_lookup_gateway.listeners.config.model import GatewayConfig
from pulsar_lookup_gateway.listeners.endpoints.addresses import Endpoint, Scheme
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import BaseCommand, LookupType, ServerError
from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import (
    CommandPartitionedTopicMetadataResponse,
)
from pulsar_lookup_gateway.listeners.protocol.wire import varint_field
from pulsar_lookup_gateway.lookup.source import MetadataSource, SourceStatus
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.metadata_store.file import FileSource
from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
from pulsar_lookup_gateway.metadata_store.synthetic import (
    cluster,
    listeners_of,
    ownership_node,
    topic_in_range,
)
from pulsar_lookup_gateway.serving.service import LookupService
from tests.broker_peer import RawClient, frame_of, producer_command, raw_command
from tests.tls_pair import server_and_client

HOST = "127.0.0.1"
WAIT = 10.0

LOW, MID, HIGH, TOP = (
    "0x00000000_0x40000000",
    "0x40000000_0x80000000",
    "0x80000000_0xc0000000",
    "0xc0000000_0xffffffff",
)
TOPIC_B1 = topic_in_range(0x00000000, 0x40000000)  # owned by b1
TOPIC_B2 = topic_in_range(0x40000000, 0x80000000)  # owned by b2
TOPIC_UNLOADING = topic_in_range(0x80000000, 0xC0000000)  # b3, being unloaded
TOPIC_UNOWNED = topic_in_range(0xC0000000, 0xFFFFFFFF)  # nobody: redirect to the leader (b1)
NATIVE_B1 = "pulsar://native-1:6650"  # b1's default URL, distinct from its internal listener's

B1_EXTERNAL = listeners_of(1)["external"]
B1_INTERNAL = listeners_of(1)["internal"]
B2_EXTERNAL = listeners_of(2)["external"]

SETTINGS = BinarySettings(
    max_frame_size=64 * 1024, max_connections=0, keep_alive_interval=0, handshake_timeout=WAIT
)


def cluster_nodes() -> dict[str, Any]:
    nodes = cluster(brokers=3, owned={LOW: 1, MID: 2}, leader=1)
    nodes[f"/namespace/public/default/{LOW}"]["nativeUrl"] = NATIVE_B1
    nodes[f"/namespace/public/default/{HIGH}"] = ownership_node(3, disabled=True)
    nodes["/admin/partitioned-topics/public/default/persistent/orders"] = {"partitions": 4}
    return nodes


@pytest.fixture
async def source(tmp_path: Path) -> AsyncIterator[FileSource]:
    path = tmp_path / "cluster.json"
    write_snapshot(path, cluster_nodes())
    src = FileSource(path, poll_interval=60)
    await src.start()
    yield src
    await src.close()


class GatedSource:
    """A test double of the metadata *store*: a partial view of a snapshot in which reading any
    of the ``slow`` paths waits until ``gate`` is set (a slow ZooKeeper read)."""

    def __init__(self, nodes: Mapping[str, Any], slow: Iterable[str]) -> None:
        self.nodes = dict(nodes)
        self.slow = set(slow)
        self.gate = asyncio.Event()
        self.waiting = 0
        self._view = ClusterView(complete=False)
        for path, content in self.nodes.items():
            if path not in self.slow:
                self._view.put_json(path, content)
        # Every parent's children, as ZooKeeper lists them (existence is decided from them).
        children: dict[str, set[str]] = {}
        for path in self.nodes:
            while path.count("/") > 1:
                parent, _, name = path.rpartition("/")
                children.setdefault(parent, set()).add(name)
                path = parent
        self.children = children
        for parent, names in children.items():
            self._view.set_children(parent, names)

    @property
    def view(self) -> ClusterView:
        return self._view

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def fetch(self, path: str) -> None:
        if path in self.slow:
            self.waiting += 1
            try:
                await self.gate.wait()
            finally:
                self.waiting -= 1
        if path.endswith("/"):  # a children list; a parent that does not exist lists none
            self._view.set_children(path[:-1], self.children.get(path[:-1], set()))
        elif path in self.nodes:
            self._view.put_json(path, self.nodes[path])
        else:
            self._view.put_absent(path)

    def status(self) -> SourceStatus:
        return SourceStatus(True, "")

    async def until_waiting(self, count: int) -> None:
        for _ in range(1000):
            if self.waiting >= count:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"{count} reads never started waiting ({self.waiting} did)")


SLOW_PATH = f"/namespace/public/default/{MID}"  # TOPIC_B2's owner


@pytest.fixture
def gated() -> GatedSource:
    return GatedSource(cluster_nodes(), [SLOW_PATH])


@contextlib.asynccontextmanager
async def serving(
    source: MetadataSource,
    *,
    listener: str | None = "external",
    settings: BinarySettings = SETTINGS,
    max_concurrent: int = 50_000,
    ssl_context: ssl.SSLContext | None = None,
) -> AsyncIterator[BinaryServer]:
    service = LookupService(source, internal_listener="internal", max_concurrent=max_concurrent)
    scheme = Scheme.PULSAR_SSL if ssl_context else Scheme.PULSAR
    spec = SocketSpec(Endpoint(scheme, HOST, 0), listener, f"test socket {listener}")
    server = BinaryServer(spec, service, settings, ssl_context)
    await server.start()
    try:
        yield server
    finally:
        await server.stop(timeout=5)


@contextlib.asynccontextmanager
async def client(server: BinaryServer, *, handshake: bool = True) -> AsyncIterator[RawClient]:
    raw = await RawClient.open(HOST, server.port)
    try:
        if handshake:
            await raw.handshake()
        yield raw
    finally:
        await raw.close()


def lookup_body(command: BaseCommand) -> Any:
    assert command.type == BaseCommand.LOOKUP_RESPONSE
    return command.lookupTopicResponse


# --- handshake ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("client_version", "agreed"), [(25, PROTOCOL_VERSION), (10, 10), (0, 0)])
async def test_connected_negotiates_the_lower_protocol_version(
    source: FileSource, client_version: int, agreed: int
) -> None:
    async with serving(source) as server, client(server, handshake=False) as raw:
        connected = (await raw.handshake(client_version)).connected
        assert connected.protocol_version == agreed
        assert connected.server_version.startswith("pulsar-lookup-gateway-")
        assert connected.max_message_size == 64 * 1024 - 10 * 1024


def test_settings_from_config() -> None:
    config = GatewayConfig.model_validate(
        {
            "metadataStoreUrl": "file:/tmp/x.json",
            "advertisedListeners": "internal:pulsar://10.0.0.1:6650,external:pulsar://gw:6650",
            "maxMessageSize": 1048576,
            "brokerMaxConnections": 7,
            "keepAliveIntervalSeconds": 12,
            "connectionHandshakeTimeoutSeconds": 3,
        }
    )
    external = factories.binary_settings(config, "external")
    assert external == BinarySettings(
        max_frame_size=1048576 + 10240,
        max_connections=7,
        keep_alive_interval=12.0,
        handshake_timeout=3.0,
        max_message_size=1048576,
    )
    assert external.announced_message_size == 1048576


async def test_logs_one_line_per_socket(
    source: FileSource, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pulsar_lookup_gateway.listeners.binary")
    async with serving(source) as server:
        expected = f"listening on pulsar://127.0.0.1:{server.port} listener=external tls=no"
        assert [r.getMessage() for r in caplog.records].count(expected) == 1
    async with serving(source, listener=None) as server:
        expected = f"listening on pulsar://127.0.0.1:{server.port} listener=- tls=no"
        assert expected in [r.getMessage() for r in caplog.records]


def test_a_tls_socket_needs_a_context(source: FileSource) -> None:
    service = LookupService(source)
    tls_spec = SocketSpec(Endpoint(Scheme.PULSAR_SSL, HOST, 0), None, "x")
    with pytest.raises(ValueError, match="SSL context"):
        BinaryServer(tls_spec, service, SETTINGS)
    http_spec = SocketSpec(Endpoint(Scheme.HTTP, HOST, 0), None, "y")
    with pytest.raises(ValueError, match="not a pulsar"):
        BinaryServer(http_spec, service, SETTINGS)


async def test_lookups_over_tls(source: FileSource, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pulsar_lookup_gateway.listeners.binary")
    server_ctx, client_ctx = server_and_client(HOST)
    async with serving(source, ssl_context=server_ctx) as server:
        reader, writer = await asyncio.open_connection(HOST, server.port, ssl=client_ctx)
        async with RawClient(reader, writer) as raw:
            await raw.handshake()
            body = lookup_body(await raw.lookup(TOPIC_B1))
            assert body.brokerServiceUrlTls == B1_EXTERNAL["brokerServiceUrlTls"]
        assert f"listening on pulsar+ssl://127.0.0.1:{server.port} listener=external tls=yes" in [
            r.getMessage() for r in caplog.records
        ]


# --- lookups -----------------------------------------------------------------------------------


async def test_owned_bundle_answers_connect_with_both_urls(source: FileSource) -> None:
    async with serving(source) as server, client(server) as raw:
        body = lookup_body(await raw.lookup(TOPIC_B1, request_id=42))
        assert body.request_id == 42
        assert body.response == LookupType.Connect
        assert body.authoritative is True
        assert body.brokerServiceUrl == B1_EXTERNAL["brokerServiceUrl"]
        assert body.brokerServiceUrlTls == B1_EXTERNAL["brokerServiceUrlTls"]
        assert body.proxy_through_service_url is False
        assert not body.HasField("error")

        other = lookup_body(await raw.lookup(TOPIC_B2, request_id=43))
        assert other.brokerServiceUrl == B2_EXTERNAL["brokerServiceUrl"]


async def test_unowned_bundle_redirects_to_the_leader(source: FileSource) -> None:
    async with serving(source) as server, client(server) as raw:
        body = lookup_body(await raw.lookup(TOPIC_UNOWNED))
        assert body.response == LookupType.Redirect
        assert body.authoritative is False
        assert body.brokerServiceUrl == B1_EXTERNAL["brokerServiceUrl"]  # b1 leads


@pytest.mark.parametrize(
    ("socket", "explicit", "url"),
    [
        ("external", None, B1_EXTERNAL["brokerServiceUrl"]),
        ("external", "internal", B1_INTERNAL["brokerServiceUrl"]),
        ("external", "  ", B1_EXTERNAL["brokerServiceUrl"]),  # blank means absent
        ("internal", None, B1_INTERNAL["brokerServiceUrl"]),
        (None, None, NATIVE_B1),  # untagged socket, no name: the brokers' default URLs
        (None, "", NATIVE_B1),
        (None, "external", B1_EXTERNAL["brokerServiceUrl"]),
    ],
)
async def test_listener_choice(
    source: FileSource, socket: str | None, explicit: str | None, url: str
) -> None:
    async with serving(source, listener=socket) as server, client(server) as raw:
        body = lookup_body(await raw.lookup(TOPIC_B1, listener=explicit))
        assert (body.response, body.brokerServiceUrl) == (LookupType.Connect, url)


async def test_a_connect_that_asks_to_be_proxied_gets_an_error_and_is_closed(
    source: FileSource,
) -> None:
    # A client told to proxy through its service URL would send its producers here next: the
    # gateway says at once that it relays nothing, instead of a CONNECTED that leads nowhere.
    async with serving(source) as server, client(server, handshake=False) as raw:
        raw.send(codec.connect("raw-test-client", 21, proxy_to_broker_url="pulsar://b1:6650"))
        answer = await raw.expect()
        assert answer.type == BaseCommand.ERROR
        assert answer.error.error == ServerError.NotAllowedError
        assert "does not proxy" in answer.error.message
        assert await raw.closed()
    async with serving(source) as server, client(server, handshake=False) as raw:
        raw.send(codec.connect("raw-test-client", 21, proxy_to_broker_url=""))
        assert (await raw.expect()).type == BaseCommand.CONNECTED  # blank: not asked


@pytest.mark.parametrize(
    ("topic", "listener", "error", "message"),
    [
        (TOPIC_B1, "nope", ServerError.ServiceNotReady, "the broker do not have nope listener"),
        # master: TopicLookupBase.lookupTopicAsync, a 404 of the namespace check
        ("persistent://ghost/ns/t", None, ServerError.TopicNotFound, "Namespace not found"),
        ("persistent://only-tenant", None, ServerError.InvalidTopicName, "Invalid topic name"),
        (TOPIC_UNLOADING, None, ServerError.MetadataError, "is being unloaded"),
    ],
)
async def test_lookup_failures_are_answered_failed(
    source: FileSource, topic: str, listener: str | None, error: int, message: str
) -> None:
    async with serving(source) as server, client(server) as raw:
        body = lookup_body(await raw.lookup(topic, request_id=9, listener=listener))
        assert body.request_id == 9
        assert body.response == LookupType.Failed
        assert body.error == error
        assert message in body.message
        assert not body.HasField("brokerServiceUrl")
        # the connection stays usable
        assert lookup_body(await raw.lookup(TOPIC_B1, 10)).response == LookupType.Connect


async def test_a_listener_name_that_breaks_the_rule_is_an_unknown_listener_and_never_logged_raw(
    source: FileSource, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pulsar_lookup_gateway.serving.service")
    hostile = "evil\nlistener=internal chosen_by=socket\x1b[2J" + "x" * 60_000
    async with serving(source) as server, client(server) as raw:
        unknown = lookup_body(await raw.lookup(TOPIC_B1, request_id=3, listener="nope"))
        refused = lookup_body(await raw.lookup(TOPIC_B1, request_id=4, listener=hostile))
        # the same answer as a listener the brokers do not advertise: code and wording
        assert (refused.response, refused.error) == (unknown.response, unknown.error)
        assert refused.message.startswith("the broker do not have evil\\nlistener=")
        assert refused.message.endswith(" listener") and len(refused.message) < 200
        assert lookup_body(await raw.lookup(TOPIC_B1, 5)).response == LookupType.Connect
    lines = [r.getMessage() for r in caplog.records if "ServiceNotReady" in r.getMessage()]
    assert len(lines) == 2, lines
    hostile_line = lines[1]
    assert "\n" not in hostile_line and "\x1b" not in hostile_line
    assert len(hostile_line) < 1000


async def test_an_invalid_topic_is_refused_before_the_listener_name_it_comes_with(
    source: FileSource,
) -> None:
    """As a broker, and as the HTTP routes: the topic name is checked first."""
    async with serving(source) as server, client(server) as raw:
        body = lookup_body(await raw.lookup("persistent://pub lic", request_id=6, listener="a\nb"))
        assert (body.response, body.error) == (LookupType.Failed, ServerError.InvalidTopicName)
        assert body.request_id == 6


async def test_no_broker_registered(tmp_path: Path) -> None:
    path = tmp_path / "empty.json"
    write_snapshot(path, cluster(brokers=0, leader=None))
    src = FileSource(path, poll_interval=60)
    await src.start()
    try:
        async with serving(src) as server, client(server) as raw:
            body = lookup_body(await raw.lookup(TOPIC_B1))
            assert (body.response, body.error) == (LookupType.Failed, ServerError.ServiceNotReady)
            assert body.message == "No broker was available"
    finally:
        await src.close()


@pytest.mark.parametrize(
    ("topic", "partitions"),
    [("orders", 4), ("persistent://public/default/orders", 4), (TOPIC_B1, 0)],
)
async def test_partitioned_metadata(source: FileSource, topic: str, partitions: int) -> None:
    async with serving(source) as server, client(server) as raw:
        raw.send(codec.partitioned_metadata(topic, 5))
        reply = await raw.expect()
        assert reply.type == BaseCommand.PARTITIONED_METADATA_RESPONSE
        body = reply.partitionMetadataResponse
        assert body.request_id == 5
        assert body.response == CommandPartitionedTopicMetadataResponse.Success
        assert body.partitions == partitions


async def test_partitioned_metadata_failure(source: FileSource) -> None:
    async with serving(source) as server, client(server) as raw:
        raw.send(codec.partitioned_metadata("persistent://ghost/ns/t", 6))
        body = (await raw.expect()).partitionMetadataResponse
        assert body.request_id == 6
        assert body.response == CommandPartitionedTopicMetadataResponse.Failed
        # master: ServerCnx.handlePartitionMetadataRequest answers a 404 as TopicNotFound
        assert body.error == ServerError.TopicNotFound
        assert body.message == "Namespace not found"


# --- commands that are not lookups -------------------------------------------------------------


async def test_ping_is_answered_with_pong(source: FileSource) -> None:
    async with serving(source) as server, client(server) as raw:
        raw.send(codec.ping())
        assert (await raw.expect()).type == BaseCommand.PONG
        raw.send(codec.pong())  # an unsolicited PONG is accepted silently
        assert lookup_body(await raw.lookup(TOPIC_B1)).response == LookupType.Connect


@pytest.mark.parametrize(
    "first",
    [
        codec.lookup(TOPIC_B1, 1),
        codec.ping(),
        codec.partitioned_metadata("orders", 2),
        raw_command(99),
        producer_command(TOPIC_B1, 1, 3),
    ],
    ids=["lookup", "ping", "partitioned-metadata", "unknown-type", "producer"],
)
async def test_a_command_before_connect_closes_the_connection(
    source: FileSource, first: bytes
) -> None:
    async with serving(source) as server, client(server, handshake=False) as raw:
        raw.send(first)
        assert await raw.receive() is None


async def test_a_second_connect_closes_the_connection(source: FileSource) -> None:
    async with serving(source) as server, client(server) as raw:
        raw.send(codec.connect("again", 21))
        assert await raw.receive() is None


async def test_unsupported_commands_are_refused_and_the_connection_stays(
    source: FileSource,
) -> None:
    # Topic-list watchers are not served (CONNECTED says supports_topic_watchers=false).
    watch = raw_command(BaseCommand.WATCH_TOPIC_LIST, varint_field(1, 31) + varint_field(2, 5))
    subscribe_body = (
        b"\x0a\x01t" + b"\x12\x01s" + varint_field(3, 0) + varint_field(4, 1) + varint_field(5, 32)
    )
    async with serving(source) as server, client(server) as raw:
        for frame, request_id, named in [
            (producer_command(TOPIC_B1, 1, 77), 77, "PRODUCER"),
            (raw_command(BaseCommand.SUBSCRIBE, subscribe_body), 32, "SUBSCRIBE"),
            (watch, 31, "WATCH_TOPIC_LIST"),
            (raw_command(99), 0, "99"),
            (raw_command(BaseCommand.SEEK), 0, "SEEK"),  # no body: no request id to read
        ]:
            raw.send(frame)
            reply = await raw.expect()
            assert reply.type == BaseCommand.ERROR, named
            assert reply.error.request_id == request_id
            assert reply.error.error == ServerError.NotAllowedError
            assert named in reply.error.message
        assert lookup_body(await raw.lookup(TOPIC_B1)).response == LookupType.Connect


async def test_a_malformed_frame_closes_only_that_connection(source: FileSource) -> None:
    async with serving(source) as server, client(server) as good, client(server) as bad:
        bad.send(b"\x00\x00\x00\x08\x00\x00\x00\x04\xff\xff\xff\xff")  # not a BaseCommand
        reply = await bad.receive()
        assert isinstance(reply, BaseCommand) and reply.type == BaseCommand.ERROR
        assert "protocol error" in reply.error.message
        assert await bad.closed()
        assert lookup_body(await good.lookup(TOPIC_B1)).response == LookupType.Connect


async def test_an_oversize_frame_closes_the_connection(source: FileSource) -> None:
    async with serving(source) as server, client(server) as raw:
        raw.send((64 * 1024).to_bytes(4, "big"))  # frame of 64 KiB + 4 > the 64 KiB cap
        reply = await raw.receive()
        assert isinstance(reply, BaseCommand) and reply.type == BaseCommand.ERROR
        assert "exceeds the limit" in reply.error.message
        assert await raw.closed()


async def test_frames_split_at_every_byte_are_reassembled(source: FileSource) -> None:
    async with serving(source) as server, client(server) as raw:
        data = codec.lookup(TOPIC_B1, 1) + codec.partitioned_metadata("orders", 2)
        for i in range(len(data)):
            raw.send(data[i : i + 1])
            await raw.writer.drain()
        first, second = await raw.expect(), await raw.expect()
        assert first.lookupTopicResponse.response == LookupType.Connect
        assert second.partitionMetadataResponse.partitions == 4


# --- keep-alive, handshake timeout, connection limit --------------------------------------------


def quick(**changes: Any) -> BinarySettings:
    base = {
        "max_frame_size": 64 * 1024,
        "max_connections": 0,
        "keep_alive_interval": 0.0,
        "handshake_timeout": WAIT,
    }
    return BinarySettings(**{**base, **changes})


async def test_idle_clients_are_pinged_and_kept_while_they_answer(source: FileSource) -> None:
    settings = quick(keep_alive_interval=0.05)
    async with serving(source, settings=settings) as server, client(server) as raw:
        for _ in range(3):  # each PING answered: the next tick pings again, no drop
            assert (await raw.expect()).type == BaseCommand.PING
            raw.send(codec.pong())
        assert lookup_body(await raw.lookup(TOPIC_B1)).response == LookupType.Connect


async def test_a_client_that_does_not_answer_ping_is_dropped(source: FileSource) -> None:
    async with serving(source, settings=quick(keep_alive_interval=0.05)) as server:
        async with client(server) as dead:
            assert (await dead.expect()).type == BaseCommand.PING
            assert await dead.receive() is None  # never answered: dropped by the next tick
        async with client(server) as other:  # the server itself carries on
            other.answer_pings = True
            assert lookup_body(await other.lookup(TOPIC_B1)).response == LookupType.Connect


async def test_no_connect_within_the_handshake_timeout_closes(source: FileSource) -> None:
    async with serving(source, settings=quick(handshake_timeout=0.1)) as server:
        async with client(server, handshake=False) as silent:
            assert await silent.receive() is None
        async with client(server) as raw:  # connected in time: the timer no longer applies
            await asyncio.sleep(0.3)
            assert lookup_body(await raw.lookup(TOPIC_B1)).response == LookupType.Connect


async def test_connections_beyond_the_maximum_are_refused(source: FileSource) -> None:
    async with (
        serving(source, settings=quick(max_connections=2)) as server,
        client(server) as first,
        client(server) as second,
    ):
        async with client(server, handshake=False) as third:
            third.send(codec.connect("third", 21))
            assert await third.receive() is None
        for raw in (first, second):
            assert lookup_body(await raw.lookup(TOPIC_B1)).response == LookupType.Connect
        await second.close()
        for _ in range(500):
            if server.connection_count < 2:
                break
            await asyncio.sleep(0.01)
        async with client(server) as again:  # a slot is free again
            assert lookup_body(await again.lookup(TOPIC_B1)).response == LookupType.Connect


# --- concurrency: pipelining, maxConcurrentLookupRequest, graceful stop -------------------------


async def test_lookups_are_pipelined(gated: GatedSource) -> None:
    async with serving(gated) as server, client(server) as raw:
        raw.send(codec.lookup(TOPIC_B2, 1))  # waits on a slow read
        raw.send(codec.lookup(TOPIC_B1, 2))
        raw.send(codec.partitioned_metadata("orders", 3))
        raw.send(codec.ping())
        first = [await raw.expect() for _ in range(3)]
        assert [c.type for c in first] == [
            BaseCommand.LOOKUP_RESPONSE,
            BaseCommand.PARTITIONED_METADATA_RESPONSE,
            BaseCommand.PONG,
        ]
        assert first[0].lookupTopicResponse.request_id == 2
        await gated.until_waiting(1)
        gated.gate.set()
        slow = lookup_body(await raw.expect())
        assert slow.request_id == 1
        assert (slow.response, slow.brokerServiceUrl) == (
            LookupType.Connect,
            B2_EXTERNAL["brokerServiceUrl"],
        )


async def test_a_connection_with_too_many_requests_waiting_is_not_read(
    gated: GatedSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(binary_requests, "MAX_IN_FLIGHT_PER_CONNECTION", 2)
    async with serving(gated) as server, client(server) as raw:
        raw.send(codec.lookup(TOPIC_B2, 1) + codec.lookup(TOPIC_B2, 2))
        await gated.until_waiting(2)
        raw.send(codec.lookup(TOPIC_B1, 3))  # fast, but not read while two requests wait
        await asyncio.sleep(0.1)  # time for a server that did read it to answer it first
        gated.gate.set()
        answered = [lookup_body(await raw.expect()).request_id for _ in range(3)]
        assert sorted(answered[:2]) == [1, 2] and answered[2] == 3


async def test_too_many_concurrent_lookups(gated: GatedSource) -> None:
    async with (
        serving(gated, max_concurrent=2) as server,
        client(server) as one,
        client(server) as two,
    ):
        one.send(codec.lookup(TOPIC_B2, 1))
        two.send(codec.lookup(TOPIC_B2, 2))
        await gated.until_waiting(2)
        refused = lookup_body(await one.lookup(TOPIC_B1, 3))
        assert (refused.response, refused.error) == (LookupType.Failed, ServerError.TooManyRequests)
        assert "maxConcurrentLookupRequest=2" in refused.message
        gated.gate.set()
        assert lookup_body(await one.expect()).response == LookupType.Connect
        assert lookup_body(await two.expect()).response == LookupType.Connect
        # below the cap again
        assert lookup_body(await two.lookup(TOPIC_B1, 4)).response == LookupType.Connect


async def test_memoised_lookups_obey_the_cap_too(gated: GatedSource) -> None:
    """A LOOKUP answered before (from the memo of warm answers) is refused like any other
    while maxConcurrentLookupRequest lookups are in flight: alone in a read, and behind
    another frame of the same read; and it is counted as a refused lookup."""
    async with (
        serving(gated, max_concurrent=2) as server,
        client(server) as one,
        client(server) as two,
    ):
        assert lookup_body(await one.lookup(TOPIC_B1, 1)).response == LookupType.Connect
        assert server.handlers.lookups.tables(server.socket_choice)[0]  # memoised
        one.send(codec.lookup(TOPIC_B2, 2))
        two.send(codec.lookup(TOPIC_B2, 3))
        await gated.until_waiting(2)
        refused = [lookup_body(await one.lookup(TOPIC_B1, 4))]
        one.send(codec.ping() + codec.lookup(TOPIC_B1, 5))
        assert (await one.expect()).type == BaseCommand.PONG
        refused.append(lookup_body(await one.expect()))
        assert [(body.request_id, body.error) for body in refused] == [
            (4, ServerError.TooManyRequests),
            (5, ServerError.TooManyRequests),
        ]
        labels = {
            "listener": "external",
            "chosen_by": "socket",
            "protocol": "binary",
            "error": "TooManyRequests",
        }
        registry = server.service.metrics.registry
        assert registry.get_sample_value("pulsar_broker_lookup_failures_total", labels) == 2
        gated.gate.set()
        assert lookup_body(await one.expect()).request_id == 2
        assert lookup_body(await two.expect()).request_id == 3
        # below the cap again: answered from the memo
        assert lookup_body(await one.lookup(TOPIC_B1, 6)).response == LookupType.Connect


async def test_a_client_that_leaves_mid_lookup_frees_its_slot(gated: GatedSource) -> None:
    async with serving(gated, max_concurrent=1) as server:
        async with client(server) as leaving:
            leaving.send(codec.lookup(TOPIC_B2, 1))
            await gated.until_waiting(1)
        for _ in range(500):  # the lookup is cancelled with its connection
            if gated.waiting == 0:
                break
            await asyncio.sleep(0.01)
        assert server.service.admission.pending == 0
        async with client(server) as raw:
            assert lookup_body(await raw.lookup(TOPIC_B1)).response == LookupType.Connect


async def connection_refused(port: int) -> bool:
    for _ in range(500):
        try:
            _, writer = await asyncio.open_connection(HOST, port)
        except (ConnectionRefusedError, ConnectionResetError):
            return True
        writer.close()
        await asyncio.sleep(0.01)
    return False


async def test_stop_finishes_lookups_in_flight(gated: GatedSource) -> None:
    async with serving(gated) as server, client(server) as raw:
        raw.send(codec.lookup(TOPIC_B2, 1))
        await gated.until_waiting(1)
        stopping = asyncio.create_task(server.stop(timeout=WAIT))
        assert await connection_refused(server.port)
        assert not stopping.done()
        gated.gate.set()
        answer = lookup_body(await raw.expect())
        assert (answer.request_id, answer.response) == (1, LookupType.Connect)
        assert await raw.receive() is None  # then the connection is closed
        await asyncio.wait_for(stopping, WAIT)


async def test_stop_gives_up_on_lookups_after_the_timeout(gated: GatedSource) -> None:
    async with serving(gated) as server, client(server) as raw:
        raw.send(codec.lookup(TOPIC_B2, 1))
        await gated.until_waiting(1)
        await asyncio.wait_for(server.stop(timeout=0.1), WAIT)
        assert await raw.receive() is None  # closed without an answer
        assert server.service.admission.pending == 0


async def test_frame_of_garbage_type_field_is_a_protocol_error(source: FileSource) -> None:
    async with serving(source) as server, client(server) as raw:
        raw.send(frame_of(b"\x08"))  # the type varint is cut short
        reply = await raw.receive()
        assert isinstance(reply, BaseCommand) and reply.type == BaseCommand.ERROR
        assert await raw.closed()
