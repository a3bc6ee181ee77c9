"""Attacks on binary connections: memory held before authentication, connection-slot lockout,
odd protocol versions. Bounded in count and time; figures printed (RELIABILITY.md)."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from pulsar_lookup_gateway.listeners.binary.settings import PRE_CONNECT_MAX_FRAME
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import BaseCommand
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper
from pulsar_lookup_gateway.metadata_store.synthetic import cluster, topic_in_range
from tests.broker_peer import RawClient
from tests.neighbours import refusals
from tests.reliability.child_gateway import MIB, ChildGateway
from tests.reliability.harness import binary_port, gateway_on
from tests.waiting import eventually

pytestmark = pytest.mark.zookeeper

NODES = cluster(owned={"0x00000000_0x40000000": 1})
KNOWN = topic_in_range(0, 0x40000000)


@pytest.fixture(scope="module")
def zookeeper_here() -> Iterator[EmbeddedZooKeeper]:
    with EmbeddedZooKeeper() as server:
        yield server


async def open_from(port: int, source: str) -> RawClient:
    """A connection whose client address is `source` (a 127.x address)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    return RawClient(reader, writer)


async def test_a_stranger_cannot_make_the_gateway_buffer_large_frames(tmp_path: Path) -> None:
    """The gateway's peak memory, in a child process, while 200 connections each announce a
    4 MiB frame before CONNECT and send 1 MiB of it. Its cost was their reads: ~120 KiB each,
    kept by the failed frame decoder (its buffer, and its failure's traceback) until the
    connection object went; without the connections' bodies the peak grows ~2 MiB."""
    connections, claimed, sent = 200, 4 * 1024 * 1024, 1024 * 1024
    with ChildGateway(tmp_path, NODES) as gateway:
        async with await RawClient.open("127.0.0.1", gateway.port) as warm:
            await warm.handshake()
        before = gateway.resident()
        gateway.reset_peak()
        clients = [await RawClient.open("127.0.0.1", gateway.port) for _ in range(connections)]
        closed = 0
        for client in clients:
            client.send(struct.pack(">II", claimed - 4, claimed - 8) + b"\0" * sent)
        for client in clients:
            closed += await client.closed(timeout=10)
            await client.close()
        grown = gateway.peak() - before
        async with await RawClient.open("127.0.0.1", gateway.port) as legit:
            await legit.handshake()  # a real client is not affected
    print(f"\n{connections} x {claimed >> 20} MiB pre-CONNECT frames: {closed} closed, "
          f"gateway peak RSS grew {grown / MIB:.1f} MiB")  # fmt: skip
    assert closed == connections
    # ~0.6 MiB; 51 MiB while the failed decoder kept the reads (~235 MiB before the frame cap)
    assert grown < 8 * MIB


async def test_connect_may_not_exceed_the_pre_connect_frame_cap(
    zookeeper_here: EmbeddedZooKeeper,
) -> None:
    async with gateway_on(zookeeper_here, NODES) as gateway:
        port = binary_port(gateway)
        async with await RawClient.open("127.0.0.1", port) as big:
            big.send(codec.connect("x" * PRE_CONNECT_MAX_FRAME, 21))
            assert await big.closed()
        async with await RawClient.open("127.0.0.1", port) as fits:
            # A token of 32 KiB (far beyond a real JWT) still fits.
            fits.send(codec.connect("c", 21, auth_method_name="none", auth_data=b"t" * 32768))
            assert (await fits.expect()).type == BaseCommand.CONNECTED
            # After CONNECTED the frame cap is maxMessageSize's again: a 100 KB lookup is read.
            (answer,) = [await fits.lookup("persistent://public/default/" + "z" * 100_000)]
            assert answer.lookupTopicResponse.request_id == 1


async def test_connections_are_capped_per_client_address(
    zookeeper_here: EmbeddedZooKeeper,
) -> None:
    extra = "maxConnectionsPerIp=3\n"
    async with gateway_on(zookeeper_here, NODES, extra) as gateway:
        port = binary_port(gateway)
        held = [await open_from(port, "127.0.0.2") for _ in range(3)]
        for client in held:
            await client.handshake()
        refused = [await open_from(port, "127.0.0.2") for _ in range(20)]
        closed = sum([await client.closed(timeout=5) for client in refused])
        other = await open_from(port, "127.0.0.3")
        await other.handshake()  # another address is not affected
        await held[0].close()

        async def slot_freed() -> bool:
            again = await open_from(port, "127.0.0.2")
            try:
                again.send(codec.connect("again", 21))
                command = await again.receive(timeout=5)
                return isinstance(command, BaseCommand) and command.type == BaseCommand.CONNECTED
            finally:
                await again.close()

        await eventually(slot_freed)
        registry = gateway.service.metrics.registry
        counted = refusals(registry, "internal", "max-connections-per-ip")
        for client in [*held[1:], *refused, other]:
            await client.close()
    print(f"\nmaxConnectionsPerIp=3: {closed} of 20 extra connections from one address closed")
    assert closed == 20
    assert counted >= 20  # (slot_freed's tries may be refused too before a slot frees)


async def test_idle_strangers_cannot_lock_clients_out_for_longer_than_the_deadline(
    zookeeper_here: EmbeddedZooKeeper,
) -> None:
    extra = "brokerMaxConnections=20\nconnectionHandshakeTimeoutSeconds=1\n"
    async with gateway_on(zookeeper_here, NODES, extra) as gateway:
        port = binary_port(gateway)
        idle = [await RawClient.open("127.0.0.1", port) for _ in range(20)]  # never CONNECT
        locked_out = await RawClient.open("127.0.0.1", port)
        assert await locked_out.closed(timeout=5)  # every slot is taken
        # At the handshake deadline the silent connections are closed, and slots free up.
        closed = sum([await client.closed(timeout=10) for client in idle])
        async with await RawClient.open("127.0.0.1", port) as legit:
            await legit.handshake()
            assert (await legit.lookup(KNOWN)).lookupTopicResponse.brokerServiceUrl
        registry = gateway.service.metrics.registry
        counted = {
            reason: refusals(registry, "internal", reason)
            for reason in ("max-connections", "handshake-timeout")
        }
        for client in [*idle, locked_out]:
            await client.close()
    print(f"\nbrokerMaxConnections=20: {closed} idle pre-CONNECT connections closed at 1 s")
    assert closed == 20
    assert counted == {"max-connections": 1, "handshake-timeout": 20}


@pytest.mark.parametrize(("claimed", "answered"), [(-5, 0), (0, 0), (10_000, None)])
async def test_protocol_versions_are_clamped_and_every_client_is_pinged(
    zookeeper_here: EmbeddedZooKeeper, claimed: int, answered: int | None
) -> None:
    extra = "keepAliveIntervalSeconds=1\n"
    async with (
        gateway_on(zookeeper_here, NODES, extra) as gateway,
        await RawClient.open("127.0.0.1", binary_port(gateway)) as client,
    ):
        client.send(codec.connect("odd", claimed))
        connected = await client.expect()
        assert connected.type == BaseCommand.CONNECTED
        version = connected.connected.protocol_version
        if answered is None:  # a version from the future: ours
            assert 0 < version < claimed
        else:
            assert version == answered
        # Pinged whatever its version; a client that never answers is dropped.
        assert (await client.expect(timeout=5)).type == BaseCommand.PING
        assert await client.closed(timeout=5)
