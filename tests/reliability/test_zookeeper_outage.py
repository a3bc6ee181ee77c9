"""ZooKeeper killed under steady binary and HTTP lookup load, then restarted.

The session-expiry half (the cache is rebuilt and never serves a stale owner) is
tests/integration/metadata_store/test_zk_source.py::test_session_loss_drops_the_cache_and_rebuilds_it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator

import aiohttp
import pytest

from pulsar_lookup_gateway.gateway.process import Gateway
from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import (
    CommandLookupTopicResponse,
    ServerError,
)
from pulsar_lookup_gateway.lookup.errors import NodeNotLoaded
from pulsar_lookup_gateway.lookup.selection import ListenerChoice, choose_listener
from pulsar_lookup_gateway.metadata_store.admin import connected, encode, seed
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper
from pulsar_lookup_gateway.metadata_store.synthetic import (
    broker_id,
    cluster,
    ownership_node,
    topic_in_range,
)
from pulsar_lookup_gateway.metadata_store.zookeeper import ZooKeeperSource
from tests.broker_peer import RawClient
from tests.reliability.harness import (
    Tally,
    binary_load,
    binary_port,
    gateway_on,
    http_load,
    http_url,
    lookup_urls,
    scale,
)
from tests.unreachable_brokers import unreachable, unreachable_node
from tests.waiting import eventually

pytestmark = pytest.mark.zookeeper

OWNED = {"0x00000000_0x40000000": 1, "0x40000000_0x80000000": 2, "0x80000000_0xc0000000": 3}
CACHED = [topic_in_range(0, 0x40000000), topic_in_range(0x40000000, 0x80000000)]


@pytest.fixture
def zookeeper_to_kill() -> Iterator[EmbeddedZooKeeper]:
    with EmbeddedZooKeeper() as server:
        yield server


def internal(gateway: Gateway) -> ListenerChoice:
    """The choice of a lookup that names no listener and comes from no socket."""
    return choose_listener(internal_listener=gateway.service.internal_listener)


async def ready_status(session: aiohttp.ClientSession, url: str) -> int:
    async with session.get(url) as response:
        return response.status


async def test_cached_answers_flow_while_zookeeper_is_down_and_recover_after(
    zookeeper_to_kill: EmbeddedZooKeeper,
) -> None:
    zk = zookeeper_to_kill
    nodes = unreachable(cluster(owned=OWNED))
    async with gateway_on(zk, nodes) as gateway, aiohttp.ClientSession() as http:
        port, ready = binary_port(gateway), http_url(gateway, "/ready")
        for topic in CACHED:  # warm the cache
            await gateway.service.lookup(topic, internal(gateway), "warm-up")
        assert await ready_status(http, ready) == 200
        # A namespace that appears after the gateway read every namespace ahead (on start):
        # the gateway hears of its tenant and reads nothing of it.
        with connected(zk.connect_string) as admin:
            seed(admin, {"/admin/policies/acme/never-read": {}})

        async def tenant_heard() -> bool:
            try:
                return "acme" in gateway.service.source.view.children("/admin/policies")
            except NodeNotLoaded:
                return False

        await eventually(tenant_heard)

        stop = asyncio.Event()
        loads = [asyncio.create_task(binary_load(port, CACHED, stop)) for _ in range(4)]
        loads += [
            asyncio.create_task(http_load(http, lookup_urls(gateway, CACHED), stop))
            for _ in range(2)
        ]
        await asyncio.sleep(0.3)
        zk.kill()

        async def not_ready() -> bool:
            return await ready_status(http, ready) == 503

        await eventually(not_ready)
        await asyncio.sleep(scale(1.0, 10.0))  # load keeps running against the cache

        # A lookup that needs a node the cache never read fails, and fails fast.
        uncached = "persistent://acme/never-read/t"  # exists, but nothing of acme was read
        async with await RawClient.open("127.0.0.1", port) as client:
            await client.handshake()
            started = time.perf_counter()
            reply = await asyncio.wait_for(client.lookup(uncached), 1.0)
            fail_ms = (time.perf_counter() - started) * 1000
        body = reply.lookupTopicResponse
        assert body.response == CommandLookupTopicResponse.Failed
        assert body.error == ServerError.ServiceNotReady
        url = lookup_urls(gateway, [uncached])[0]
        async with http.get(url) as response:
            assert response.status == 503
            assert "reason" in await response.json()

        zk.start()

        async def recovered() -> bool:
            return await ready_status(http, ready) == 200

        await eventually(recovered, timeout=30)
        with connected(zk.connect_string) as admin:
            moved_at = time.perf_counter()
            owner = unreachable_node(ownership_node(3))
            admin.set("/namespace/public/default/0x00000000_0x40000000", encode(owner))

        async def change_served() -> bool:
            answer = await gateway.service.lookup(CACHED[0], internal(gateway), "t")
            return answer.broker_id == broker_id(3)

        await eventually(change_served)
        change_ms = (time.perf_counter() - moved_at) * 1000
        stop.set()
        tally = Tally()
        for result in await asyncio.gather(*loads):
            tally.merge(result)

    assert tally.answers > 0
    assert not tally.failures, tally.failures  # cached topics never failed, ZooKeeper or not
    print(
        f"\nZooKeeper outage: {tally.answers} cached answers, 0 failures, p99 "
        f"{tally.p99_ms():.1f} ms; unread node failed in {fail_ms:.1f} ms; "
        f"change after restart served in {change_ms:.0f} ms"
    )


async def test_an_outage_is_logged_once_then_reminded_not_once_per_retry(
    zookeeper_to_kill: EmbeddedZooKeeper, caplog: pytest.LogCaptureFixture
) -> None:
    zk = zookeeper_to_kill
    async with gateway_on(zk, cluster(owned=OWNED)) as gateway:
        source = gateway.source
        assert isinstance(source, ZooKeeperSource)
        source.outage.reminder_seconds = 1.0  # 30 s in production: a test cannot wait that long
        caplog.clear()
        with caplog.at_level(logging.INFO):
            zk.kill()
            down_for = 4.5
            await asyncio.sleep(down_for)
            lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
            began = [r for r in lines if "unreachable (" in r.getMessage()]
            reminders = [r for r in lines if "still unreachable after" in r.getMessage()]
            from_kazoo = [r for r in caplog.records if r.name.startswith("kazoo")]
            zk.start()
            await eventually(lambda: _ready(source), timeout=40)
    print(
        f"\nZooKeeper down {down_for:.1f}s: {len(began)} outage line, {len(reminders)} "
        f"reminders, {len(from_kazoo)} kazoo lines (kazoo alone logs ~2 a second)"
    )
    assert len(began) == 1
    assert zk.connect_string in began[0].getMessage()
    assert 2 <= len(reminders) <= 5
    assert all(zk.connect_string in r.getMessage() for r in reminders)
    assert len(from_kazoo) <= 2
    assert any("connected again after" in r.getMessage() for r in caplog.records)


async def _ready(source: ZooKeeperSource) -> bool:
    return source.status().ready
