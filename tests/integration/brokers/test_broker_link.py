"""The broker link on real sockets: which broker, who asks, and its bounds (in-flight limit,
timeout, a failing broker skipped, the connection pool). Brokers are test peers."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from pulsar_lookup_gateway.brokers.answers import (
    BrokerLookup,
    BrokerRefusal,
    BrokerSchema,
    PartitionCount,
    TopicList,
)
from pulsar_lookup_gateway.brokers.link import BrokerLink, LinkSettings
from pulsar_lookup_gateway.listeners.auth import Principal
from pulsar_lookup_gateway.listeners.protocol.codec import Schema
from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import CommandGetTopicsOfNamespace
from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import free_port
from pulsar_lookup_gateway.metadata_store.file import FileSource
from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
from pulsar_lookup_gateway.metadata_store.synthetic import broker_node
from pulsar_lookup_gateway.serving.service import LookupService
from tests.broker_peer import BrokerPeer

NP = CommandGetTopicsOfNamespace.NON_PERSISTENT
TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJnYXRld2F5In0.c2lnbmF0dXJl"


def nodes_for(urls: dict[str, str], *, default: dict[str, str] | None = None) -> dict[str, Any]:
    """One broker registration per entry, its internal listener at the given URL (and its
    default URL elsewhere, unless `default` says)."""
    nodes: dict[str, Any] = {"/admin/policies/public/default": {}}
    for i, (broker, url) in enumerate(sorted(urls.items()), start=1):
        node = broker_node(i)
        key = "brokerServiceUrlTls" if url.startswith("pulsar+ssl") else "brokerServiceUrl"
        node["advertisedListeners"] = {"internal": {key: url}}
        node["pulsarServiceUrl"] = (default or {}).get(broker, "pulsar://127.0.0.1:9")
        nodes[f"/loadbalance/brokers/{broker}"] = node
    return nodes


@contextlib.asynccontextmanager
async def linked(
    tmp_path: Path, nodes: dict[str, Any], **settings: Any
) -> AsyncIterator[BrokerLink]:
    path = tmp_path / "cluster.json"
    write_snapshot(path, nodes)
    source = FileSource(path, poll_interval=60)
    await source.start()
    service = LookupService(source, internal_listener="internal")
    options: dict[str, Any] = {
        "internal_listener": "internal",
        "request_timeout": 5.0,
        "connect_timeout": 5.0,
    }
    options.update(settings)
    link = BrokerLink(service, LinkSettings(**options))
    try:
        yield link
    finally:
        await link.close()
        await source.close()


async def test_a_request_goes_to_the_internal_listener_and_comes_back(tmp_path: Path) -> None:
    async with BrokerPeer(name="internal") as peer, BrokerPeer(name="default") as default:
        peer.topics["public/default"] = ["non-persistent://public/default/np"]
        nodes = nodes_for({"b1:8080": peer.url}, default={"b1:8080": default.url})
        async with linked(tmp_path, nodes) as link:
            answer = await link.topics_of_namespace("public/default", NP)
        assert answer == TopicList(("non-persistent://public/default/np",))
        assert len([c for c in peer.seen if c.type_name == "GET_TOPICS_OF_NAMESPACE"]) == 1
        assert not default.seen


async def test_errors_and_schemas_are_the_brokers(tmp_path: Path) -> None:
    async with BrokerPeer() as peer:
        peer.schemas["persistent://public/default/s"] = Schema(
            name="public/default/s", schema_data=b"", type=Schema.STRING
        )
        async with linked(tmp_path, nodes_for({"b1:8080": peer.url})) as link:
            found = await link.schema("persistent://public/default/s")
            missing = await link.schema("persistent://public/default/none", b"\0" * 8)
        assert isinstance(found, BrokerSchema)
        assert (found.type_name, found.name) == ("STRING", "public/default/s")
        assert isinstance(missing, BrokerRefusal)
        assert missing.code == 11  # TopicNotFound
        assert peer.topics_seen("GET_SCHEMA") == [
            "persistent://public/default/s",
            "persistent://public/default/none",
        ]


async def test_a_silent_broker_times_out_and_is_skipped(tmp_path: Path) -> None:
    async with BrokerPeer(silent=True) as peer:
        nodes = nodes_for({"b1:8080": peer.url})
        async with linked(tmp_path, nodes, request_timeout=0.3) as link:
            with pytest.raises(LookupFailure) as failed:
                await link.topics_of_namespace("public/default", NP)
            assert failed.value.kind is FailureKind.BROKER_UNAVAILABLE
            assert "did not answer within 0.3s" in failed.value.message
            # the broker's (internal) address goes to the log, never to the client
            address = peer.url.removeprefix("pulsar://")
            assert address not in failed.value.message
            assert address in (failed.value.detail or "")
            assert link.broker_failed(peer.url)


async def test_the_in_flight_limit_refuses_at_once(tmp_path: Path) -> None:
    async with BrokerPeer(silent=True) as peer:
        nodes = nodes_for({"b1:8080": peer.url})
        async with linked(
            tmp_path, nodes, request_timeout=30.0, max_in_flight_per_broker=2
        ) as link:
            waiting = [
                asyncio.create_task(link.topics_of_namespace("public/default", NP))
                for _ in range(2)
            ]
            await peer.wait_for(lambda p: p.types_seen().count("GET_TOPICS_OF_NAMESPACE") == 2, 10)
            with pytest.raises(LookupFailure) as refused:
                await link.topics_of_namespace("public/default", NP)
            assert refused.value.kind is FailureKind.TOO_MANY_REQUESTS
            assert peer.types_seen().count("GET_TOPICS_OF_NAMESPACE") == 2  # never sent
            for task in waiting:
                task.cancel()
            await asyncio.gather(*waiting, return_exceptions=True)


async def test_a_broker_that_cannot_be_reached_is_skipped(tmp_path: Path) -> None:
    dead = f"pulsar://127.0.0.1:{free_port()}"
    async with BrokerPeer() as live:
        nodes = nodes_for({"b1:8080": dead, "b2:8080": live.url})
        async with linked(tmp_path, nodes) as link:
            # In turn, each request starts at another broker: the dead one is tried once, then
            # skipped; every request is answered by the live one.
            for _ in range(4):
                answer = await link.topics_of_namespace("public/default", NP)
                assert isinstance(answer, TopicList)
            assert link.broker_failed(dead)
            assert not link.broker_failed(live.url)
            assert link.connection_count == 1
        assert len(live.topics_seen("GET_TOPICS_OF_NAMESPACE")) == 4


async def test_an_unreachable_broker_is_not_named_to_the_client(tmp_path: Path) -> None:
    dead = f"pulsar://127.0.0.1:{free_port()}"
    async with linked(tmp_path, nodes_for({"b1:8080": dead})) as link:
        with pytest.raises(LookupFailure) as failed:
            await link.topics_of_namespace("public/default", NP)
    assert failed.value.kind is FailureKind.BROKER_UNAVAILABLE
    assert failed.value.message == "cannot reach the broker; retry later"
    assert dead in (failed.value.detail or "")


async def test_no_broker(tmp_path: Path) -> None:
    async with linked(tmp_path, {"/admin/policies/public/default": {}}) as link:
        with pytest.raises(LookupFailure) as failed:
            await link.schema("persistent://public/default/s")
    assert failed.value.kind is FailureKind.NO_BROKER


async def test_credentials_and_original_principal(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    async with BrokerPeer() as peer:
        nodes = nodes_for({"b1:8080": peer.url})
        async with linked(
            tmp_path, nodes, token=f"file://{token_file}", forward_credentials=False
        ) as link:
            await link.schema("persistent://public/default/s", principal=Principal("alice"))
            await link.schema(
                "persistent://public/default/s", principal=Principal("alice", "token", "jwt")
            )
            assert link.connection_count == 1  # alice (credentials not forwarded)
        (first,) = peer.connects
        assert (first.auth_method_name, first.auth_data) == ("token", TOKEN.encode())
        assert first.feature_flags.supports_get_partitioned_metadata_without_auto_creation
        assert first.original_principal == "alice"
        assert not first.HasField("original_auth_data")


async def test_an_anonymous_client_never_borrows_the_gateways_identity(tmp_path: Path) -> None:
    """Confused deputy: where the gateway authenticates to the brokers, a client that proved
    no role is refused (no anonymousUserRole), or sent as anonymousUserRole; never as the
    gateway with an empty original principal."""
    async with BrokerPeer() as peer:
        nodes = nodes_for({"b1:8080": peer.url})
        async with linked(tmp_path, nodes, token=f"token:{TOKEN}") as link:
            with pytest.raises(LookupFailure) as refused:
                await link.schema("persistent://public/default/s")
            assert refused.value.kind is FailureKind.NOT_AUTHORIZED
            with pytest.raises(LookupFailure):
                await link.topics_of_namespace("public/default", NP)
            with pytest.raises(LookupFailure):
                await link.lookup("persistent://public/default/s", None)
        assert peer.connects == []  # nothing was sent
        async with linked(
            tmp_path, nodes, token=f"token:{TOKEN}", anonymous_role="anonymous"
        ) as link:
            await link.schema("persistent://public/default/s")
        (connect,) = peer.connects
        assert connect.auth_data == TOKEN.encode()
        assert connect.original_principal == "anonymous"
    # A gateway with no identity of its own lends none: anonymous stays anonymous.
    async with BrokerPeer() as peer:
        async with linked(tmp_path, nodes_for({"b1:8080": peer.url})) as link:
            await link.schema("persistent://public/default/s")
        (connect,) = peer.connects
        assert not connect.HasField("auth_data")
        assert not connect.HasField("original_principal")


async def test_forwarded_credentials(tmp_path: Path) -> None:
    async with BrokerPeer() as peer:
        nodes = nodes_for({"b1:8080": peer.url})
        async with linked(
            tmp_path, nodes, token=f"token:{TOKEN}", forward_credentials=True
        ) as link:
            alice = Principal("alice", "token", "alice-jwt")
            await link.schema("persistent://public/default/s", principal=alice)
            await link.schema("persistent://public/default/s", principal=alice)
            assert link.connection_count == 1  # one connection per identity, reused
        (connect,) = peer.connects
        assert (connect.original_principal, connect.original_auth_data) == ("alice", "alice-jwt")
        assert connect.original_auth_method == "token"


async def test_the_pool_is_bounded(tmp_path: Path) -> None:
    async with BrokerPeer() as peer:
        nodes = nodes_for({"b1:8080": peer.url})
        async with linked(tmp_path, nodes, max_connections=2) as link:
            for role in ("a", "b", "c", "d"):
                await link.schema("persistent://public/default/s", principal=Principal(role))
                assert link.connection_count <= 2
        roles = [connect.original_principal for connect in peer.connects]
        assert roles == ["a", "b", "c", "d"]


async def test_the_link_speaks_tls_to_brokers(tmp_path: Path) -> None:
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    trust = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(trust))
    async with BrokerPeer(ssl_context=server) as peer:
        nodes = nodes_for({"b1:8080": peer.url})
        async with linked(tmp_path, nodes, tls=True, trust_certs_file=str(trust)) as link:
            answer = await link.partitioned_metadata(
                "persistent://public/default/t", auto_creation=False
            )
        assert answer == PartitionCount(0)
        assert [c.creation for c in peer.seen if c.type_name == "PARTITIONED_METADATA"] == [False]


async def test_a_lookup_goes_to_the_named_broker_and_follows_one_redirect(tmp_path: Path) -> None:
    async with BrokerPeer(name="leader") as leader, BrokerPeer(name="b2") as b2:
        leader.redirect_to = b2.url
        nodes = nodes_for({"b1:8080": leader.url, "b2:8080": b2.url})
        async with linked(tmp_path, nodes) as link:
            answer = await link.lookup("persistent://public/default/t", "b1:8080")
            assert isinstance(answer, BrokerLookup)
            assert (answer.connect, answer.broker_url) == (True, b2.url)
            # Non-authoritative to the leader, naming the internal listener the brokers have;
            # then as the Redirect says.
            assert [(c.type_name, c.authoritative, c.listener_name) for c in leader.seen] == [
                ("CONNECT", None, None),
                ("LOOKUP", False, "internal"),
            ]
            assert [c.authoritative for c in b2.seen if c.type_name == "LOOKUP"] == [True]
            # No broker named (or one the view does not know): the next broker in turn.
            b2.seen.clear()
            leader.seen.clear()
            leader.redirect_to = None
            answer = await link.lookup("persistent://public/default/u", "gone:8080")
            assert isinstance(answer, BrokerLookup) and answer.connect
            assert len(leader.topics_seen("LOOKUP")) + len(b2.topics_seen("LOOKUP")) == 1
