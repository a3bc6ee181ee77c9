"""Issue 40: the real `pulsar-client`, set up with NO listener name, reaches the owner's address
for the listener the gateway chose, when the metadata cannot answer Connect and the gateway
asks a broker itself (serving.forwarded_lookups, brokers.lookup_forwarder).

The brokers are test peers with one bind address each (tests/one_bind_brokers.py): asked with
no listener name they answer their internal address, as real brokers do. Before the gateway
forwarded, it answered Redirect and the client, re-asking the broker with no name, ended on
the owner's internal address (127.0.0.1) instead of its external one (127.0.0.2).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pulsar
import pytest

from pulsar_lookup_gateway.brokers.lookup_forwarder import BrokerLookupForwarder
from pulsar_lookup_gateway.gateway.check_config_command import describe_config
from pulsar_lookup_gateway.gateway.process import Gateway
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import BaseCommand
from pulsar_lookup_gateway.metadata_store.synthetic import topic_in_range
from pulsar_lookup_gateway.serving.forwarded_lookups import ForwardedLookups
from tests.broker_peer import RawClient
from tests.e2e.clients import in_thread, produce, reached
from tests.gateways import config_from, running
from tests.one_bind_brokers import (
    EXTENSIBLE,
    MODULAR,
    OneBindCluster,
    gateway_conf,
)

pytestmark = pytest.mark.e2e

TOPIC = topic_in_range(0x00000000, 0x40000000)
SYSTEM_TOPIC_VIEW = (
    "org.apache.pulsar.broker.loadbalance.extensions.channel.ServiceUnitStateTableViewImpl"
)
METADATA_STORE_VIEW = (
    "org.apache.pulsar.broker.loadbalance.extensions.channel."
    "ServiceUnitStateMetadataStoreTableViewImpl"
)


@contextlib.asynccontextmanager
async def world(
    tmp_path: Path,
    brokers: OneBindCluster,
    *,
    extra_conf: str = "",
    extra_nodes: dict[str, Any] | None = None,
) -> AsyncIterator[Gateway]:
    async with brokers.running():
        snapshot = brokers.write(tmp_path / "cluster.json", extra=extra_nodes)
        async with running(config_from(gateway_conf(snapshot, extra=extra_conf))) as gateway:
            yield gateway


def binary_url(gateway: Gateway, listener: str) -> str:
    host = "127.0.0.2" if listener == "external" else "127.0.0.1"
    return f"pulsar://{host}:{gateway.port_of(listener, 'pulsar')}"


def http_url(gateway: Gateway, listener: str) -> str:
    host = "127.0.0.2" if listener == "external" else "127.0.0.1"
    return f"http://{host}:{gateway.port_of(listener, 'http')}"


# -- extensible load manager, ownership in its system topic ---------------------------------


async def test_extensible_system_topic_client_lands_on_the_owners_external_address(
    tmp_path: Path,
) -> None:
    brokers = OneBindCluster(load_manager=EXTENSIBLE, assignee=2)
    async with world(tmp_path, brokers) as gateway:
        await in_thread(produce, binary_url(gateway, "external"), TOPIC)
    owner = brokers.broker(2)
    assert reached(owner.external, TOPIC)
    assert brokers.reached() == {"b2-external": [TOPIC]}  # never an internal address
    # The gateway asked for the external listener, non-authoritatively, then followed the
    # redirect itself (with its authoritative flag) where the first broker was not the owner.
    asked = [lookup for b in brokers.brokers for lookup in b.lookups()]
    assert {(topic, name) for topic, name, _, _ in asked} == {(TOPIC, "external")}
    assert owner.lookups()[-1][2] is (len(asked) > 1)


async def test_extensible_listener_chosen_by_client_network_is_kept(tmp_path: Path) -> None:
    brokers = OneBindCluster(load_manager=EXTENSIBLE, assignee=1)
    conf = "listener.external.clientCidrs=127.0.0.0/8\n"
    async with world(tmp_path, brokers, extra_conf=conf) as gateway:
        # the client comes to the INTERNAL socket; its network chooses the external listener
        await in_thread(produce, binary_url(gateway, "internal"), TOPIC)
    assert brokers.reached() == {"b1-external": [TOPIC]}


async def test_internal_listener_lookup_names_no_listener(tmp_path: Path) -> None:
    brokers = OneBindCluster(load_manager=EXTENSIBLE, assignee=1)
    async with world(tmp_path, brokers) as gateway:
        await in_thread(produce, binary_url(gateway, "internal"), TOPIC)
    assert brokers.reached() == {"b1-bind": [TOPIC]}
    asked = [lookup for b in brokers.brokers for lookup in b.lookups()]
    assert asked and all(name == "" for _, name, _, _ in asked)  # unset: the internal one
    # and the gateway asked them (the client only produced there)
    versions = [c.client_version for b in brokers.brokers for c in b.bind.connects]
    assert any(v.startswith("pulsar-lookup-gateway") for v in versions)


# -- modular load manager, unowned bundle ---------------------------------------------------


async def test_modular_unowned_bundle_starts_at_the_leader_and_keeps_the_listener(
    tmp_path: Path,
) -> None:
    brokers = OneBindCluster(load_manager=MODULAR, leader=2, assignee=1)
    async with world(tmp_path, brokers) as gateway:
        await in_thread(produce, binary_url(gateway, "external"), TOPIC)
    assert brokers.reached() == {"b1-external": [TOPIC]}
    leader, picked = brokers.broker(2), brokers.broker(1)
    assert leader.lookups() == [(TOPIC, "external", False, ())]
    assert picked.lookups() == [(TOPIC, "external", True, ())]  # the leader's redirect said so


async def test_modular_unowned_bundle_over_http_keeps_the_listener(tmp_path: Path) -> None:
    brokers = OneBindCluster(load_manager=MODULAR, leader=2, assignee=1)
    async with world(tmp_path, brokers) as gateway:
        await in_thread(produce, http_url(gateway, "external"), TOPIC)
    assert brokers.reached() == {"b1-external": [TOPIC]}


async def test_the_clients_lookup_properties_are_passed_on(tmp_path: Path) -> None:
    brokers = OneBindCluster(load_manager=MODULAR, leader=2, assignee=1)
    async with world(tmp_path, brokers) as gateway:
        port = gateway.port_of("external", "pulsar")
        async with await RawClient.open("127.0.0.2", port) as client:
            await client.handshake()
            client.send(codec.lookup(TOPIC, 7, properties=[("region", "eu")]))
            answer = await client.expect()
    body = answer.lookupTopicResponse
    assert body.response == body.Connect
    assert body.brokerServiceUrl == brokers.broker(1).external.url
    assert brokers.broker(2).lookups() == [(TOPIC, "external", False, (("region", "eu"),))]


# -- coalescing, coming back, an unreachable broker ---------------------------------------------


async def test_a_storm_of_one_bundle_is_one_forwarded_lookup(tmp_path: Path) -> None:
    brokers = OneBindCluster(load_manager=MODULAR, leader=2, assignee=1)
    topics = [f"{TOPIC}-{n}" for n in range(40)]
    topics = [t for t in topics if t.startswith("persistent://")]
    async with world(tmp_path, brokers) as gateway:
        port = gateway.port_of("external", "pulsar")

        async def ask(topic: str, request_id: int) -> BaseCommand:
            client = await RawClient.open("127.0.0.2", port)
            try:
                await client.handshake()
                return await client.lookup(topic, request_id)
            finally:
                await client.close()

        # every topic of the namespace's bundles at once (4 bundles)
        answers = await asyncio.gather(*(ask(t, i + 1) for i, t in enumerate(topics)))
        counted = forwarded_counts(gateway)
    assert all(a.lookupTopicResponse.response == a.lookupTopicResponse.Connect for a in answers)
    leader_lookups = brokers.broker(2).lookups()
    bundles = {_bundle_of(t) for t in topics}
    assert len(leader_lookups) == len(bundles)  # one per bundle, not one per topic
    # /metrics: one "asked" per bundle, every other client joined an ask or got a kept answer
    assert counted["asked"] == len(bundles)
    assert counted["joined"] + counted["kept"] == len(topics) - len(bundles)
    assert counted["failed"] == counted["refused"] == 0


def forwarded_counts(gateway: Any) -> dict[str, float]:
    """pulsar_lookup_gateway_forwarded_lookups_total by outcome, as /metrics shows it."""
    registry = gateway.service.metrics.registry
    return {
        outcome: registry.get_sample_value(
            "pulsar_lookup_gateway_forwarded_lookups_total", {"outcome": outcome}
        )
        or 0.0
        for outcome in ("asked", "joined", "kept", "failed", "refused")
    }


def _bundle_of(topic: str) -> int:
    from pulsar_lookup_gateway.lookup.bundles import topic_hash

    return topic_hash(topic) >> 30  # the four equal bundles


async def test_a_client_back_for_its_topic_is_not_sent_to_the_broker_that_let_go(
    tmp_path: Path,
) -> None:
    brokers = OneBindCluster(load_manager=EXTENSIBLE, assignee=1)
    async with world(tmp_path, brokers) as gateway:
        service = gateway.service
        assert service.forwarded is not None
        # Kept far longer than the test: only the client's coming back makes it ask again.
        service.forwarded = ForwardedLookups(
            service.memo,
            lambda: service.source.view,
            service.forwarded._forwarder,
            unwatched_ttl=600,
        )
        url = binary_url(gateway, "external")
        await in_thread(produce, url, TOPIC)
        brokers.owners[TOPIC] = 2  # the load manager moved the bundle to b2
        await in_thread(produce, url, TOPIC)
    assert brokers.broker(1).external.producer_topics() == [TOPIC]
    assert brokers.broker(2).external.producer_topics() == [TOPIC]


async def test_an_unreachable_broker_is_service_not_ready_not_a_hang(tmp_path: Path) -> None:
    brokers = OneBindCluster(load_manager=MODULAR, leader=2, assignee=1)
    async with world(tmp_path, brokers) as gateway:
        for broker in brokers.brokers:
            await broker.bind.stop()  # nothing listens at their internal addresses now
        port = gateway.port_of("external", "pulsar")
        async with await RawClient.open("127.0.0.2", port) as client:
            await client.handshake()
            answer = await client.lookup(TOPIC, 1, timeout=30)
        with pytest.raises(pulsar.PulsarException):
            await in_thread(produce, binary_url(gateway, "external"), TOPIC, timeout=2)
        counted = forwarded_counts(gateway)
    assert counted["failed"] >= 1 and counted["asked"] == counted["kept"] == 0
    body = answer.lookupTopicResponse
    assert body.response == body.Failed
    assert body.error == codec.ServerError.ServiceNotReady  # retryable, as a broker's
    assert brokers.reached() == {}


# -- the table view as the brokers configure it --------------------------------------------------


def stale_tree(owner: str) -> dict[str, Any]:
    """A /service_unit_state tree left from a migration: it says `owner` owns every bundle."""
    nodes: dict[str, Any] = {}
    for lower, upper in (
        ("0x00000000", "0x40000000"),
        ("0x40000000", "0x80000000"),
        ("0x80000000", "0xc0000000"),
        ("0xc0000000", "0xffffffff"),
    ):
        nodes[f"/service_unit_state/public/default/{lower}_{upper}"] = {
            "state": "Owned",
            "dstBroker": owner,
            "versionId": 1,
        }
    return nodes


async def test_system_topic_view_never_reads_a_stale_tree(tmp_path: Path) -> None:
    brokers = OneBindCluster(load_manager=EXTENSIBLE, assignee=2)  # b2 owns it now
    conf = f"loadManagerServiceUnitStateTableViewClassName={SYSTEM_TOPIC_VIEW}\n"
    nodes = stale_tree("b1:8080")  # the old tree says b1
    async with world(tmp_path, brokers, extra_conf=conf, extra_nodes=nodes) as gateway:
        await in_thread(produce, binary_url(gateway, "external"), TOPIC)
        described = describe_config(gateway.config)
    assert brokers.reached() == {"b2-external": [TOPIC]}
    assert "system topic: lookups are forwarded" in described


async def test_metadata_store_view_is_read_as_before(tmp_path: Path) -> None:
    brokers = OneBindCluster(load_manager=EXTENSIBLE, assignee=2)
    conf = f"loadManagerServiceUnitStateTableViewClassName={METADATA_STORE_VIEW}\n"
    async with world(tmp_path, brokers, extra_conf=conf, extra_nodes=stale_tree("b1:8080")) as g:
        await in_thread(produce, binary_url(g, "external"), TOPIC)
    assert brokers.reached() == {"b1-external": [TOPIC]}  # the tree's owner, nobody asked
    assert all(not b.lookups() for b in brokers.brokers)


def test_without_the_key_check_config_says_it_detects() -> None:
    config = config_from(gateway_conf(Path("/nonexistent.json")))
    assert "detected (loadManagerServiceUnitStateTableViewClassName unset)" in describe_config(
        config
    )


# -- what the extensible load manager answers without its table view ---------------------------


async def test_heartbeat_namespace_goes_to_the_broker_it_names(tmp_path: Path) -> None:
    brokers = OneBindCluster(load_manager=EXTENSIBLE, assignee=1)
    topic = "persistent://pulsar/b2:8080/healthcheck"
    nodes: dict[str, Any] = {"/admin/policies/pulsar/b2:8080": {}}
    async with world(tmp_path, brokers, extra_nodes=nodes) as gateway:
        await in_thread(produce, binary_url(gateway, "external"), topic)
    assert brokers.reached() == {"b2-external": [topic]}
    assert all(not b.lookups() for b in brokers.brokers)  # no broker needed asking


async def test_load_manager_topics_go_to_the_channel_owner(tmp_path: Path) -> None:
    brokers = OneBindCluster(load_manager=EXTENSIBLE, leader=2, assignee=1)
    topic = "non-persistent://pulsar/system/loadbalancer-broker-load-data"
    nodes: dict[str, Any] = {"/admin/policies/pulsar/system": {}}
    async with world(tmp_path, brokers, extra_nodes=nodes) as gateway:
        await in_thread(produce, binary_url(gateway, "external"), topic)
    assert brokers.reached() == {"b2-external": [topic]}
    assert all(not b.lookups() for b in brokers.brokers)


# -- a plain HTTP redirect to a target with only an https URL -----------------------------------


async def test_plain_http_redirect_without_an_http_url_is_412(tmp_path: Path) -> None:
    brokers = OneBindCluster(load_manager=MODULAR)
    nodes = {
        "/admin/policies/public/default": {
            "replication_clusters": ["peer"],
            "bundles": {"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 1},
        },
        "/admin/clusters/local": {"serviceUrl": "http://127.0.0.1:1", "peerClusterNames": ["peer"]},
        "/admin/clusters/peer": {
            "serviceUrlTls": "https://peer.example.com:8443",
            "brokerServiceUrlTls": "pulsar+ssl://peer.example.com:6651",
        },
    }
    async with world(tmp_path, brokers, extra_conf="clusterName=local\n", extra_nodes=nodes) as g:
        url = http_url(g, "external")
        rest = "/lookup/v2/topic/persistent/public/default/t"
        async with (
            aiohttp.ClientSession() as session,
            session.get(url + rest, allow_redirects=False) as response,
        ):
            status, body = response.status, await response.text()
        with pytest.raises(pulsar.PulsarException):
            await in_thread(produce, url, TOPIC, timeout=2)
    assert status == 412
    assert json.loads(body) == {"reason": "Redirected cluster's service url is not configured."}


async def test_http_lookup_of_a_topic_that_may_not_be_created_asks_no_broker(
    tmp_path: Path,
) -> None:
    # A broker asked would take the bundle for a topic the gateway then answers 404.
    brokers = OneBindCluster(load_manager=MODULAR, leader=2, assignee=1)
    conf = "allowAutoTopicCreation=false\n"
    async with world(tmp_path, brokers, extra_conf=conf) as gateway:
        rest = "/lookup/v2/topic/persistent/public/default/" + TOPIC.rsplit("/", 1)[1]
        async with (
            aiohttp.ClientSession() as session,
            session.get(http_url(gateway, "external") + rest, allow_redirects=False) as response,
        ):
            status = response.status
    assert status == 404
    assert all(not b.lookups() for b in brokers.brokers)


async def test_system_topic_view_rest_list_asks_every_broker_not_the_stale_tree(
    tmp_path: Path,
) -> None:
    brokers = OneBindCluster(load_manager=EXTENSIBLE)
    conf = f"loadManagerServiceUnitStateTableViewClassName={SYSTEM_TOPIC_VIEW}\n"
    nodes = stale_tree("b1:8080")
    async with world(tmp_path, brokers, extra_conf=conf, extra_nodes=nodes) as gateway:
        rest = "/admin/v2/namespaces/public/default/topics?mode=NON_PERSISTENT"
        async with (
            aiohttp.ClientSession() as session,
            session.get(http_url(gateway, "internal") + rest) as response,
        ):
            status = response.status
    assert status == 200
    # the owners are unknown (the system topic): every live broker is asked, b2 too
    for broker in brokers.brokers:
        assert "GET_TOPICS_OF_NAMESPACE" in broker.bind.types_seen(), broker.broker_id


async def test_a_broker_that_does_not_answer_is_service_not_ready_by_the_deadline(
    tmp_path: Path,
) -> None:
    brokers = OneBindCluster(load_manager=MODULAR, leader=2, assignee=1)
    async with world(tmp_path, brokers) as gateway:
        for broker in brokers.brokers:
            broker.bind.silent = True  # CONNECTED, then nothing
        service = gateway.service
        service.forwarded = ForwardedLookups(
            service.memo,
            lambda: service.source.view,
            BrokerLookupForwarder(gateway.broker_link, deadline=1.0),
        )
        port = gateway.port_of("external", "pulsar")
        async with await RawClient.open("127.0.0.2", port) as client:
            await client.handshake()
            answer = await client.lookup(TOPIC, 1, timeout=30)
    body = answer.lookupTopicResponse
    assert body.response == body.Failed
    assert body.error == codec.ServerError.ServiceNotReady
    assert "in time" in body.message
