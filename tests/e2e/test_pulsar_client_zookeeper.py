"""The whole gateway (config, ZooKeeper source, binary sockets) with the real pulsar-client.

Cluster metadata lives in a real ZooKeeper; brokers are test peers (tests/broker_peer.py) on
127.0.0.x. A client that connects through a listener's socket must reach that listener's
address of the owning broker, and after ownership moves in ZooKeeper a new client must reach the
new owner: the watch path end to end.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from kazoo.client import KazooClient

from pulsar_lookup_gateway.gateway.process import Gateway
from pulsar_lookup_gateway.listeners.config.conf_file import parse_properties
from pulsar_lookup_gateway.listeners.config.model import validate_raw
from pulsar_lookup_gateway.lookup.selection import choose_listener
from pulsar_lookup_gateway.metadata_store.admin import encode, seed
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper
from pulsar_lookup_gateway.metadata_store.synthetic import cluster, topic_in_range
from tests.broker_peer import BrokerPeer
from tests.e2e.clients import in_thread, produce, reached
from tests.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.zookeeper]

BUNDLE = "0x00000000_0x40000000"
TOPIC = topic_in_range(0, 0x40000000)
PEERS = {"a-internal": "127.0.0.1", "a-external": "127.0.0.2",
         "b-internal": "127.0.0.3", "b-external": "127.0.0.4"}  # fmt: skip


def ownership(peers: dict[str, BrokerPeer], broker: str) -> dict[str, Any]:
    listeners = {
        "internal": {"brokerServiceUrl": peers[f"{broker}-internal"].url},
        "external": {"brokerServiceUrl": peers[f"{broker}-external"].url},
    }
    return {"nativeUrl": peers[f"{broker}-internal"].url, "advertisedListeners": listeners}


@dataclass
class World:
    peers: dict[str, BrokerPeer]
    gateway: Gateway
    admin: KazooClient

    def url(self, listener: str) -> str:
        host = "127.0.0.1" if listener == "internal" else "127.0.0.2"
        return f"pulsar://{host}:{self.gateway.port_of(listener, 'pulsar')}"


@pytest.fixture
async def world(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk_admin: KazooClient
) -> AsyncIterator[World]:
    async with contextlib.AsyncExitStack() as stack:
        peers = {
            name: await stack.enter_async_context(BrokerPeer(host, name=f"{name}-peer"))
            for name, host in PEERS.items()
        }
        nodes = cluster(brokers=2)
        nodes[f"/namespace/public/default/{BUNDLE}"] = ownership(peers, "a")
        seed(zk_admin, nodes)
        text = (
            f"metadataStoreUrl=zk:{zookeeper.connect_string}{zk_chroot}\n"
            "advertisedListeners=internal:pulsar://127.0.0.1:6650,external:pulsar://gw:6650\n"
            "bindAddresses=internal:pulsar://127.0.0.1:0,external:pulsar://127.0.0.2:0\n"
            "brokerServicePort=\nwebServicePort=\nkeepAliveIntervalSeconds=0\n"
        )
        gateway = Gateway(validate_raw(parse_properties(text, "e2e.conf")).config)
        await gateway.start()
        stack.push_async_callback(gateway.stop)
        yield World(peers, gateway, zk_admin)


async def test_each_listener_reaches_its_address_and_follows_an_ownership_move(
    world: World,
) -> None:
    for listener in ("internal", "external"):
        assert await in_thread(produce, world.url(listener), TOPIC) == TOPIC
        assert reached(world.peers[f"a-{listener}"], TOPIC)
    assert not world.peers["b-internal"].seen and not world.peers["b-external"].seen

    world.admin.set(f"/namespace/public/default/{BUNDLE}", encode(ownership(world.peers, "b")))

    async def moved() -> bool:
        internal = choose_listener(internal_listener=world.gateway.service.internal_listener)
        answer = await world.gateway.service.lookup(TOPIC, internal, "t")
        return answer.urls.service_url == world.peers["b-internal"].url

    await eventually(moved)
    for listener in ("internal", "external"):
        await in_thread(produce, world.url(listener), TOPIC)
        assert reached(world.peers[f"b-{listener}"], TOPIC)
