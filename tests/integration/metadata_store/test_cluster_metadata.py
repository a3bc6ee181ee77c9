"""Cluster metadata beyond one store and the modular load manager, on a real ZooKeeper: a
separate configuration store, geo-replication (clusterName), the extensible load manager's
table view, redirects spread over brokers, and no TLS downgrade on HTTP redirects."""

from __future__ import annotations

import json
import logging
import ssl
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme
from kazoo.client import KazooClient

from pulsar_lookup_gateway.gateway.process import Gateway
from pulsar_lookup_gateway.listeners.config.conf_file import parse_properties
from pulsar_lookup_gateway.listeners.config.model import validate_raw
from pulsar_lookup_gateway.listeners.protocol.codec import LookupType, ServerError
from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure
from pulsar_lookup_gateway.lookup.model import is_configuration_path
from pulsar_lookup_gateway.lookup.resolve import ResponseKind
from pulsar_lookup_gateway.lookup.selection import ChoiceSource, ListenerChoice
from pulsar_lookup_gateway.lookup.source import MetadataSource
from pulsar_lookup_gateway.metadata_store.admin import connected, encode, seed
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper
from pulsar_lookup_gateway.metadata_store.open import open_source
from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
from pulsar_lookup_gateway.metadata_store.synthetic import (
    broker_id,
    cluster,
    ownership_node,
    topic_in_range,
)
from pulsar_lookup_gateway.metadata_store.url import parse_metadata_url
from pulsar_lookup_gateway.serving.service import LookupService
from tests.broker_peer import RawClient
from tests.waiting import eventually

pytestmark = pytest.mark.zookeeper

NS = "public/default"
FIRST, SECOND = "0x00000000_0x40000000", "0x40000000_0x80000000"
IN_FIRST = topic_in_range(0, 0x40000000)
IN_SECOND = topic_in_range(0x40000000, 0x80000000)
IN_LAST = topic_in_range(0xC0000000, 0xFFFFFFFF)
EXTERNAL = ListenerChoice("external", ChoiceSource.EXPLICIT)
EXTENSIBLE = "org.apache.pulsar.broker.loadbalance.extensions.ExtensibleLoadManagerImpl"
SIXTY_FOUR = [f"0x{i * 2**26:08x}" for i in range(64)] + ["0xffffffff"]
FOUR_BUNDLES = ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"]
PEER = {
    "serviceUrl": "http://east.example.com:8080",
    "serviceUrlTls": "https://east.example.com:8443",
    "brokerServiceUrl": "pulsar://east.example.com:6650",
    "brokerServiceUrlTls": "pulsar+ssl://east.example.com:6651",
}


