"""Attacks on names and reads: each test replays one, bounded in count and time, and prints
what it measured (RELIABILITY.md, "Hostile input").

- dot-segment tenants (`persistent://../ns/t`) must not reach ZooKeeper, nor stall anything;
- lookups waiting on one stuck read (ZooKeeper paused) cost O(N), and /health stays live;
- made-up tenants with authorization on leave no ZooKeeper watch;
- long names are refused, and the answer cache is bounded by bytes.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import pytest

from pulsar_lookup_gateway.gateway.process import Gateway
from pulsar_lookup_gateway.http_api import topic_paths
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import (
    BaseCommand,
    CommandLookupTopicResponse,
    ServerError,
)
from pulsar_lookup_gateway.lookup.topics import MAX_TOPIC_NAME_BYTES
from pulsar_lookup_gateway.metadata_store.admin import connected, encode
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper
from pulsar_lookup_gateway.metadata_store.synthetic import cluster, ownership_node, topic_in_range
from pulsar_lookup_gateway.serving import memo as answer_memo
from tests.broker_peer import RawClient
from tests.reliability.child_gateway import MIB, ChildGateway
from tests.reliability.harness import binary_port, gateway_on, http_url, scale
from tests.waiting import eventually

pytestmark = pytest.mark.zookeeper

OWNED = {"0x00000000_0x40000000": 1, "0x40000000_0x80000000": 2}
# Every bundle owned: a lookup is answered from the metadata alone (an unowned bundle's is
# forwarded to its leader, a fictional broker in these tests).
ALL_OWNED = {**OWNED, "0x80000000_0xc0000000": 3, "0xc0000000_0xffffffff": 1}
KNOWN = topic_in_range(0, 0x40000000)
SECRET = b"hostile-input-test-secret-of-32-bytes!!"
AUTH = (
    "authenticationEnabled=true\nauthenticationProviders=token\n"
    f"tokenSecretKey=data:;base64,{base64.b64encode(SECRET).decode()}\n"
    "authorizationEnabled=true\nsuperUserRoles=root\n"
)


@pytest.fixture
def private_zookeeper() -> Iterator[EmbeddedZooKeeper]:
    """A server of this test's own: its watch count and pauses concern nobody else."""
    with EmbeddedZooKeeper() as server:
        yield server


async def pipelined(client: RawClient, topics: list[str], first_id: int = 1) -> list[Any]:
    """Send every LOOKUP at once, then read the answers (in whatever order they come)."""
    client.send(b"".join(codec.lookup(t, first_id + n) for n, t in enumerate(topics)))
    answers = []
    for _ in topics:
        command = await client.expect(timeout=30)
        assert command.type == BaseCommand.LOOKUP_RESPONSE, command
        answers.append(command.lookupTopicResponse)
    return answers


def errors(answers: list[Any]) -> set[str]:
    return {
        ServerError.Name(a.error) if a.response == CommandLookupTopicResponse.Failed else "answer"
        for a in answers
    }


async def test_dot_segment_tenants_are_refused_without_a_read(
    private_zookeeper: EmbeddedZooKeeper,
) -> None:
    count = int(scale(5000, 20000))
    async with gateway_on(private_zookeeper, cluster(owned=OWNED)) as gateway:
        reads_before = gateway.source.reads  # type: ignore[attr-defined]
        async with await RawClient.open("127.0.0.1", binary_port(gateway)) as client:
            await client.handshake()
            names = ["persistent://../ns/t", "persistent://./ns/t", "persistent://public/../t"]
            started = time.perf_counter()
            answers = await pipelined(client, [names[n % 3] for n in range(count)])
            elapsed = time.perf_counter() - started
            assert errors(answers) == {"InvalidTopicName"}
            # The connection still answers real lookups.
            (after,) = await pipelined(client, [KNOWN], count + 1)
            assert errors([after]) == {"answer"}
        reads = gateway.source.reads - reads_before  # type: ignore[attr-defined]
    print(f"\n{count} dot-segment lookups answered in {elapsed:.2f}s, {reads} ZooKeeper reads")
    assert reads <= 10  # the real lookup's few nodes; none for the dot segments


