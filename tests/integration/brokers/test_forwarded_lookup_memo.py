"""A forwarded lookup's answer is kept only until the gateway's own view of its bundle changes
(issue 40), on a real ZooKeeper: the broker that takes the bundle writes its ownership node,
the bundle is unloaded and taken by another broker, and the next client of that bundle reaches
the new owner, not the one a kept answer named (it is kept up to 30 s otherwise)."""

from __future__ import annotations

import asyncio
from typing import Any

from kazoo.client import KazooClient

from pulsar_lookup_gateway.gateway.process import Gateway
from pulsar_lookup_gateway.lookup.bundles import topic_hash
from pulsar_lookup_gateway.lookup.resolve import ResponseKind
from pulsar_lookup_gateway.lookup.selection import ChoiceSource, ListenerChoice
from pulsar_lookup_gateway.metadata_store.admin import seed
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper
from pulsar_lookup_gateway.metadata_store.synthetic import topic_in_range
from tests.broker_peer import zookeeper_owner
from tests.e2e.clients import in_thread, produce
from tests.gateways import config_from, running
from tests.one_bind_brokers import MODULAR, OneBindBroker, OneBindCluster

FIRST = "0x00000000_0x40000000"
TOPICS = [
    topic_in_range(0, 0x40000000),
    next(t for n in range(1000) if topic_hash(t := f"persistent://public/default/u{n}") < 2**30),
]
EXTERNAL = ListenerChoice("external", ChoiceSource.SOCKET)
WAIT = 20.0


def ownership(broker: OneBindBroker) -> dict[str, Any]:
    return {
        "nativeUrl": broker.bind.url,
        "brokerId": broker.broker_id,
        "advertisedListeners": {
            "internal": {"brokerServiceUrl": broker.bind.url},
            "external": {"brokerServiceUrl": broker.external.url},
        },
    }


async def shown(gateway: Gateway, kind: ResponseKind) -> bool:
    """Wait (bounded) until the gateway's metadata answers the bundle with `kind`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while loop.time() < deadline:
        answer = await gateway.service.lookup(TOPICS[0], EXTERNAL, "test", forward=False)
        if answer.response is kind:
            return True
        await asyncio.sleep(0.05)
    return False


async def test_a_kept_answer_is_forgotten_when_the_bundle_changes_hands(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk_admin: KazooClient
) -> None:
    brokers = OneBindCluster(load_manager=MODULAR, leader=2, assignee=1)
    async with brokers.running():
        b1, b2 = brokers.broker(1), brokers.broker(2)
        b1.bind.take_ownership = zookeeper_owner(zk_admin, ownership(b1))
        seed(zk_admin, brokers.snapshot())
        conf = (
            f"metadataStoreUrl=zk:{zookeeper.connect_string}{zk_chroot}\n"
            "advertisedListeners=internal:pulsar://127.0.0.1:16650,"
            "external:pulsar://127.0.0.2:16650\n"
            "internalListenerName=internal\n"
            "bindAddresses=external:pulsar://127.0.0.2:0\nbrokerServicePort=\nwebServicePort=\n"
        )
        async with running(config_from(conf)) as gateway:
            url = f"pulsar://127.0.0.2:{gateway.port_of('external', 'pulsar')}"
            await in_thread(produce, url, TOPICS[0])
            assert await shown(gateway, ResponseKind.CONNECT)  # b1's node reached the view
            # The bundle is unloaded; b2 takes it when asked next.
            b1.bind.take_ownership = None
            b2.bind.take_ownership = zookeeper_owner(zk_admin, ownership(b2))
            brokers.assignee = 2
            await asyncio.to_thread(zk_admin.delete, f"/namespace/public/default/{FIRST}")
            assert await shown(gateway, ResponseKind.REDIRECT)
            await in_thread(produce, url, TOPICS[1])  # another topic: not a client back
    assert b1.external.producer_topics() == [TOPICS[0]]
    assert b2.external.producer_topics() == [TOPICS[1]]
