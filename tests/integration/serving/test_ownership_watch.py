"""The ownership watch (`GET /lookup/v2/watch`) against a real ZooKeeper and gateway on
127.0.0.1: moves, deletes, registrations, generations (ZooKeeper's zxids, equal on two
gateways), listener choice, tokens, per-topic errors, limits, slow and hostile clients."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import json
import logging
import math
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import pytest
from kazoo.client import KazooClient

from pulsar_lookup_gateway.gateway.process import Gateway
from pulsar_lookup_gateway.http_api.watch import watches_for
from pulsar_lookup_gateway.metadata_store.admin import encode, seed
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper
from pulsar_lookup_gateway.metadata_store.synthetic import (
    broker_id,
    broker_node,
    cluster,
    ownership_node,
    topic_in_range,
)
from tests.gateways import config_from, running
from tests.integration.serving.watch_client import (
    FIRST,
    IN_FIRST,
    SECOND,
    WAIT,
    Watcher,
    client_frame,
    raw_stream,
    watching,
)

pytestmark = pytest.mark.zookeeper

IN_SECOND = topic_in_range(0x40000000, 0x80000000)
OWNERSHIP = f"/namespace/public/default/{FIRST}"
SECRET = bytes(range(32))


def config_text(connect: str, chroot: str, extra: str = "") -> str:
    return (
        f"metadataStoreUrl=zk:{connect}{chroot}\n"
        "advertisedListeners=internal:pulsar://127.0.0.1:6650,internal:http://127.0.0.1:8080,"
        "external:pulsar://127.0.0.2:6650,external:http://127.0.0.2:8080\n"
        "bindAddresses=internal:http://127.0.0.1:0,external:http://127.0.0.1:0\n"
        "brokerServicePort=\nwebServicePort=\n" + extra
    )


@pytest.fixture
def zk(zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk_admin: KazooClient) -> KazooClient:
    seed(zk_admin, cluster(brokers=2, owned={FIRST: 1, SECOND: 2}))
    return zk_admin


@pytest.fixture
async def gateway(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk: KazooClient
) -> AsyncIterator[Gateway]:
    async with running(config_from(config_text(zookeeper.connect_string, zk_chroot))) as gw:
        yield gw


def zxid(client: KazooClient, path: str, which: str = "mzxid") -> int:
    stat = client.exists(path)
    assert stat is not None
    return int(getattr(stat, which))


async def test_moves_and_deletes_are_pushed_with_zookeeper_generations(
    gateway: Gateway, zk: KazooClient
) -> None:
    port = gateway.port_of("external", "http")
    async with watching(port) as watcher:
        await watcher.subscribe(IN_FIRST, IN_SECOND)
        first = {(m := await watcher.next())["topic"]: m for _ in range(2)}
        assert first[IN_FIRST] == {
            "type": "owner",
            "topic": IN_FIRST,
            "generation": max(
                zxid(zk, OWNERSHIP), zxid(zk, f"/loadbalance/brokers/{broker_id(1)}", "czxid")
            ),
            "brokerUrl": "pulsar://b1.example.com:6650",
            "brokerUrlTls": "pulsar+ssl://b1.example.com:6651",
            "httpUrlTls": "https://b1.example.com:8443",  # (no httpUrl: the listener has none)
        }
        assert first[IN_SECOND]["brokerUrl"] == "pulsar://b2.example.com:6650"

        # The owner moves (its node rewritten): the new owner, dated by the write.
        zk.set(OWNERSHIP, encode(ownership_node(2)))
        moved = await watcher.about(IN_FIRST)
        assert moved["brokerUrl"] == "pulsar://b2.example.com:6650"
        assert moved["generation"] == zxid(zk, OWNERSHIP) > first[IN_FIRST]["generation"]

        # Unloaded (deleted): unowned, dated by the deletion (the parent's pzxid).
        zk.delete(OWNERSHIP)
        gone = await watcher.about(IN_FIRST)
        parent = zxid(zk, "/namespace/public/default", "pzxid")
        assert gone == {"type": "unowned", "topic": IN_FIRST, "generation": parent}
        assert parent > moved["generation"]

        # Owned again by broker 1.
        zk.create(OWNERSHIP, encode(ownership_node(1)), ephemeral=False)
        back = await watcher.about(IN_FIRST)
        assert back["brokerUrl"] == "pulsar://b1.example.com:6650"
        assert back["generation"] == zxid(zk, OWNERSHIP) > parent


async def test_the_owners_registration_going_and_coming_is_pushed_load_reports_are_not(
    gateway: Gateway, zk: KazooClient
) -> None:
    registration = f"/loadbalance/brokers/{broker_id(1)}"
    async with watching(gateway.port_of("external", "http")) as watcher:
        await watcher.subscribe(IN_FIRST, IN_SECOND)
        await watcher.next()
        await watcher.next()
        data, _ = zk.get(registration)
        zk.delete(registration)  # broker 1 is gone: nobody alive owns its bundle
        gone = await watcher.about(IN_FIRST)
        assert gone == {
            "type": "unowned",
            "topic": IN_FIRST,
            "generation": zxid(zk, "/loadbalance/brokers", "pzxid"),
        }
        zk.create(registration, data)  # and back
        back = await watcher.about(IN_FIRST)
        assert back["type"] == "owner"
        assert back["generation"] == zxid(zk, registration, "czxid") > gone["generation"]
        # A load report rewrites the registration: nothing to tell. The next message is
        # about the other topic, moved afterwards.
        zk.set(registration, encode(broker_node(1, usage=0.93)))
        zk.set(f"/namespace/public/default/{SECOND}", encode(ownership_node(1)))
        assert (await watcher.next())["topic"] == IN_SECOND


async def test_a_load_report_leaves_the_garbage_collector_on(
    gateway: Gateway, zk: KazooClient
) -> None:
    registration = f"/loadbalance/brokers/{broker_id(1)}"
    view = gateway.service.source.view
    loop = asyncio.get_running_loop()
    collecting: list[bool] = []
    heard = asyncio.Event()

    def after_the_watch(path: str) -> None:  # (observes after the watch, which came first)
        if path == registration:
            # once the watch looked at the write (its call_soon ran): is the collector on?
            loop.call_soon(loop.call_soon, look)

    def look() -> None:
        collecting.append(gc.isenabled())
        heard.set()

    async with watching(gateway.port_of("external", "http")) as watcher:
        await watcher.subscribe(IN_FIRST)
        await watcher.next()
        view.observe(after_the_watch)
        try:
            assert gc.isenabled()
            zk.set(registration, encode(broker_node(1, usage=0.93)))  # a load report
            await asyncio.wait_for(heard.wait(), WAIT)
            assert collecting == [True]
        finally:
            view.unobserve(after_the_watch)


async def test_two_gateways_and_a_restart_agree_on_generations(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk: KazooClient, gateway: Gateway
) -> None:
    config = config_from(config_text(zookeeper.connect_string, zk_chroot))
    async with watching(gateway.port_of("external", "http")) as one:
        await one.subscribe(IN_FIRST)
        await one.next()
        zk.set(OWNERSHIP, encode(ownership_node(2)))
        before = await one.about(IN_FIRST)
        # A second gateway, started after the move, dates the same state alike.
        async with (
            running(config) as other,
            watching(other.port_of("external", "http")) as two,
        ):
            await two.subscribe(IN_FIRST)
            assert await two.next() == before
            zk.delete(OWNERSHIP)
            assert await one.about(IN_FIRST) == await two.about(IN_FIRST)
            zk.create(OWNERSHIP, encode(ownership_node(1)))
            after = await one.about(IN_FIRST)
            assert after == await two.about(IN_FIRST)
            assert after["generation"] > before["generation"]


async def test_the_listener_is_chosen_as_for_a_lookup(gateway: Gateway) -> None:
    external, internal = gateway.port_of("external", "http"), gateway.port_of("internal", "http")
    cases = [
        (external, {}, "", "pulsar://b1.example.com:6650"),  # the socket's listener
        (internal, {}, "", "pulsar://10.0.0.1:6650"),
        (external, {"X-Pulsar-ListenerName": "internal"}, "", "pulsar://10.0.0.1:6650"),
        # the query wins over the header
        (
            internal,
            {"X-Pulsar-ListenerName": "internal"},
            "?listenerName=external",
            "pulsar://b1.example.com:6650",
        ),
    ]
    for port, headers, query, broker_url in cases:
        async with watching(port, headers=headers, query=query) as watcher:
            await watcher.subscribe(IN_FIRST)
            assert (await watcher.next())["brokerUrl"] == broker_url, (port, headers, query)
    # A listener no broker advertises fails each topic, as its lookups fail; a name that
    # cannot be a listener's is refused at the upgrade.
    async with watching(external, query="?listenerName=nowhere") as watcher:
        await watcher.subscribe(IN_FIRST)
        assert (await watcher.next())["code"] == "listener_not_found"
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        async with watching(external, headers={"X-Pulsar-ListenerName": "no such name!"}):
            pass
    assert refused.value.status == 400
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{external}/lookup/v2/watch") as plain,  # not an upgrade
    ):
        assert plain.status == 426


async def test_per_topic_answers_keep_the_stream_open(gateway: Gateway, zk: KazooClient) -> None:
    unowned = topic_in_range(0x80000000, 0xC0000000)
    async with watching(gateway.port_of("external", "http")) as watcher:
        await watcher.subscribe("persistent://bad", "persistent://public/nowhere/t", unowned)
        seen = {(body := await watcher.next())["topic"]: body for _ in range(3)}
        assert seen["persistent://bad"]["code"] == "invalid_topic"
        assert seen["persistent://public/nowhere/t"]["code"] == "not_found"
        assert seen[unowned] == {
            "type": "unowned",
            "topic": unowned,
            "generation": zxid(zk, "/namespace/public/default", "pzxid"),
        }
        # still open: an unsubscribed topic is not told about, a subscribed one is
        await watcher.send({"type": "unsubscribe", "topics": [unowned]})
        await watcher.subscribe(IN_FIRST)
        assert (await watcher.next())["topic"] == IN_FIRST
        zk.create("/namespace/public/default/0x80000000_0xc0000000", encode(ownership_node(1)))
        zk.set(OWNERSHIP, encode(ownership_node(2)))
        assert (await watcher.next())["topic"] == IN_FIRST


async def test_a_topic_not_found_is_told_once_its_ledger_is_created(
    gateway: Gateway, zk: KazooClient
) -> None:
    policies_path = "/admin/policies/public/default"
    policies = json.loads(zk.get(policies_path)[0])
    policies["autoTopicCreationOverride"] = {"allowAutoTopicCreation": False}
    zk.set(policies_path, json.dumps(policies).encode())
    ledgers = "/managed-ledgers/public/default/persistent"
    topic = IN_FIRST
    async with watching(gateway.port_of("external", "http")) as watcher:
        await watcher.subscribe(topic)
        while (body := await watcher.about(topic))["type"] != "error":  # (policies read late)
            pass
        assert body["code"] == "not_found"
        zk.create(f"{ledgers}/someone-else", b"", makepath=True)
        zk.create(f"{ledgers}/{topic.rpartition('/')[2]}", b"")  # (t<n>: no escaping)
        assert (await watcher.about(topic))["type"] == "owner"


def token(role: str, expires_in: float | None = None, *, at: int | None = None) -> str:
    """A token of `role` that expires `expires_in` seconds from now, or at `at`."""
    claims: dict[str, Any] = {"sub": role}
    if expires_in is not None:
        claims["exp"] = math.ceil(time.time() + expires_in)
    if at is not None:
        claims["exp"] = at
    return jwt.encode(claims, SECRET, algorithm="HS256")


def bearer(role: str, expires_in: float | None = None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(role, expires_in)}"}


async def test_tokens_refresh_expire_and_topics_are_authorized(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk: KazooClient
) -> None:
    policies = "/admin/policies/public/default"
    content = json.loads(zk.get(policies)[0])
    zk.set(
        policies, encode(content | {"auth_policies": {"namespace_auth": {"alice": ["consume"]}}})
    )
    extra = (
        "authenticationEnabled=true\nauthenticationProviders=token\n"
        f"tokenSecretKey=data:;base64,{base64.b64encode(SECRET).decode()}\n"
        "authorizationEnabled=true\nwatchMaxStreamsPerRole=2\n"
    )
    config = config_from(config_text(zookeeper.connect_string, zk_chroot, extra))
    async with running(config) as gateway:
        port = gateway.port_of("external", "http")
        with pytest.raises(aiohttp.WSServerHandshakeError) as stranger:
            async with watching(port):
                pass
        assert stranger.value.status == 401
        async with watching(port, headers=bearer("mallory")) as mallory:
            await mallory.subscribe(IN_FIRST)
            assert (await mallory.next())["code"] == "not_authorized"

        # Both streams' first tokens expire at the same second, a few seconds away: the refresh
        # is sent first thing, and nothing else has to happen before the expiry.
        expiry = math.ceil(time.time()) + 5
        first = {"Authorization": f"Bearer {token('alice', at=expiry)}"}
        async with watching(port, headers=first) as refreshed:
            await refreshed.send({"type": "update_token", "token": token("alice", 600)})
            assert await refreshed.next() == {"type": "update_token_response"}
            async with watching(port, headers=first) as expiring:
                # a third stream of the role is over watchMaxStreamsPerRole
                async with watching(port, headers=bearer("alice")) as third:
                    code, seen = await third.closed()
                    assert (code, seen[0]["code"]) == (4008, "limit_exceeded")
                await refreshed.subscribe(IN_FIRST)
                assert (await refreshed.next())["type"] == "owner"
                code, seen = await expiring.closed()  # (once its token expired)
                assert code == 4001
                assert [m["code"] for m in seen] == ["token_expired"]
            zk.set(OWNERSHIP, encode(ownership_node(2)))  # after the first token's expiry
            assert (await refreshed.about(IN_FIRST))["brokerUrl"] == "pulsar://b2.example.com:6650"
            await refreshed.send({"type": "update_token", "token": token("bob", 60)})
            code, seen = await refreshed.closed()
            assert (code, [m["code"] for m in seen]) == (4001, ["unauthenticated"])

        async with watching(port, headers=bearer("alice")) as forged:
            await forged.send({"type": "update_token", "token": "not-a-jwt"})
            code, seen = await forged.closed()
            assert (code, [m["code"] for m in seen]) == (4001, ["unauthenticated"])


async def test_limits_of_topics_and_streams_per_address(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk: KazooClient
) -> None:
    extra = "watchMaxTopicsPerStream=2\nwatchMaxStreamsPerAddress=2\n"
    config = config_from(config_text(zookeeper.connect_string, zk_chroot, extra))
    async with running(config) as gateway:
        port = gateway.port_of("external", "http")
        async with watching(port) as greedy:
            await greedy.subscribe(IN_FIRST, IN_SECOND)
            await greedy.next()
            await greedy.next()
            await greedy.subscribe(topic_in_range(0x80000000, 0xC0000000))
            code, seen = await greedy.closed()
            assert (code, [m["code"] for m in seen]) == (4008, ["limit_exceeded"])
        async with watching(port) as one, watching(port) as two, watching(port) as three:
            code, seen = await three.closed()
            assert (code, [m["code"] for m in seen]) == (4008, ["limit_exceeded"])
            await one.subscribe(IN_FIRST)
            await two.subscribe(IN_FIRST)
            assert (await one.next())["topic"] == (await two.next())["topic"] == IN_FIRST


# -- hostile and slow clients -------------------------------------------------------------------


def metric(gateway: Gateway, name: str) -> float:
    value = gateway.service.metrics.registry.get_sample_value(name)
    return value or 0.0


async def test_a_client_that_reads_nothing_is_coalesced_then_closed(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk: KazooClient
) -> None:
    extra = "watchStalledReaderTimeoutSeconds=4\n"
    config = config_from(config_text(zookeeper.connect_string, zk_chroot, extra))
    async with running(config) as gateway:
        topics = [f"persistent://public/default/t{n}" for n in range(3000)]  # ~600 KB of answers
        subscribe = json.dumps({"type": "subscribe", "topics": topics}).encode()
        sock = await asyncio.to_thread(raw_stream, gateway.port_of("external", "http"))
        try:
            await asyncio.to_thread(sock.sendall, client_frame(subscribe))
            coalesced = "pulsar_lookup_gateway_watch_coalesced_updates_total"

            async def moved_twice() -> bool:
                for owner in (2, 1):
                    zk.set(OWNERSHIP, encode(ownership_node(owner)))
                    await asyncio.sleep(0.05)
                return metric(gateway, coalesced) > 0

            # Answers about the moved bundle's topics wait unsent: the newer one replaces them.
            await eventually(moved_twice, timeout=WAIT)
            open_streams = "pulsar_lookup_gateway_watch_streams"
            await eventually(lambda: metric(gateway, open_streams) == 0, timeout=WAIT)
        finally:
            sock.close()
        assert closed_for(gateway, "stalled") == 1
        # the gateway serves on
        async with watching(gateway.port_of("external", "http")) as watcher:
            await watcher.subscribe(IN_FIRST)
            assert (await watcher.next())["type"] == "owner"


def closed_for(gateway: Gateway, reason: str) -> float:
    registry = gateway.service.metrics.registry
    name = "pulsar_lookup_gateway_watch_streams_closed_total"
    return registry.get_sample_value(name, {"reason": reason}) or 0.0


async def test_a_client_that_reads_nothing_but_keeps_sending_pongs_is_closed(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk: KazooClient
) -> None:
    # Its pongs restart the ping timer, and ~600 KB of answers would fit in a send buffer
    # the kernel let grow: only the kernel's send queue shows it takes nothing.
    extra = "watchStalledReaderTimeoutSeconds=2\n"
    config = config_from(config_text(zookeeper.connect_string, zk_chroot, extra))
    async with running(config) as gateway:
        topics = [f"persistent://public/default/t{n}" for n in range(3000)]
        subscribe = json.dumps({"type": "subscribe", "topics": topics}).encode()
        sock = await asyncio.to_thread(raw_stream, gateway.port_of("external", "http"))
        open_streams = "pulsar_lookup_gateway_watch_streams"
        try:
            await asyncio.to_thread(sock.sendall, client_frame(subscribe))
            await eventually(lambda: metric(gateway, open_streams) == 1, timeout=WAIT)
            deadline = time.monotonic() + WAIT
            while metric(gateway, open_streams) > 0:
                assert time.monotonic() < deadline, "a client that reads nothing stays open"
                with contextlib.suppress(OSError):  # (cut off meanwhile)
                    await asyncio.to_thread(sock.sendall, client_frame(b"", 0xA))  # a pong
                await asyncio.sleep(0.2)
        finally:
            sock.close()
        assert closed_for(gateway, "stalled") == 1
        assert closed_for(gateway, "client") == 0


async def test_pushes_and_first_answers_do_not_wait_behind_big_subscribes(
    gateway: Gateway, zk: KazooClient
) -> None:
    port = gateway.port_of("external", "http")
    hub = watches_for(gateway.service).hub
    # (`__` in a name: never told its bundle's state, each takes a full lookup, so the first
    # lookups queue as the test means them to; others would be answered as they are taken in)
    # (four streams of 10,000, the most a stream may watch: the margin between "a batch of
    # each" and "all of them" stays wide on a loaded machine)
    hostile = [
        [f"persistent://public/default/h{stream}__{n}" for n in range(10_000)]
        for stream in range(4)
    ]
    everything = sum(len(names) for names in hostile)
    async with watching(port) as existing, watching(port) as bystander:
        await existing.subscribe(IN_FIRST)
        assert (await existing.next())["type"] == "owner"
        start = hub.lookups
        socks = [await asyncio.to_thread(raw_stream, port) for _ in hostile]
        try:
            for sock, names in zip(socks, hostile, strict=True):
                frame = client_frame(json.dumps({"type": "subscribe", "topics": names}).encode())
                await asyncio.to_thread(sock.sendall, frame)
            await eventually(lambda: hub.lookups > start + 200, timeout=WAIT)  # (under way)
            # another stream's first answer comes after a batch of each, not after all of them
            await bystander.subscribe(IN_SECOND)
            assert (await bystander.next())["type"] == "owner"
            assert hub.lookups < start + everything
            # a change is looked up ahead of every first lookup
            zk.set(OWNERSHIP, encode(ownership_node(2)))
            moved = await existing.about(IN_FIRST)
            assert moved["brokerUrl"] == "pulsar://b2.example.com:6650"
            assert hub.lookups < start + everything
        finally:
            for sock in socks:
                sock.close()


async def test_bad_requests_close_the_stream_with_a_reason(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk: KazooClient
) -> None:
    config = config_from(
        config_text(zookeeper.connect_string, zk_chroot, "watchMaxFrameBytes=2048\n")
    )
    async with running(config) as gateway:
        port = gateway.port_of("external", "http")
        cases: list[tuple[Any, int]] = [
            ("{not json", 1008),
            ('{"type": "subscribe", "topics": "persistent://public/default/t"}', 1008),
            ('{"type": "explode"}', 1008),
            (b"\x00binary", 1003),
            (json.dumps({"type": "subscribe", "topics": ["x" * 3000]}), 1009),  # too big
        ]
        for request, expected in cases:
            async with watching(port) as watcher:
                if isinstance(request, bytes):
                    await watcher.ws.send_bytes(request)
                else:
                    await watcher.ws.send_str(request)
                code, seen = await watcher.closed()
                assert code == expected, request
                assert all(m["type"] == "error" and "topic" not in m for m in seen)
        assert closed_for(gateway, "limit_exceeded") == 1  # (the frame too big: 1009)
        assert closed_for(gateway, "bad_request") == 4
        assert closed_for(gateway, "client") == 0
        async with watching(port) as watcher:
            await watcher.subscribe(IN_FIRST)
            assert (await watcher.next())["type"] == "owner"


async def eventually(check: Any, *, timeout: float) -> None:
    """`check` (sync or async) holds within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        assert time.monotonic() < deadline, "condition still false"
        await asyncio.sleep(0.05)


