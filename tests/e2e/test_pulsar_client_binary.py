"""The real `pulsar-client` wheel against the gateway's binary sockets.

No Pulsar broker runs here: the advertised listener URLs in the snapshot point at test peers
(tests/broker_peer.py) on 127.0.0.x loopback addresses, which answer CONNECT and PRODUCER and
record what they saw. So a test can tell WHERE the client went after its lookup, and for which
topic. The pulsar client is synchronous; it runs in a thread while the event loop serves the
gateway and the peers. Every client call is bounded by its operation timeout and a wait_for.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulsar
import pytest
import trustme

from pulsar_lookup_gateway.listeners.binary import BinaryServer, BinarySettings
from pulsar_lookup_gateway.listeners.endpoints.addresses import Endpoint, Scheme
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.metadata_store.file import FileSource
from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
from pulsar_lookup_gateway.metadata_store.synthetic import cluster, topic_in_range
from pulsar_lookup_gateway.serving.service import LookupService
from tests.broker_peer import BrokerPeer
from tests.e2e.clients import (
    in_thread,
    partitions,
    produce,
    reached,
)

pytestmark = pytest.mark.e2e

OWNED_BUNDLES = ("0x00000000_0x40000000", "0x40000000_0x80000000", "0x80000000_0xc0000000")
OWNED_TOPIC = topic_in_range(0x00000000, 0xC0000000)  # owned by b1
UNOWNED_TOPIC = topic_in_range(0xC0000000, 0xFFFFFFFF)  # nobody: redirect to the leader, b2
PARTITIONED = "persistent://public/default/orders"

# Where each peer listens: the owner's listeners and default URL, and the leader's listeners.
PEER_HOSTS = {
    "internal": "127.0.0.1",
    "external": "127.0.0.2",
    "default": "127.0.0.3",
    "leader-internal": "127.0.0.4",
    "leader-external": "127.0.0.5",
}
# The gateway's sockets: the legacy untagged port, and one bind address per listener.
SOCKETS: dict[str, tuple[str, str | None]] = {
    "legacy": ("127.0.0.1", None),
    "internal": ("127.0.0.1", "internal"),
    "external": ("127.0.0.2", "external"),
}


def snapshot(peers: dict[str, BrokerPeer]) -> dict[str, Any]:
    """b1 owns three of the four bundles, b2 leads; every URL is a test peer's."""

    def listeners(internal: BrokerPeer, external: BrokerPeer) -> dict[str, Any]:
        return {
            "internal": {"brokerServiceUrl": internal.url},
            "external": {"brokerServiceUrl": external.url},
        }

    owner = listeners(peers["internal"], peers["external"])
    nodes = cluster(brokers=2, owned=dict.fromkeys(OWNED_BUNDLES, 1), leader=2)
    nodes["/loadbalance/brokers/b1:8080"].update(
        pulsarServiceUrl=peers["default"].url, advertisedListeners=owner
    )
    nodes["/loadbalance/brokers/b2:8080"]["advertisedListeners"] = listeners(
        peers["leader-internal"], peers["leader-external"]
    )
    for bundle in OWNED_BUNDLES:
        nodes[f"/namespace/public/default/{bundle}"].update(
            nativeUrl=peers["default"].url, advertisedListeners=owner
        )
    nodes["/admin/partitioned-topics/public/default/persistent/orders"] = {"partitions": 3}
    return nodes


@dataclass
class World:
    peers: dict[str, BrokerPeer]
    servers: dict[str, BinaryServer]
    service: LookupService

    def url(self, socket: str) -> str:
        return self.servers[socket].url

    def untouched(self, *names: str) -> bool:
        return all(not self.peers[name].seen for name in names)

    def sample(self, metric: str, **labels: str) -> float:
        value = self.service.metrics.registry.get_sample_value(metric, labels)
        return 0.0 if value is None else value


@contextlib.asynccontextmanager
async def running(*servers: BinaryServer) -> AsyncIterator[None]:
    try:
        for server in servers:
            await server.start()
        yield
    finally:
        for server in servers:
            await server.stop(timeout=5)  # a server that never started returns at once


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with contextlib.AsyncExitStack() as stack:
        peers = {
            name: await stack.enter_async_context(BrokerPeer(host, name=f"{name}-peer"))
            for name, host in PEER_HOSTS.items()
        }
        path = tmp_path / "cluster.json"
        write_snapshot(path, snapshot(peers))  # after the peers have bound their ports
        source = FileSource(path, poll_interval=60)
        await source.start()
        stack.push_async_callback(source.close)
        service = LookupService(source, internal_listener="internal")
        settings = BinarySettings(keep_alive_interval=0, handshake_timeout=10)
        servers = {
            name: BinaryServer(
                SocketSpec(Endpoint(Scheme.PULSAR, host, 0), listener, name), service, settings
            )
            for name, (host, listener) in SOCKETS.items()
        }
        await stack.enter_async_context(running(*servers.values()))
        yield World(peers, servers, service)


# (a) -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("socket", "other"), [("internal", "external"), ("external", "internal")])
async def test_a_producer_reaches_the_broker_address_of_its_sockets_listener(
    world: World, socket: str, other: str
) -> None:
    assert await in_thread(produce, world.url(socket), OWNED_TOPIC) == OWNED_TOPIC
    assert reached(world.peers[socket], OWNED_TOPIC)
    assert world.untouched(other, "default", "leader-internal", "leader-external")


