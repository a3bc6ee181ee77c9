"""Protocol-handler lookups on a real ZooKeeper and real sockets: a gateway started from its
config answers `GET .../protocol/{protocol}` per listener, refuses what the owner does not
advertise, authenticates and authorizes as for lookups, has a broker (a test peer) take an
unowned bundle, and sees a change of the owner's protocol data through its watches."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import jwt
import pytest
from kazoo.client import KazooClient

from pulsar_lookup_gateway.gateway.process import Gateway
from pulsar_lookup_gateway.listeners.config.conf_file import parse_properties
from pulsar_lookup_gateway.listeners.config.model import validate_raw
from pulsar_lookup_gateway.metadata_store.admin import encode, seed
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper
from pulsar_lookup_gateway.metadata_store.synthetic import (
    broker_id,
    cluster,
    ownership_node,
    topic_in_range,
)
from tests.broker_peer import BrokerPeer, zookeeper_owner
from tests.waiting import eventually

pytestmark = pytest.mark.zookeeper

NS = "public/default"
FIRST, LAST = "0x00000000_0x40000000", "0xc0000000_0xffffffff"
OWNED = topic_in_range(0, 0x40000000).rsplit("/", 1)[1]  # owned by b1
UNOWNED = topic_in_range(0xC0000000, 0xFFFFFFFF).rsplit("/", 1)[1]
SECRET = bytes(range(32))
PRODUCER, STRANGER = "producer", "stranger"
KAFKA = "internal:PLAINTEXT://10.0.0.{i}:9092,external:SSL://b{i}.example.com:9093"
GRPC = "grpcServiceHost=b{i}.example.com;grpcServicePort=50051;grpcServicePortTls=50052"


def token(role: str) -> str:
    return jwt.encode({"sub": role}, SECRET, algorithm="HS256")


def nodes(**internal_urls: str) -> dict[str, Any]:
    """Three brokers (b1 the leader, owning the first bundle) advertising Kafka endpoints per
    listener and a gRPC handler; `internal_urls`: broker number -> its internal binary URL
    (a test peer's), as b1="pulsar://127.0.0.1:1234"."""
    snapshot = cluster(owned={FIRST: 1})
    for i in (1, 2, 3):
        node = snapshot[f"/loadbalance/brokers/{broker_id(i)}"]
        node["protocols"] = {"kafka": KAFKA.format(i=i), "grpc": GRPC.format(i=i)}
        url = internal_urls.get(f"b{i}")
        if url is not None:
            node["advertisedListeners"]["internal"]["brokerServiceUrl"] = url
    snapshot[f"/admin/policies/{NS}"]["auth_policies"] = {
        "namespace_auth": {PRODUCER: ["produce"]},
        "destination_auth": {},
        "subscription_auth_roles": {},
    }
    return snapshot


def conf(zookeeper: EmbeddedZooKeeper, chroot: str) -> str:
    key = base64.b64encode(SECRET).decode()
    return (
        f"metadataStoreUrl=zk:{zookeeper.connect_string}{chroot}\n"
        "advertisedListeners=internal:http://127.0.0.1:8080,external:http://127.0.0.2:8080\n"
        "internalListenerName=internal\n"
        "bindAddresses=internal:http://127.0.0.1:0,external:http://127.0.0.1:0\n"
        "brokerServicePort=\nwebServicePort=\n"
        "authenticationEnabled=true\nauthenticationProviders=token\n"
        f"tokenSecretKey=data:;base64,{key}\n"
        "listener.internal.authenticationRequired=false\n"
        "listener.external.authenticationRequired=true\n"
        "listener.external.allowedListenerNames=external\n"
        "authorizationEnabled=true\nsuperUserRoles=admin\n"
    )


@asynccontextmanager
async def gateway(text: str) -> AsyncIterator[Gateway]:
    gw = Gateway(validate_raw(parse_properties(text, "test.conf")).config)
    await gw.start()
    try:
        yield gw
    finally:
        await gw.stop()


async def ask(
    gw: Gateway,
    session: aiohttp.ClientSession,
    local: str,
    protocol: str,
    *,
    listener: str = "internal",
    query: str = "",
    headers: dict[str, str] | None = None,
    role: str | None = None,
) -> tuple[int, Any, Any]:
    base = f"http://127.0.0.1:{gw.port_of(listener, 'http')}"
    path = f"/lookup/v2/topic/persistent/{NS}/{local}/protocol/{protocol}{query}"
    sent = dict(headers or {})
    if role is not None:
        sent["Authorization"] = f"Bearer {token(role)}"
    async with session.get(base + path, headers=sent) as response:
        return response.status, response.headers, json.loads(await response.text())


def urls(body: dict[str, Any]) -> list[str]:
    return [endpoint["url"] for endpoint in body["endpoints"]]


async def test_endpoints_per_listener_and_the_404s(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk_admin: KazooClient
) -> None:
    seed(zk_admin, nodes())
    async with gateway(conf(zookeeper, zk_chroot)) as gw, aiohttp.ClientSession() as session:
        status, _, body = await ask(gw, session, OWNED, "kafka")
        assert status == 200, body
        assert body == {
            "topic": f"persistent://{NS}/{OWNED}",
            "bundle": FIRST,
            "brokerId": broker_id(1),
            "protocol": "kafka",
            "listener": "internal",
            "listenerChosenBy": "socket",
            "endpoints": [
                {"url": "PLAINTEXT://10.0.0.1:9092", "scheme": "PLAINTEXT", "host": "10.0.0.1",
                 "port": 9092, "listener": "internal", "securityProtocol": "PLAINTEXT",
                 "tls": False},
            ],
            "data": KAFKA.format(i=1),
        }  # fmt: skip
        # Naming the internal listener does not make a client internal: no broker id, no data
        # string (which holds every listener's endpoints).
        internal = "?listenerName=internal"
        status, _, body = await ask(gw, session, OWNED, "kafka", query=internal)
        assert status == 200 and urls(body) == ["PLAINTEXT://10.0.0.1:9092"]
        assert "brokerId" not in body and "data" not in body
        # The listener as a lookup chooses it: the query, then the header (the external
        # listener requires authentication on every route to it).
        external = "?listenerName=external"
        status, _, body = await ask(gw, session, OWNED, "kafka", query=external)
        assert status == 401
        status, _, body = await ask(gw, session, OWNED, "kafka", query=external, role="admin")
        assert (status, urls(body), body["listenerChosenBy"]) == (
            200,
            ["SSL://b1.example.com:9093"],
            "explicit",
        )
        # The external listener's clients see neither the broker id nor the raw data string
        # (every listener's endpoints): internal names.
        assert "brokerId" not in body and "data" not in body
        assert "10.0.0." not in json.dumps(body)
        headers = {"X-Pulsar-ListenerName": "external"}
        status, _, body = await ask(gw, session, OWNED, "kafka", headers=headers, role="admin")
        assert (status, urls(body), body["listenerChosenBy"]) == (
            200,
            ["SSL://b1.example.com:9093"],
            "header",
        )
        # The external socket (authenticated) answers for its own listener.
        status, _, body = await ask(gw, session, OWNED, "kafka", listener="external", role="admin")
        assert (status, urls(body), body["listener"]) == (
            200,
            ["SSL://b1.example.com:9093"],
            "external",
        )
        # gRPC: endpoints of every listener.
        status, _, body = await ask(gw, session, OWNED, "grpc")
        assert urls(body) == ["grpc://b1.example.com:50051", "grpc+tls://b1.example.com:50052"]

        # What the owner does not advertise: 404 naming what it does (not the owner: its id
        # is an internal address).
        status, _, body = await ask(gw, session, OWNED, "mqtt")
        assert status == 404
        assert body["reason"] == (
            "the topic's owner does not advertise protocol 'mqtt'; the protocols it "
            "advertises: grpc, kafka"
        )
        # No endpoint for the listener: 404, naming neither the owner nor its data.
        partner = "?listenerName=partner"
        status, _, body = await ask(gw, session, OWNED, "kafka", query=partner, role="admin")
        assert status == 404
        assert body["reason"] == (
            "the topic's owner advertises no kafka endpoint for listener 'partner'"
        )
        # A name that is no protocol name; a namespace that does not exist.
        status, _, body = await ask(gw, session, OWNED, "ka%2Ffka")
        assert status == 400 and "is not a protocol name" in body["reason"]
        base = f"http://127.0.0.1:{gw.port_of('internal', 'http')}"
        async with session.get(f"{base}/lookup/v2/topic/persistent/no/ns/t/protocol/kafka") as r:
            assert r.status == 404
            assert (await r.json())["reason"] == "Namespace not found"


async def test_authentication_and_authorization_as_for_lookups(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk_admin: KazooClient
) -> None:
    seed(zk_admin, nodes())
    async with gateway(conf(zookeeper, zk_chroot)) as gw, aiohttp.ClientSession() as session:
        status, headers, _ = await ask(gw, session, OWNED, "kafka", listener="external")
        assert status == 401 and headers["WWW-Authenticate"] == "Bearer"
        status, _, body = await ask(gw, session, OWNED, "kafka", listener="external", role=STRANGER)
        assert status == 403, body
        status, _, body = await ask(gw, session, OWNED, "kafka", listener="external", role=PRODUCER)
        assert (status, urls(body)) == (200, ["SSL://b1.example.com:9093"])
        # The stranger is refused before anything else is told, even for an unowned bundle.
        status, _, _ = await ask(gw, session, UNOWNED, "kafka", listener="external", role=STRANGER)
        assert status == 403
        # A listener the external socket does not allow: refused as for lookups.
        status, _, body = await ask(
            gw,
            session,
            OWNED,
            "kafka",
            listener="external",
            role=PRODUCER,
            query="?listenerName=internal",
        )
        assert status == 400 and "internal" in body["reason"]


async def test_an_unowned_bundle_is_taken_by_the_broker_the_leader_picks(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk_admin: KazooClient
) -> None:
    async with BrokerPeer(name="b2") as taker, BrokerPeer(name="leader") as leader:
        # The leader sends the client to b2, which writes its ownership node and connects it.
        leader.redirect_to = taker.url
        owner = dict(ownership_node(2), brokerId=broker_id(2))
        taker.take_ownership = zookeeper_owner(zk_admin, owner)
        seed(zk_admin, nodes(b1=leader.url, b2=taker.url))
        text = conf(zookeeper, zk_chroot)
        async with gateway(text) as gw, aiohttp.ClientSession() as session:
            # Three clients at once: one LOOKUP for the bundle, one answer for all.
            answers = await asyncio.gather(*(ask(gw, session, UNOWNED, "kafka") for _ in range(3)))
            for status, _, body in answers:
                assert status == 200, body
                assert (body["bundle"], body["brokerId"]) == (LAST, broker_id(2))
                assert urls(body) == ["PLAINTEXT://10.0.0.2:9092"]
            topic = f"persistent://{NS}/{UNOWNED}"
            # Non-authoritative to the leader (naming the internal listener), then as the
            # leader's Redirect says to the broker it picked.
            assert [(c.topic, c.authoritative, c.listener_name) for c in leader.seen[1:]] == [
                (topic, False, "internal")
            ]
            assert [(c.topic, c.authoritative) for c in taker.seen[1:]] == [(topic, True)]
            assert zk_admin.exists(f"/namespace/{NS}/{LAST}") is not None
            # Owned now: answered from the view, no broker asked again.
            status, _, body = await ask(gw, session, UNOWNED, "grpc")
            assert (status, body["brokerId"]) == (200, broker_id(2))
            assert len(leader.seen) == 2 and len(taker.seen) == 2


async def test_a_bundle_no_broker_takes_is_503_with_retry_after(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk_admin: KazooClient
) -> None:
    # The leader answers Connect but writes no ownership node: the bounded wait runs out.
    async with BrokerPeer(name="leader") as leader:
        seed(zk_admin, nodes(b1=leader.url))
        async with gateway(conf(zookeeper, zk_chroot)) as gw, aiohttp.ClientSession() as session:
            status, headers, body = await ask(gw, session, UNOWNED, "kafka")
            assert status == 503 and headers["Retry-After"] == "1"
            assert body["reason"].startswith(f"bundle {NS}/{LAST} has no owner yet")
            assert [c.type_name for c in leader.seen] == ["CONNECT", "LOOKUP"]
    # No broker answers at all.
    seed(zk_admin, nodes(b1="pulsar://127.0.0.1:9"))
    async with gateway(conf(zookeeper, zk_chroot)) as gw, aiohttp.ClientSession() as session:
        status, headers, body = await ask(gw, session, UNOWNED, "kafka")
        assert status == 503 and headers["Retry-After"] == "1"
        # the broker's address is for the log, not the client
        assert "cannot reach the broker" in body["reason"]
        assert "127.0.0.1:9" not in body["reason"]


async def test_a_change_of_the_owners_protocol_data_is_seen(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk_admin: KazooClient
) -> None:
    snapshot = nodes()
    seed(zk_admin, snapshot)
    async with gateway(conf(zookeeper, zk_chroot)) as gw, aiohttp.ClientSession() as session:
        status, _, body = await ask(gw, session, OWNED, "kafka")
        assert (status, urls(body)) == (200, ["PLAINTEXT://10.0.0.1:9092"])
        registration = dict(snapshot[f"/loadbalance/brokers/{broker_id(1)}"])
        moved = "internal:PLAINTEXT://10.9.9.9:9092,external:SSL://b1.example.com:9093"
        registration["protocols"] = {"kafka": moved}
        zk_admin.set(f"/loadbalance/brokers/{broker_id(1)}", encode(registration))

        async def moved_seen() -> bool:
            status, _, body = await ask(gw, session, OWNED, "kafka")
            return status == 200 and urls(body) == ["PLAINTEXT://10.9.9.9:9092"]

        await eventually(moved_seen, timeout=1.0)
        # The handler gone from the registration: 404 naming what is left.
        registration["protocols"] = {}
        zk_admin.set(f"/loadbalance/brokers/{broker_id(1)}", encode(registration))

        async def gone() -> bool:
            status, _, body = await ask(gw, session, OWNED, "kafka")
            return status == 404 and body["reason"].endswith("advertises: none")

        await eventually(gone, timeout=1.0)