# -- the file: store, the command line, a stop ------------------------------------------------


async def test_a_snapshot_dates_its_answers_by_its_modification_time(tmp_path: Path) -> None:
    from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot

    snapshot = tmp_path / "cluster.json"
    write_snapshot(snapshot, cluster(brokers=2, owned={FIRST: 1}))
    config = config_from(
        f"metadataStoreUrl=file:{snapshot}\n"
        "advertisedListeners=external:pulsar://127.0.0.2:6650,external:http://127.0.0.2:8080\n"
        "bindAddresses=external:http://127.0.0.1:0\nbrokerServicePort=\nwebServicePort=\n"
    )
    async with running(config) as gateway, watching(gateway.port_of("external", "http")) as w:
        await w.subscribe(IN_FIRST)
        first = await w.next()
        assert first["generation"] == snapshot.stat().st_mtime_ns // 1_000_000
        await asyncio.sleep(0.01)  # (a newer modification time)
        write_snapshot(snapshot, cluster(brokers=2, owned={FIRST: 2}))
        moved = await w.about(IN_FIRST)  # (the file is checked once a second)
        assert moved["brokerUrl"] == "pulsar://b2.example.com:6650"
        assert moved["generation"] == snapshot.stat().st_mtime_ns // 1_000_000
        assert moved["generation"] > first["generation"]