# (b) -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("socket", "named"), [("internal", "external"), ("external", "internal")])
async def test_listener_name_on_the_client_overrides_the_socket(
    world: World, socket: str, named: str
) -> None:
    await in_thread(produce, world.url(socket), OWNED_TOPIC, listener_name=named)
    assert reached(world.peers[named], OWNED_TOPIC)
    assert world.untouched(socket, "default")
    assert world.sample(
        "pulsar_broker_lookup_answers_total",
        listener=named,
        chosen_by="explicit",
        protocol="binary",
    )


# (c) -------------------------------------------------------------------------------------------


async def test_an_untagged_socket_and_no_listener_answer_the_default_urls(world: World) -> None:
    await in_thread(produce, world.url("legacy"), OWNED_TOPIC)
    assert reached(world.peers["default"], OWNED_TOPIC)  # nativeUrl / pulsarServiceUrl
    assert world.untouched("internal", "external")
    assert world.sample(
        "pulsar_broker_lookup_answers_total",
        listener="internal",
        chosen_by="internal",
        protocol="binary",
    )


async def test_an_untagged_socket_honours_a_listener_name(world: World) -> None:
    await in_thread(produce, world.url("legacy"), OWNED_TOPIC, listener_name="external")
    assert reached(world.peers["external"], OWNED_TOPIC)
    assert world.untouched("internal", "default")


# (d) -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("socket", ["internal", "external"])
async def test_an_unowned_bundle_is_redirected_to_the_leaders_listener(
    world: World, socket: str
) -> None:
    await in_thread(produce, world.url(socket), UNOWNED_TOPIC)
    leader = world.peers[f"leader-{socket}"]
    lookups = [c for c in leader.seen if c.type_name == "LOOKUP"]
    assert [(c.topic, c.authoritative) for c in lookups] == [(UNOWNED_TOPIC, False)]
    assert reached(leader, UNOWNED_TOPIC)
    other = "external" if socket == "internal" else "internal"
    assert world.untouched("internal", "external", "default", f"leader-{other}")
    assert world.sample(
        "pulsar_broker_lookup_redirects_total",
        listener=socket,
        chosen_by="socket",
        protocol="binary",
    )


# (e) -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("socket", ["legacy", "external"])
async def test_get_topic_partitions_lists_every_partition(world: World, socket: str) -> None:
    assert await in_thread(partitions, world.url(socket), PARTITIONED) == [
        f"{PARTITIONED}-partition-{i}" for i in range(3)
    ]
    assert await in_thread(partitions, world.url(socket), OWNED_TOPIC) == [OWNED_TOPIC]


# (f) -------------------------------------------------------------------------------------------


async def test_an_unknown_listener_name_ends_in_a_client_error(world: World) -> None:
    """The gateway answers ServiceNotReady "the broker do not have nope listener"; the C++
    client treats that as retryable and keeps looking up until its operation timeout, then
    fails: an error, not a hang."""
    with pytest.raises(pulsar.PulsarException):
        await in_thread(
            produce,
            world.url("external"),
            OWNED_TOPIC,
            listener_name="nope",
            timeout=2,
        )
    assert world.sample(
        "pulsar_broker_lookup_failures_total",
        listener="nope",
        chosen_by="explicit",
        protocol="binary",
        error="ServiceNotReady",
    )
    assert world.untouched(*PEER_HOSTS)


async def test_the_listener_name_the_client_does_not_retry_fails_at_once(world: World) -> None:
    """The C++ client stops retrying when the message says "the broker do not have test
    listener" (it matches that exact text): then the error is a ConnectError, not a timeout."""
    with pytest.raises(pulsar.ConnectError):
        await in_thread(produce, world.url("internal"), OWNED_TOPIC, listener_name="test")
    assert world.sample(
        "pulsar_broker_lookup_failures_total",
        listener="test",
        chosen_by="explicit",
        protocol="binary",
        error="ServiceNotReady",
    ) == pytest.approx(1.0)


# pulsar+ssl --------------------------------------------------------------------------------


async def test_a_pulsar_ssl_socket_answers_the_listeners_tls_url(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "127.0.0.2")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server_ctx)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    async with BrokerPeer("127.0.0.2", name="tls-peer", ssl_context=server_ctx) as peer:
        nodes = cluster(brokers=1, owned=dict.fromkeys(OWNED_BUNDLES, 1))
        tls_only = {"external": {"brokerServiceUrlTls": peer.url}}  # a TLS-only listener
        nodes["/loadbalance/brokers/b1:8080"]["advertisedListeners"] = tls_only
        for bundle in OWNED_BUNDLES:
            nodes[f"/namespace/public/default/{bundle}"]["advertisedListeners"] = tls_only
        path = tmp_path / "cluster.json"
        write_snapshot(path, nodes)
        source = FileSource(path, poll_interval=60)
        await source.start()
        try:
            server = BinaryServer(
                SocketSpec(Endpoint(Scheme.PULSAR_SSL, "127.0.0.1", 0), "external", "tls"),
                LookupService(source, internal_listener="external"),
                BinarySettings(keep_alive_interval=0, handshake_timeout=10),
                server_ctx,
            )
            async with running(server):
                assert server.url.startswith("pulsar+ssl://127.0.0.1:")
                await in_thread(
                    produce, server.url, OWNED_TOPIC, tls_trust_certs_file_path=str(ca_file)
                )
            assert reached(peer, OWNED_TOPIC)
        finally:
            await source.close()
