"""`/ready` says ready only when every socket of the process accepts (issue 42).

A binary socket makes its bundle answers ahead before it accepts (listeners.binary.bundles_ahead:
up to 30 s on a big cluster), and the gateway starts its sockets in `bindAddresses` order: with
an HTTP socket listed first, `/ready` used to answer 200 while the binary socket did not accept
yet, and a load balancer sent clients to a port that refused them. Real ZooKeeper, real sockets,
a cluster with enough bundles that making them ahead takes many turns of the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from kazoo.client import KazooClient

from pulsar_lookup_gateway.gateway.process import Gateway
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.lookup.bundles import NamespaceBundles
from pulsar_lookup_gateway.metadata_store.admin import seed
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper, free_port
from pulsar_lookup_gateway.metadata_store.synthetic import broker_id
from tests.gateways import config_from

HOST = "127.0.0.1"
#: 4 x 4,096 bundles: making them ahead yields to the loop ~80 times (200 bundles a turn)
NAMESPACES = [f"ready/ns-{n}" for n in range(4)]
BUNDLES = NamespaceBundles.equal(4096)
WAIT = 60.0  # the deadline of every wait here (a loaded machine), never a measured time


def cluster() -> dict[str, Any]:
    """One broker (at an address where nothing listens: no lookup here reaches it) and the
    namespaces' bundle boundaries; no bundle is owned (none is looked up)."""
    broker = {
        "webServiceUrl": "http://127.0.0.1:9",
        "pulsarServiceUrl": "pulsar://127.0.0.1:9",
        "advertisedListeners": {},
    }
    nodes: dict[str, Any] = {
        f"/loadbalance/brokers/{broker_id(1)}": broker,
        "/loadbalance/leader": {"brokerId": broker_id(1)},
    }
    boundaries = [f"0x{b:08x}" for b in BUNDLES.boundaries]
    for namespace in NAMESPACES:
        nodes[f"/admin/policies/{namespace}"] = {"bundles": {"boundaries": boundaries}}
    return nodes


async def ready_status(port: int) -> int | None:
    """The status of GET /ready on `port`; None when nothing accepts there yet."""
    try:
        reader, writer = await asyncio.open_connection(HOST, port)
    except OSError:
        return None
    try:
        writer.write(b"GET /ready HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n")
        head = await reader.readuntil(b"\r\n")
        return int(head.split()[1])
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def binary_connect(port: int) -> codec.BaseCommand:
    """CONNECT on the binary socket; the answer (OSError when nothing accepts)."""
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        writer.write(codec.connect("readiness-test", 21))
        decoder = codec.FrameDecoder()
        while (command := decoder.next_command()) is None:
            data = await reader.read(65536)
            assert data, "the gateway closed the connection"
            decoder.feed(data)
        assert isinstance(command, codec.BaseCommand)
        return command
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def test_ready_waits_for_the_binary_socket_listed_after_the_http_one(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk_admin: KazooClient
) -> None:
    seed(zk_admin, cluster())
    http, binary = free_port(), free_port()
    config = config_from(
        f"metadataStoreUrl=zk:{zookeeper.connect_string}{zk_chroot}\n"
        f"advertisedListeners=internal:pulsar://{HOST}:{binary},internal:http://{HOST}:{http}\n"
        # the HTTP socket first: it accepts while the binary one still makes its answers
        f"bindAddresses=internal:http://{HOST}:{http},internal:pulsar://{HOST}:{binary}\n"
        "brokerServicePort=\nwebServicePort=\n"
    )
    gateway = Gateway(config)
    starting = asyncio.create_task(gateway.start())
    try:
        statuses: list[int] = []
        async with asyncio.timeout(WAIT):
            while (status := await ready_status(http)) != 200:
                if status is not None:
                    statuses.append(status)
                await asyncio.sleep(0)
            # /ready said ready: the binary socket accepts at once (no retry)
            connected = await binary_connect(binary)
        assert connected.type == codec.BaseCommand.CONNECTED
        # (the HTTP socket answered while the binary one was not accepting yet: the window
        # this test is about was there, and /ready said not ready in it)
        assert statuses and set(statuses) == {503}, statuses
        await starting
        async with asyncio.timeout(WAIT):
            assert await ready_status(http) == 200
    finally:
        if not starting.done():
            starting.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await starting
        await gateway.stop()