async def test_the_watch_command_prints_json_lines_and_ends_when_the_gateway_stops(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk: KazooClient
) -> None:
    config = config_from(config_text(zookeeper.connect_string, zk_chroot))
    gateway = Gateway(config)
    await gateway.start()
    try:
        port = gateway.port_of("internal", "http")
        command = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "pulsar_lookup_gateway.gateway.cli", "watch",
            "--url", f"ws://127.0.0.1:{port}", "--listener", "external", IN_FIRST,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert command.stdout is not None
        line = await asyncio.wait_for(command.stdout.readline(), WAIT * 3)
        assert json.loads(line)["brokerUrl"] == "pulsar://b1.example.com:6650"
    finally:
        await gateway.stop()  # the stream closes with 1001 (going away)
    assert await asyncio.wait_for(command.wait(), WAIT) == 0


async def test_a_stream_outlives_the_request_head_deadline(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk: KazooClient
) -> None:
    """The socket's deadline for request heads (slowloris) is not applied to the frames of an
    upgraded connection."""
    extra = "connectionHandshakeTimeoutSeconds=0.3\n"
    config = config_from(config_text(zookeeper.connect_string, zk_chroot, extra))
    async with running(config) as gateway, watching(gateway.port_of("external", "http")) as w:
        await w.subscribe(IN_FIRST)
        await w.next()
        await asyncio.sleep(1.0)  # (over three deadlines)
        await w.subscribe(IN_SECOND)
        assert (await w.next())["topic"] == IN_SECOND