async def test_lookups_waiting_on_a_stuck_read_end_together_and_health_stays_live(
    private_zookeeper: EmbeddedZooKeeper,
) -> None:
    per_connection, connections = 1000, int(scale(4, 16))
    nodes = cluster(owned=OWNED)
    stuck = [f"persistent://public/stuck/t{n}" for n in range(per_connection)]
    async with gateway_on(private_zookeeper, nodes) as gateway, aiohttp.ClientSession() as http:
        # public/stuck appears after the gateway read every namespace ahead (on start): its
        # policies and ownership are read when a lookup needs them.
        with connected(private_zookeeper.connect_string) as admin:
            policies = encode(nodes["/admin/policies/public/default"])
            admin.create("/admin/policies/public/stuck", policies)
            for bundle in ALL_OWNED:  # (owned: once read, answered from the metadata alone)
                node = encode(ownership_node(1))
                admin.create(f"/namespace/public/stuck/{bundle}", node, makepath=True)
        port = binary_port(gateway)
        clients = [await RawClient.open("127.0.0.1", port) for _ in range(connections)]
        try:
            for client in clients:
                await client.handshake()
                # Warm the tenant's children list: only public/stuck's policies are unread.
                assert errors(await pipelined(client, [KNOWN])) == {"answer"}
            reads_before = gateway.source.reads  # type: ignore[attr-defined]
            private_zookeeper.pause()
            started = time.perf_counter()
            waiting = [asyncio.ensure_future(pipelined(c, stuck, 10)) for c in clients]
            await eventually(lambda: _pending_at_least(gateway, per_connection * connections))
            async with http.get(http_url(gateway, "/health")) as health:
                assert health.status == 200
            # /health answered while every lookup was still waiting on the stuck read.
            assert gateway.service.admission.pending == per_connection * connections
            answers = [a for batch in await asyncio.gather(*waiting) for a in batch]
            elapsed = time.perf_counter() - started
            reads = gateway.source.reads - reads_before  # type: ignore[attr-defined]
            assert errors(answers) == {"ServiceNotReady"}
        finally:
            private_zookeeper.resume()
            for client in clients:
                await client.close()
        total = per_connection * connections
        print(f"\n{total} lookups on one stuck read: all answered in {elapsed:.2f}s, {reads} read")
        assert reads == 1  # one read for them all, failed once by its own deadline

        # ZooKeeper back: the same names resolve (nothing stayed stuck).
        async def resolves() -> bool:
            async with await RawClient.open("127.0.0.1", port) as client:
                await client.handshake()
                return errors(await pipelined(client, stuck[:1])) == {"answer"}

        await eventually(resolves, timeout=40)


async def _pending_at_least(gateway: Gateway, count: int) -> bool:
    return gateway.service.admission.pending >= count


async def test_made_up_tenants_leave_no_watch_with_authorization_on(
    private_zookeeper: EmbeddedZooKeeper,
) -> None:
    count = int(scale(3000, 20000))
    alice = jwt.encode({"sub": "alice"}, SECRET, algorithm="HS256")
    async with (
        gateway_on(private_zookeeper, cluster(owned=OWNED), AUTH) as gateway,
        await RawClient.open("127.0.0.1", binary_port(gateway)) as client,
    ):
        client.send(
            codec.connect("hostile", 21, auth_method_name="token", auth_data=alice.encode())
        )
        assert (await client.expect()).type == BaseCommand.CONNECTED
        # Warm up with one real name, so the lists every lookup needs are read and watched.
        assert errors(await pipelined(client, [KNOWN])) == {"AuthorizationError"}
        watches_before = private_zookeeper.watch_count()
        paths_before = len(gateway.source.view.known_paths())
        ghosts = [f"persistent://ghost{n}/ns/t" for n in range(count)]
        answers = await pipelined(client, ghosts, 10)
        assert errors(answers) == {"AuthorizationError"}
        watches_after = private_zookeeper.watch_count()
        paths_after = len(gateway.source.view.known_paths())
    print(
        f"\n{count} made-up tenants: ZooKeeper watches {watches_before} -> {watches_after}, "
        f"cached paths {paths_before} -> {paths_after}"
    )
    assert watches_after == watches_before
    assert paths_after == paths_before