def split(nodes: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(local store, configuration store) nodes, as Pulsar places them."""
    configuration = {p: v for p, v in nodes.items() if is_configuration_path(p)}
    return {p: v for p, v in nodes.items() if p not in configuration}, configuration


def geo_cluster() -> dict[str, Any]:
    """Namespaces public/default (served by west), geo/far (only by the peer east)."""
    nodes = cluster(owned={FIRST: 1})
    nodes[f"/admin/policies/{NS}"]["replication_clusters"] = ["west", "east"]
    nodes["/admin/policies/geo/far"] = {"replication_clusters": ["east"]}
    nodes["/admin/clusters/west"] = {"serviceUrl": "http://west:8080", "peerClusterNames": ["east"]}
    nodes["/admin/clusters/east"] = PEER
    nodes[f"/admin/partitioned-topics/{NS}/persistent/orders"] = {"partitions": 3}
    return nodes


@pytest.fixture
def conf_chroot(zookeeper: EmbeddedZooKeeper) -> str:
    """A second chroot: the configuration store."""
    chroot = f"/conf-{uuid.uuid4().hex[:12]}"
    with connected(zookeeper.connect_string) as admin:
        admin.ensure_path(chroot)
    return chroot


@pytest.fixture
def conf_admin(zookeeper: EmbeddedZooKeeper, conf_chroot: str) -> Iterator[KazooClient]:
    with connected(zookeeper.connect_string + conf_chroot) as client:
        yield client


@asynccontextmanager
async def started(source: MetadataSource) -> AsyncIterator[MetadataSource]:
    await source.start()
    try:
        yield source
    finally:
        await source.close()


async def outcome(service: LookupService, topic: str) -> Any:
    try:
        answer = await service.lookup(topic, EXTERNAL, "test")
    except LookupFailure as exc:
        return exc.kind
    return (answer.response, answer.broker_id, answer.authoritative)


# -- a separate configuration store ----------------------------------------------------------


async def test_split_configuration_store_reads_and_watches_both_stores(
    zookeeper: EmbeddedZooKeeper,
    zk_chroot: str,
    zk_admin: KazooClient,
    conf_chroot: str,
    conf_admin: KazooClient,
) -> None:
    local_nodes, configuration_nodes = split(geo_cluster())
    assert f"/admin/policies/{NS}" in configuration_nodes
    assert f"/namespace/{NS}/{FIRST}" in local_nodes
    seed(zk_admin, local_nodes)
    seed(conf_admin, configuration_nodes)
    local = parse_metadata_url(f"zk:{zookeeper.connect_string}{zk_chroot}")
    configuration = parse_metadata_url(f"zk:{zookeeper.connect_string}{conf_chroot}")

    # One store only: every namespace looks missing (its policies are in the other store).
    async with started(open_source(local, start_timeout=15)) as alone:
        assert await outcome(LookupService(alone), IN_FIRST) is FailureKind.NAMESPACE_NOT_FOUND

    source = open_source(local, configuration=configuration, start_timeout=15)
    async with started(source):
        service = LookupService(source)
        assert source.status().ready
        assert await outcome(service, IN_FIRST) == (ResponseKind.CONNECT, broker_id(1), True)
        assert await outcome(service, IN_LAST) == (ResponseKind.REDIRECT, broker_id(1), False)
        assert await service.partitions("orders") == 3

        # A change in the configuration store (a new partitioned topic) ...
        conf_admin.create(
            f"/admin/partitioned-topics/{NS}/persistent/fresh", encode({"partitions": 5})
        )

        async def partitioned() -> bool:
            return await service.partitions("fresh") == 5

        await eventually(partitioned, timeout=5)
        # ... and in the local store (the bundle moves; then a split in the local policies).
        zk_admin.set(f"/namespace/{NS}/{FIRST}", encode(ownership_node(3)))

        async def moved() -> bool:
            return bool(
                await outcome(service, IN_FIRST) == (ResponseKind.CONNECT, broker_id(3), True)
            )

        await eventually(moved, timeout=5)
        split_bundles = ["0x00000000", "0x20000000", "0xffffffff"]
        zk_admin.create(
            f"/admin/local-policies/{NS}",
            encode({"bundles": {"boundaries": split_bundles}}),
            makepath=True,
        )

        async def split_seen() -> bool:
            answer = await service.lookup(IN_LAST, EXTERNAL, "test")
            return answer.bundle.name == "0x20000000_0xffffffff"

        await eventually(split_seen, timeout=5)


async def test_split_configuration_store_from_two_snapshot_files(tmp_path: Path) -> None:
    local_nodes, configuration_nodes = split(geo_cluster())
    write_snapshot(tmp_path / "local.json", local_nodes)
    write_snapshot(tmp_path / "conf.json", configuration_nodes)
    source = open_source(
        parse_metadata_url(f"file:{tmp_path / 'local.json'}"),
        configuration=parse_metadata_url(f"file:{tmp_path / 'conf.json'}"),
    )
    async with started(source):
        service = LookupService(source)
        assert await outcome(service, IN_FIRST) == (ResponseKind.CONNECT, broker_id(1), True)
        assert await service.partitions("orders") == 3


# -- geo-replication, deleted namespaces and TLS redirects through the whole gateway -----------


@pytest.fixture
def tls_files(tmp_path: Path) -> tuple[Path, Path, ssl.SSLContext]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert_path, key_path = tmp_path / "server.crt", tmp_path / "server.key"
    cert.cert_chain_pems[0].write_to_path(str(cert_path))
    cert.private_key_pem.write_to_path(str(key_path))
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return cert_path, key_path, client


@asynccontextmanager
async def gateway(text: str) -> AsyncIterator[Gateway]:
    loaded = validate_raw(parse_properties(text, "test.conf"))
    gw = Gateway(loaded.config)
    await gw.start()
    try:
        yield gw
    finally:
        await gw.stop()


def gateway_conf(metadata: str, extra: str, tls: tuple[Path, Path, ssl.SSLContext]) -> str:
    return (
        f"metadataStoreUrl={metadata}\n{extra}"
        "advertisedListeners=internal:pulsar://127.0.0.1:6650,internal:http://127.0.0.1:8080,"
        "internal:https://127.0.0.1:8443\n"
        "bindAddresses=internal:pulsar://127.0.0.1:0,internal:http://127.0.0.1:0,"
        "internal:https://127.0.0.1:0\n"
        f"brokerServicePort=\nwebServicePort=\ntlsCertificateFilePath={tls[0]}\n"
        f"tlsKeyFilePath={tls[1]}\n"
    )


async def binary_lookup(gw: Gateway, topic: str) -> Any:
    async with await RawClient.open("127.0.0.1", gw.port_of("internal", "pulsar")) as raw:
        await raw.handshake()
        return (await raw.lookup(topic)).lookupTopicResponse


async def http_lookup(
    gw: Gateway, session: aiohttp.ClientSession, topic: str, tls: ssl.SSLContext | None = None
) -> tuple[int, str | None, Any]:
    scheme = "https" if tls else "http"
    base = f"{scheme}://127.0.0.1:{gw.port_of('internal', scheme)}"
    path = "/lookup/v2/topic/" + topic.replace("://", "/")
    async with session.get(base + path, allow_redirects=False, ssl=tls or True) as response:
        body = await response.text()
        return response.status, response.headers.get("Location"), body and json.loads(body)


async def test_geo_replication_deleted_namespace_and_no_tls_downgrade(
    zookeeper: EmbeddedZooKeeper,
    zk_chroot: str,
    zk_admin: KazooClient,
    conf_chroot: str,
    conf_admin: KazooClient,
    tls_files: tuple[Path, Path, ssl.SSLContext],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="pulsar_lookup_gateway.gateway.process")
    local_nodes, configuration_nodes = split(geo_cluster())
    seed(zk_admin, local_nodes)
    seed(conf_admin, configuration_nodes)
    connect = zookeeper.connect_string
    text = gateway_conf(
        f"zk:{connect}{zk_chroot}",
        f"configurationMetadataStoreUrl=zk:{connect}{conf_chroot}\nclusterName=west\n",
        tls_files,
    )
    far = "persistent://geo/far/t"
    async with gateway(text) as gw, aiohttp.ClientSession() as session:
        assert "clusterName=west" in caplog.text
        # A namespace only the peer cluster serves: an authoritative redirect to the peer.
        body = await binary_lookup(gw, far)
        assert (body.response, body.authoritative) == (LookupType.Redirect, True)
        assert body.brokerServiceUrl == PEER["brokerServiceUrl"]
        assert body.brokerServiceUrlTls == PEER["brokerServiceUrlTls"]
        status, location, _ = await http_lookup(gw, session, far)
        assert status == 307
        assert location == f"{PEER['serviceUrl']}/lookup/v2/topic/persistent/geo/far/t" + (
            "?authoritative=true&listenerName=internal"
        )
        status, location, _ = await http_lookup(gw, session, far, tls_files[2])
        assert status == 307 and location is not None
        assert location.startswith(PEER["serviceUrlTls"] + "/lookup/v2/topic/")

        # No peer serves it any more: the broker's failure and wording.
        conf_admin.set("/admin/policies/geo/far", encode({"replication_clusters": ["north"]}))

        async def refused() -> bool:
            body = await binary_lookup(gw, far)
            return bool(
                body.response == LookupType.Failed and body.error == ServerError.MetadataError
            )

        await eventually(refused, timeout=5)
        assert "Namespace missing local cluster name in clusters list" in body_message(
            await binary_lookup(gw, far)
        )
        status, _, reason = await http_lookup(gw, session, far)
        assert status == 412 and "local_cluster=west" in reason["reason"]

        # A deleted namespace fails as not found.
        policies = {"replication_clusters": ["west"], "deleted": True}
        conf_admin.set(f"/admin/policies/{NS}", encode(policies))

        async def deleted() -> bool:
            body = await binary_lookup(gw, IN_FIRST)
            return bool(
                body.response == LookupType.Failed and body.error == ServerError.TopicNotFound
            )

        await eventually(deleted, timeout=5)
        assert body_message(await binary_lookup(gw, IN_FIRST)) == "Namespace is deleted"
        status, _, reason = await http_lookup(gw, session, IN_FIRST)
        assert (status, reason) == (404, {"reason": "Namespace is deleted"})

        # Undeleted, it is served again. (A redirect to a target without an https URL is 412:
        # tests/integration/http_api/test_http_api.py; an unowned bundle here is forwarded.)
        policies = {**geo_cluster()[f"/admin/policies/{NS}"], "replication_clusters": ["west"]}
        conf_admin.set(f"/admin/policies/{NS}", encode(policies))

        async def undeleted() -> bool:
            return bool((await binary_lookup(gw, IN_FIRST)).response == LookupType.Connect)

        await eventually(undeleted, timeout=5)
        status, _, answer = await http_lookup(gw, session, IN_FIRST)
        assert status == 200 and answer["brokerUrl"] == "pulsar://10.0.0.1:6650"


def body_message(body: Any) -> str:
    return str(body.message)


async def test_without_cluster_name_the_checks_are_skipped_and_logged(
    tmp_path: Path, tls_files: tuple[Path, Path, ssl.SSLContext], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pulsar_lookup_gateway.gateway.process")
    nodes = geo_cluster()
    # geo/far in one bundle that broker 1 owns: served here, as if the cluster were one of its own
    far = nodes["/admin/policies/geo/far"]
    far["bundles"] = {"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 1}
    nodes["/namespace/geo/far/0x00000000_0xffffffff"] = ownership_node(1)
    write_snapshot(tmp_path / "c.json", nodes)
    async with gateway(gateway_conf(f"file:{tmp_path / 'c.json'}", "", tls_files)) as gw:
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert [r.getMessage() for r in warnings if "clusterName" in r.getMessage()] == [
            "clusterName is not set: geo-replication checks are skipped (a namespace another "
            "cluster serves is looked up here)"
        ]
        body = await binary_lookup(gw, "persistent://geo/far/t")
        # local: the owner's address, not a redirect to the peer cluster east
        assert body.response == LookupType.Connect
        assert body.brokerServiceUrl == "pulsar://10.0.0.1:6650"


# -- the extensible load manager -----------------------------------------------------------------


def extensible_cluster(boundaries: list[str] | None = None) -> dict[str, Any]:
    nodes = cluster(brokers=4, leader=None, boundaries=boundaries or SIXTY_FOUR)
    for i in (1, 2, 3, 4):
        nodes[f"/loadbalance/brokers/{broker_id(i)}"]["loadManagerClassName"] = EXTENSIBLE
    nodes["/loadbalance/extension/leader"] = {"brokerId": broker_id(1)}
    return nodes


def unit_state(state: str, dst: str | None = None, src: str | None = None) -> bytes:
    node: dict[str, Any] = {"state": state, "force": False, "timestamp": 1, "versionId": 1}
    if dst is not None:
        node["dstBroker"] = dst
    if src is not None:
        node["sourceBroker"] = src
    return encode(node)


async def test_extensible_table_view_ownership_and_its_changes(
    zk_admin: KazooClient, zookeeper: EmbeddedZooKeeper, zk_chroot: str
) -> None:
    seed(zk_admin, extensible_cluster(FOUR_BUNDLES))
    url = parse_metadata_url(f"zk:{zookeeper.connect_string}{zk_chroot}")
    async with started(open_source(url, start_timeout=15)) as source:
        service = LookupService(source)
        # No /service_unit_state: ownership is in a system topic; a redirect, never
        # authoritative.
        first = await outcome(service, IN_FIRST)
        assert first[0] is ResponseKind.REDIRECT and first[2] is False
        # The table view appears (the root's children are watched): its owner answers.
        path = f"/service_unit_state/{NS}/{FIRST}"
        zk_admin.create(path, unit_state("Owned", dst=broker_id(2)), makepath=True)

        async def owned_by_2() -> bool:
            return bool(
                await outcome(service, IN_FIRST) == (ResponseKind.CONNECT, broker_id(2), True)
            )

        await eventually(owned_by_2, timeout=5)
        # A transfer in flight: the destination holds the client until it owns the bundle.
        zk_admin.set(path, unit_state("Releasing", dst=broker_id(3), src=broker_id(2)))

        async def to_3() -> bool:
            return bool(
                await outcome(service, IN_FIRST) == (ResponseKind.CONNECT, broker_id(3), True)
            )

        await eventually(to_3, timeout=5)
        # Unloaded without a destination: nobody owns it.
        zk_admin.set(path, unit_state("Free", src=broker_id(3)))

        async def free() -> bool:
            answer = await outcome(service, IN_FIRST)
            return answer[0] is ResponseKind.REDIRECT and answer[2] is False

        await eventually(free, timeout=5)
        zk_admin.set(path, unit_state("Owned", dst="gone:8080"))

        async def inactive() -> bool:
            return await outcome(service, IN_FIRST) is FailureKind.OWNER_INACTIVE

        await eventually(inactive, timeout=5)
        zk_admin.set(path, unit_state("Deleted", src=broker_id(3)))

        async def deleted() -> bool:
            return await outcome(service, IN_FIRST) is FailureKind.BUNDLE_DELETED

        await eventually(deleted, timeout=5)


@pytest.mark.parametrize("extensible", [True, False])
async def test_redirects_for_unowned_bundles_spread_over_the_brokers(
    zk_admin: KazooClient, zookeeper: EmbeddedZooKeeper, zk_chroot: str, extensible: bool
) -> None:
    # Extensible without the table view, or modular without a leader: every unowned bundle
    # goes to the broker its hash picks, never authoritatively, and not all to the lowest id.
    nodes = extensible_cluster() if extensible else cluster(brokers=4, leader=None)
    if not extensible:
        nodes[f"/admin/policies/{NS}"]["bundles"] = {"boundaries": SIXTY_FOUR}
    seed(zk_admin, nodes)
    url = parse_metadata_url(f"zk:{zookeeper.connect_string}{zk_chroot}")
    targets: dict[str, set[str | None]] = {}
    async with started(open_source(url, start_timeout=15)) as source:
        service = LookupService(source)
        for n in range(400):
            answer = await service.lookup(f"t{n}", EXTERNAL, "test")
            assert (answer.response, answer.authoritative) == (ResponseKind.REDIRECT, False)
            targets.setdefault(answer.bundle.name, set()).add(answer.broker_id)
    assert all(len(brokers) == 1 for brokers in targets.values())  # one broker per bundle
    assert {b for brokers in targets.values() for b in brokers} == {
        broker_id(i) for i in (1, 2, 3, 4)
    }