async def test_a_tls_socket_serves_the_watch(
    tmp_path: Path, zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk: KazooClient
) -> None:
    import ssl

    import trustme

    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    leaf.private_key_pem.write_to_path(tmp_path / "gw.key")
    leaf.cert_chain_pems[0].write_to_path(tmp_path / "gw.crt")
    config = config_from(
        f"metadataStoreUrl=zk:{zookeeper.connect_string}{zk_chroot}\n"
        "advertisedListeners=external:pulsar+ssl://127.0.0.2:6651,external:https://127.0.0.2:8443\n"
        "bindAddresses=external:https://127.0.0.1:0\nbrokerServicePort=\nwebServicePort=\n"
        f"tlsCertificateFilePath={tmp_path / 'gw.crt'}\ntlsKeyFilePath={tmp_path / 'gw.key'}\n"
    )
    context = ssl.create_default_context()
    ca.configure_trust(context)
    async with running(config) as gateway, aiohttp.ClientSession() as session:
        url = f"https://127.0.0.1:{gateway.port_of('external', 'https')}/lookup/v2/watch"
        async with session.ws_connect(url, ssl=context) as ws:
            watcher = Watcher(ws)
            await watcher.subscribe(IN_FIRST)
            assert (await watcher.next())["brokerUrlTls"] == "pulsar+ssl://b1.example.com:6651"