async def test_long_names_are_refused_and_cost_no_memory(tmp_path: Path) -> None:
    """Measured in a child gateway (tests/reliability/child_gateway.py): in this process, what
    other tests and the client's own 10 MB batches left behind moved the figure by tens of MiB."""
    count, size = int(scale(800, 3000)), 100_000
    with ChildGateway(tmp_path, cluster(owned=OWNED)) as gateway:
        async with await RawClient.open("127.0.0.1", gateway.port) as client:
            await client.handshake()
            assert errors(await pipelined(client, [KNOWN])) == {"answer"}  # warm
            before = gateway.resident()
            gateway.reset_peak()
            for start in range(0, count, 100):
                names = [f"persistent://public/default/{n:06d}" + "x" * size for n in range(100)]
                answers = await pipelined(client, names, start + 1)
                assert errors(answers) == {"InvalidTopicName"}
                assert all(len(a.message) < 400 for a in answers)  # the name is not echoed whole
            kept, peak = gateway.resident() - before, gateway.peak() - before
    print(
        f"\n{count} lookups of {size // 1000} KB names: the gateway kept {kept / MIB:.1f} MiB "
        f"(peak +{peak / MIB:.1f} MiB)"
    )
    assert kept < 8 * MIB  # was ~240 MiB: every name was cached with its answer
    assert peak < 64 * MIB  # one read of 100 names (10 MB) at a time, not all of them


async def test_the_answer_memo_is_bounded_by_bytes(
    private_zookeeper: EmbeddedZooKeeper, monkeypatch: pytest.MonkeyPatch
) -> None:
    budget = 2 * 1024 * 1024
    monkeypatch.setattr(answer_memo, "MAX_BYTES", budget)
    count = int(scale(2000, 20000))
    longest = MAX_TOPIC_NAME_BYTES - len("persistent://public/default/") - 6
    most = 0
    async with (
        gateway_on(private_zookeeper, cluster(owned=ALL_OWNED)) as gateway,
        await RawClient.open("127.0.0.1", binary_port(gateway)) as client,
    ):
        await client.handshake()
        for start in range(0, count, 100):
            names = [
                f"persistent://public/default/{start + n:06d}" + "y" * longest for n in range(100)
            ]
            assert errors(await pipelined(client, names, start + 1)) == {"answer"}
            most = max(most, gateway.service.cached_bytes)
    names_sent = count * MAX_TOPIC_NAME_BYTES
    print(f"\n{names_sent / 2**20:.1f} MiB of valid names: the memo held at most {most} bytes")
    assert 0 < most <= budget


async def test_long_http_paths_are_answered_but_not_cached(
    private_zookeeper: EmbeddedZooKeeper,
) -> None:
    count = int(scale(500, 5000))
    async with (
        gateway_on(private_zookeeper, cluster(owned=ALL_OWNED)) as gateway,
        aiohttp.ClientSession() as http,
    ):
        cached_before = topic_paths._topic_of_path.cache_info().currsize
        statuses = set()
        for n in range(count):
            url = http_url(
                gateway, f"/lookup/v2/topic/persistent/public/default/{n:05d}{'q' * 3000}"
            )
            async with http.get(url, allow_redirects=False) as reply:
                statuses.add(reply.status)
        cached_after = topic_paths._topic_of_path.cache_info().currsize
        async with http.get(http_url(gateway, "/lookup/v2/topic/persistent/public/default/short")):
            pass  # a short path is cached: the cache is in use, just not for long paths
        assert topic_paths._topic_of_path.cache_info().currsize == cached_after + 1
    print(
        f"\n{count} HTTP lookups of 3 KB paths: parsed-path cache {cached_before} -> {cached_after}"
    )
    assert statuses <= {200, 307}
    assert cached_after == cached_before