async def test_a_refused_topic_is_looked_up_once_and_its_log_line_names_the_client(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk: KazooClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pulsar_lookup_gateway.serving")
    extra = (
        "authenticationEnabled=true\nauthenticationProviders=token\n"
        f"tokenSecretKey=data:;base64,{base64.b64encode(SECRET).decode()}\n"
        "authorizationEnabled=true\n"
    )
    config = config_from(config_text(zookeeper.connect_string, zk_chroot, extra))
    async with running(config) as gateway:
        hub = watches_for(gateway.service).hub
        # (a fresh gateway: the namespace's policies are read by these lookups, a write of
        # the view that concerns every one of them)
        names = [f"persistent://public/default/refused-{n}" for n in range(12)]
        names += [f"persistent://public/elsewhere/refused-{n}" for n in range(4)]
        async with watching(gateway.port_of("external", "http"), headers=bearer("mallory")) as m:
            await m.subscribe(*names)
            told = {(body := await m.next())["topic"]: body["code"] for _ in names}
            assert set(told.values()) == {"not_authorized"}
            await asyncio.sleep(1.5)  # (what a second lookup would have waited for)
            assert hub.lookups == len(names)
            port = m.ws.get_extra_info("sockname")[1]
    lines = [r.getMessage() for r in caplog.records if "protocol=watch" in r.getMessage()]
    assert lines, "no refusal logged"
    assert all(f"client=127.0.0.1:{port} on http://" in line for line in lines), lines[:2]


async def test_anonymous_clients_are_a_role_of_their_own(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk: KazooClient
) -> None:
    extra = "watchMaxStreamsPerRole=2\nwatchMaxStreamsPerAddress=0\n"
    config = config_from(config_text(zookeeper.connect_string, zk_chroot, extra))
    async with running(config) as gateway:
        port = gateway.port_of("external", "http")
        async with watching(port) as one, watching(port), watching(port) as third:
            code, seen = await third.closed()
            assert (code, [m["code"] for m in seen]) == (4008, ["limit_exceeded"])
            assert "watchMaxStreamsPerRole=2" in seen[0]["message"]
            await one.subscribe(IN_FIRST)
            assert (await one.next())["type"] == "owner"
        async with watching(port) as again:  # (the streams that closed count no more)
            await again.subscribe(IN_FIRST)
            assert (await again.next())["type"] == "owner"


async def test_a_subscribe_herd_is_taken_in_bounded_slices(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk: KazooClient
) -> None:
    """100 streams subscribe 100 new topics each at once: between two iterations of the loop
    (when it polls every socket), the watch takes in a bounded slice of names and makes a
    bounded number of lookups, and every stream gets its answers."""
    extra = "watchMaxStreamsPerAddress=0\n"
    config = config_from(config_text(zookeeper.connect_string, zk_chroot, extra))
    async with running(config) as gateway:
        await _herd(gateway)


async def _herd(gateway: Gateway) -> None:
    port = gateway.port_of("external", "http")
    hub = watches_for(gateway.service).hub
    most_topics = most_lookups = 0

    async def tick() -> None:
        nonlocal most_topics, most_lookups
        topics, lookups = hub.topics, hub.lookups
        while True:
            await asyncio.sleep(0)  # (once per iteration)
            most_topics = max(most_topics, hub.topics - topics)
            most_lookups = max(most_lookups, hub.lookups - lookups)
            topics, lookups = hub.topics, hub.lookups

    async with contextlib.AsyncExitStack() as stack:
        streams = [await stack.enter_async_context(watching(port)) for _ in range(100)]
        names = [
            [f"persistent://public/default/herd{s}-{t}" for t in range(100)] for s in range(100)
        ]
        ticker = asyncio.create_task(tick())
        try:
            await asyncio.gather(
                *(stream.subscribe(*topics) for stream, topics in zip(streams, names, strict=True))
            )

            async def answered(stream: Watcher, topics: list[str]) -> None:
                waiting = set(topics)
                while waiting:
                    waiting.discard((await stream.next())["topic"])

            await asyncio.gather(
                *(answered(stream, topics) for stream, topics in zip(streams, names, strict=True))
            )
        finally:
            ticker.cancel()
    # (a few ms of the watch's work an iteration, measured: some hundreds of names or ~100
    # lookups, and two iterations' worth between two ticks at most; loose bounds, of counts,
    # not times. Before slicing, every subscribe whose frame had arrived was taken in at once:
    # up to the 10,000 names)
    assert 0 < most_topics <= 2_000
    assert 0 < most_lookups <= 1_000
    assert hub.turns.turns > 10
