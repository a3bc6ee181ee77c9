"""The HTTP API over real sockets on 127.0.0.1: routes, listener precedence, redirects, errors,
operations routes, and the server's start/stop behaviour."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import ssl
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families
from yarl import URL

from pulsar_lookup_gateway.http_api.app import build_app
from pulsar_lookup_gateway.http_api.errors import STATUS
from pulsar_lookup_gateway.http_api.openapi import OPENAPI
from pulsar_lookup_gateway.http_api.server import HttpServer
from pulsar_lookup_gateway.http_api.settings import HttpSettings
from pulsar_lookup_gateway.listeners.endpoints.addresses import Endpoint, Scheme
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.lookup.bundles import topic_hash
from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure
from pulsar_lookup_gateway.lookup.resolve import ResolvePolicy
from pulsar_lookup_gateway.lookup.source import SourceStatus
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.metadata_store.synthetic import (
    broker_id,
    cluster,
    ownership_node,
)
from pulsar_lookup_gateway.serving.service import LookupService
from tests.integration.http_api.served import (
    LOOKUP,
    NS,
    OWNED_BUNDLE,
    OWNED_TOPIC,
    UNOWNED_HIGH,
    UNOWNED_LOW,
    UNOWNED_TOPIC,
    file_service,
    gateway_cluster,
    serving,
)

TABLE: list[dict[str, object]] = [
    {"url": "http://127.0.0.1:8080", "listener": None, "origin": "webServicePort"},
    {"url": "http://127.0.0.1:8081", "listener": "zone", "origin": "entry 'zone:...'"},
]


def local_name_in_range(prefix: str, lower: int, upper: int) -> str:
    """A local name starting with `prefix` whose topic hashes into [lower, upper)."""
    for n in range(100_000):
        local = f"{prefix}{n}"
        if lower <= topic_hash(f"persistent://{NS}/{local}") < upper:
            return local
    raise AssertionError("no name found")  # pragma: no cover


@dataclass
class Reply:
    status: int
    headers: Any
    text: str

    def json(self) -> Any:
        return json.loads(self.text)


async def get(
    session: aiohttp.ClientSession,
    server: HttpServer,
    path: str,
    *,
    headers: dict[str, str] | None = None,
    method: str = "GET",
    ssl_context: ssl.SSLContext | None = None,
) -> Reply:
    # encoded=True: the path goes out byte for byte (%2F stays %2F).
    url = URL(server.url + path, encoded=True)
    async with session.request(
        method, url, headers=headers, allow_redirects=False, ssl=ssl_context or True
    ) as response:
        return Reply(response.status, response.headers, await response.text())


@dataclass
class Gateway:
    service: LookupService
    untagged: HttpServer  # a legacy webServicePort socket: no listener
    zone: HttpServer  # a bindAddresses socket tagged 'zone'
    session: aiohttp.ClientSession

    def sample(self, name: str, **labels: str) -> float | None:
        return self.service.metrics.registry.get_sample_value(name, labels)


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with (
        file_service(tmp_path, gateway_cluster()) as service,
        serving(service, None, table=TABLE) as untagged,
        serving(service, "zone", table=TABLE) as zone,
        aiohttp.ClientSession() as session,
    ):
        yield Gateway(service, untagged, zone, session)


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def tls(ca: trustme.CA) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return server, client


# -- listener precedence: query > header > socket > internal; blank = absent -------------------

BROKER_URL = {
    "internal": "pulsar://10.0.0.1:6650",
    "external": "pulsar://b1.example.com:6650",
    "zone": "pulsar://zone.b1:6650",
}


@pytest.mark.parametrize(
    ("socket", "query", "header", "listener", "chosen_by"),
    [
        ("untagged", None, None, "internal", "internal"),
        ("untagged", None, "external", "external", "header"),
        ("untagged", "zone", "external", "zone", "explicit"),
        ("untagged", "", "external", "external", "header"),
        ("untagged", "  ", "  ", "internal", "internal"),
        ("zone", None, None, "zone", "socket"),
        ("zone", None, "external", "external", "header"),
        ("zone", "internal", "external", "internal", "explicit"),
        ("zone", "external", None, "external", "explicit"),
        ("zone", None, "", "zone", "socket"),
        ("zone", "", "", "zone", "socket"),
    ],
)
async def test_listener_precedence(
    gw: Gateway,
    socket: str,
    query: str | None,
    header: str | None,
    listener: str,
    chosen_by: str,
) -> None:
    server = gw.zone if socket == "zone" else gw.untagged
    path = f"{LOOKUP}/{OWNED_TOPIC}"
    if query is not None:
        path += f"?listenerName={query.replace(' ', '%20')}"
    headers = {"X-Pulsar-ListenerName": header} if header is not None else None

    reply = await get(gw.session, server, path, headers=headers)

    assert reply.status == 200, reply.text
    assert reply.json()["brokerUrl"] == BROKER_URL[listener]
    labels = {"listener": listener, "chosen_by": chosen_by, "protocol": "http"}
    assert gw.sample("pulsar_broker_lookup_answers_total", **labels) == 1.0


async def test_lookup_data_has_all_six_keys(gw: Gateway) -> None:
    reply = await get(gw.session, gw.untagged, f"{LOOKUP}/{OWNED_TOPIC}?listenerName=external")
    assert reply.status == 200
    assert reply.headers["Content-Type"].startswith("application/json")
    assert reply.json() == {
        "brokerUrl": "pulsar://b1.example.com:6650",
        "brokerUrlTls": "pulsar+ssl://b1.example.com:6651",
        "httpUrl": "",  # the listener has none; the owner's default is an internal address
        "httpUrlTls": "https://b1.example.com:8443",
        "nativeUrl": "pulsar://b1.example.com:6650",
        "brokerUrlSsl": "",
    }


async def test_internal_lookup_data_uses_empty_strings_for_missing_urls(gw: Gateway) -> None:
    reply = await get(gw.session, gw.untagged, f"{LOOKUP}/{OWNED_TOPIC}")
    assert reply.json() == {
        "brokerUrl": "pulsar://10.0.0.1:6650",
        "brokerUrlTls": "",
        "httpUrl": "http://10.0.0.1:8080",
        "httpUrlTls": "",
        "nativeUrl": "pulsar://10.0.0.1:6650",
        "brokerUrlSsl": "",
    }


@pytest.mark.parametrize("authoritative", ["true", "false", "TRUE", "garbage", ""])
async def test_authoritative_query_is_accepted(gw: Gateway, authoritative: str) -> None:
    reply = await get(
        gw.session, gw.untagged, f"{LOOKUP}/{OWNED_TOPIC}?authoritative={authoritative}"
    )
    assert reply.status == 200
    assert reply.json()["brokerUrl"] == BROKER_URL["internal"]


# -- 307 for a bundle nobody owns --------------------------------------------------------------


@pytest.mark.parametrize(
    ("socket", "query", "header", "location", "labels"),
    [
        # internal: the leader's default web URL, and no listenerName
        (
            "untagged",
            None,
            None,
            "http://10.0.0.1:8080{path}?authoritative=false",
            ("internal", "internal"),
        ),
        (
            "zone",
            None,
            None,
            "http://zone.b1:8080{path}?authoritative=false&listenerName=zone",
            ("zone", "socket"),
        ),
        (
            "zone",
            "internal",
            "external",
            "http://10.0.0.1:8080{path}?authoritative=false&listenerName=internal",
            ("internal", "explicit"),
        ),
    ],
)
async def test_unowned_bundle_redirects_to_the_leader(
    gw: Gateway,
    socket: str,
    query: str | None,
    header: str | None,
    location: str,
    labels: tuple[str, str],
) -> None:
    server = gw.zone if socket == "zone" else gw.untagged
    path = f"{LOOKUP}/{UNOWNED_TOPIC}"
    suffix = f"?listenerName={query}" if query is not None else ""
    headers = {"X-Pulsar-ListenerName": header} if header is not None else None

    reply = await get(gw.session, server, path + suffix, headers=headers)

    assert reply.status == 307
    assert reply.headers["Location"] == location.format(path=path)
    listener, chosen_by = labels
    sample = gw.sample(
        "pulsar_broker_lookup_redirects_total",
        listener=listener,
        chosen_by=chosen_by,
        protocol="http",
    )
    assert sample == 1.0


async def test_a_plain_redirect_to_an_https_only_listener_is_412(gw: Gateway) -> None:
    # 'external' has an https web URL only: master answers a plain request 412 (the gateway
    # used to send it to https://, which the client had not asked for).
    path = f"{LOOKUP}/{UNOWNED_TOPIC}"
    reply = await get(gw.session, gw.untagged, path, headers={"X-Pulsar-ListenerName": "external"})
    assert reply.status == 412
    assert "Location" not in reply.headers
    assert json.loads(reply.text) == {
        "reason": "Redirected cluster's service url is not configured."
    }


async def test_redirect_without_leader_is_never_authoritative(tmp_path: Path) -> None:
    async with (
        file_service(tmp_path, gateway_cluster(leader=None)) as service,
        serving(service, "zone") as server,
        aiohttp.ClientSession() as session,
    ):
        reply = await get(session, server, f"{LOOKUP}/{UNOWNED_TOPIC}")
    # A live broker chosen by the bundle's hash looks the bundle up itself (its load manager
    # places it): authoritative=false, so it does not simply take the bundle.
    assert reply.status == 307
    assert re.fullmatch(
        rf"http://zone\.b[123]:8080{LOOKUP}/{UNOWNED_TOPIC}\?authoritative=false&listenerName=zone",
        reply.headers["Location"],
    )


async def test_redirect_encodes_the_topic(gw: Gateway) -> None:
    local = local_name_in_range("we ird+name%", UNOWNED_LOW, UNOWNED_HIGH)
    sent = local.replace("%", "%25").replace("+", "%2B").replace(" ", "%20")

    reply = await get(gw.session, gw.zone, f"{LOOKUP}/{sent}")

    assert reply.status == 307
    encoded = local.replace("%", "%25").replace(" ", "%20").replace("+", "%2B")
    assert reply.headers["Location"] == (
        f"http://zone.b1:8080{LOOKUP}/{encoded}?authoritative=false&listenerName=zone"
    )


async def test_plus_in_the_topic_segment_is_a_space_as_in_pulsar(gw: Gateway) -> None:
    local = local_name_in_range("a b", UNOWNED_LOW, UNOWNED_HIGH)
    reply = await get(gw.session, gw.zone, f"{LOOKUP}/{local.replace(' ', '+')}")
    assert reply.status == 307
    assert f"/{local.replace(' ', '%20')}?" in reply.headers["Location"]


async def test_redirect_over_tls_prefers_the_targets_https_url(
    tmp_path: Path, tls: tuple[ssl.SSLContext, ssl.SSLContext]
) -> None:
    server_ctx, client_ctx = tls
    path = f"{LOOKUP}/{UNOWNED_TOPIC}?listenerName=external"
    async with (
        file_service(tmp_path, gateway_cluster()) as service,
        serving(service, None, ssl_context=server_ctx) as https,
        serving(service, None) as http,
        aiohttp.ClientSession() as session,
    ):
        over_tls = await get(session, https, path, ssl_context=client_ctx)
        over_plain = await get(session, http, path)
        # the target has no https URL for 'zone': 412, never a downgrade to plain http
        zone = await get(
            session, https, f"{LOOKUP}/{UNOWNED_TOPIC}?listenerName=zone", ssl_context=client_ctx
        )
        zone_plain = await get(session, http, f"{LOOKUP}/{UNOWNED_TOPIC}?listenerName=zone")
    query = "?authoritative=false&listenerName=external"
    assert over_tls.status == 307
    assert over_tls.headers["Location"] == (
        f"https://b1.example.com:8443{LOOKUP}/{UNOWNED_TOPIC}{query}"
    )
    # the listener's only web URL is https: a plain request is 412, as master answers
    assert over_plain.status == 412 and "Location" not in over_plain.headers
    assert zone.status == 412 and "Location" not in zone.headers
    assert "no https URL on listener 'zone'" in zone.json()["reason"]
    assert zone_plain.headers["Location"].startswith("http://zone.b1:8080/")


# -- bundle and partitions ---------------------------------------------------------------------


async def test_bundle_route(gw: Gateway) -> None:
    owned = await get(gw.session, gw.untagged, f"{LOOKUP}/{OWNED_TOPIC}/bundle")
    unowned = await get(gw.session, gw.zone, f"{LOOKUP}/{UNOWNED_TOPIC}/bundle")
    assert (owned.status, owned.text) == (200, OWNED_BUNDLE)
    assert (unowned.status, unowned.text) == (200, "0x80000000_0xc0000000")


@pytest.mark.parametrize(
    ("path", "partitions"),
    [
        ("/admin/v2/persistent/public/default/orders/partitions", 4),
        ("/admin/v2/persistent/public/default/orders/partitions?checkAllowAutoCreation=true", 4),
        ("/admin/v2/persistent/public/default/plain/partitions?checkAllowAutoCreation=false", 0),
        # Without the parameter a non-persistent topic's existence is a broker's to tell;
        # with it, one that would be created non-partitioned is answered here.
        (
            "/admin/v2/non-persistent/public/default/orders/partitions?checkAllowAutoCreation=true",
            0,
        ),
        # A missing topic that may be created (allowAutoTopicCreation, non-partitioned): 0.
        ("/admin/v2/persistent/public/default/new/partitions?checkAllowAutoCreation=true", 0),
    ],
)
async def test_partitions_route(gw: Gateway, path: str, partitions: int) -> None:
    reply = await get(gw.session, gw.untagged, path)
    assert reply.status == 200
    assert reply.json() == {"partitions": partitions}


# -- failures: one status per FailureKind, JSON reason ----------------------------------------


class UnreachableStore:
    """Stands in for a metadata store the gateway cannot reach (ZooKeeper down): a partial view
    that has nothing, fetches that fail, a source that is not ready."""

    def __init__(self) -> None:
        self._view = ClusterView(complete=False)

    @property
    def view(self) -> ClusterView:
        return self._view

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def fetch(self, path: str) -> None:
        raise LookupFailure(FailureKind.METADATA_UNAVAILABLE, f"cannot read {path}: no quorum")

    def status(self) -> SourceStatus:
        return SourceStatus(False, "ZooKeeper session lost; reconnecting")


def _unloading() -> dict[str, Any]:
    nodes = gateway_cluster()
    nodes[f"/namespace/{NS}/{OWNED_BUNDLE}"] = ownership_node(1, disabled=True)
    return nodes


def _malformed() -> dict[str, Any]:
    nodes = gateway_cluster()
    nodes[f"/namespace/{NS}/{OWNED_BUNDLE}"] = ["not", "an", "ownership", "node"]
    return nodes


def _geo(replication: list[str], peers: list[str], **policies: Any) -> dict[str, Any]:
    nodes = gateway_cluster()
    nodes[f"/admin/policies/{NS}"] |= {"replication_clusters": replication, **policies}
    nodes["/admin/clusters/west"] = {"peerClusterNames": peers}
    return nodes


def _extensible_state(state: dict[str, Any]) -> dict[str, Any]:
    nodes = gateway_cluster()
    for i in (1, 2, 3):
        nodes[f"/loadbalance/brokers/{broker_id(i)}"]["loadManagerClassName"] = (
            "org.apache.pulsar.broker.loadbalance.extensions.ExtensibleLoadManagerImpl"
        )
    nodes[f"/service_unit_state/{NS}/{OWNED_BUNDLE}"] = state
    return nodes


def _with_protocols(protocols: dict[str, str]) -> dict[str, Any]:
    nodes = gateway_cluster()
    for i in (1, 2, 3):
        nodes[f"/loadbalance/brokers/{broker_id(i)}"]["protocols"] = protocols
    return nodes


@dataclass(frozen=True)
class FailureCase:
    kind: FailureKind
    path: str
    reason: str  # a fragment the reason must contain
    nodes: dict[str, Any] | None = field(default_factory=gateway_cluster)  # None: unreachable
    max_concurrent: int = 50_000
    header: str | None = None
    cluster_name: str | None = None  # clusterName (geo-replication checks)
    # The status a Pulsar broker's REST API answers for this request (stated here, per request,
    # not read from the gateway's own table of kinds).
    status: int = 0


FAILURES = [
    FailureCase(
        FailureKind.INVALID_TOPIC,
        "/lookup/v2/topic/durable/public/default/t",
        "durable",
        status=400,
    ),
    FailureCase(FailureKind.INVALID_TOPIC, f"{LOOKUP}/a%2Fb", "%2F", status=400),
    FailureCase(FailureKind.INVALID_TOPIC, f"{LOOKUP}/a%2fb/bundle", "%2F", status=400),
    FailureCase(
        FailureKind.INVALID_TOPIC,
        "/lookup/v2/topic/persistent/pub%2Flic/default/t",
        "/",
        status=400,
    ),
    FailureCase(
        FailureKind.INVALID_TOPIC,
        "/lookup/v2/topic/persistent/pub%20lic/default/t",
        "'pub lic'",
        status=400,
    ),
    FailureCase(
        FailureKind.INVALID_TOPIC,
        "/admin/v2/persistent/public/default/a%2Fb/partitions",
        "%2F",
        status=400,
    ),
    FailureCase(
        FailureKind.INVALID_TOPIC,  # the topic is checked before the listener name
        "/lookup/v2/topic/persistent/pub%20lic/default/t?listenerName=a%0Ab",
        "'pub lic'",
        status=400,
    ),
    FailureCase(
        FailureKind.LISTENER_NOT_FOUND,
        f"{LOOKUP}/{OWNED_TOPIC}?listenerName=nope",
        "nope listener",
        status=400,
    ),
    FailureCase(
        FailureKind.LISTENER_NOT_FOUND,
        f"{LOOKUP}/{UNOWNED_TOPIC}",
        "nope listener",
        header="nope",
        status=400,
    ),
    FailureCase(
        FailureKind.LISTENER_NOT_FOUND,
        f"{LOOKUP}/{OWNED_TOPIC}?listenerName=a%0Ab",
        "the broker do not have a\\nb listener",  # as an unknown listener, escaped
        status=400,
    ),
    FailureCase(
        FailureKind.NAMESPACE_NOT_FOUND,
        "/lookup/v2/topic/persistent/ghost/ns/t",
        "Namespace not found",  # master: PulsarWebResource.checkLocalOrGetPeerReplicationCluster
        status=404,
    ),
    FailureCase(
        FailureKind.NAMESPACE_NOT_FOUND,
        "/lookup/v2/topic/persistent/ghost/ns/t/bundle",
        "Namespace not found",  # master: PulsarWebResource.checkLocalOrGetPeerReplicationCluster
        status=404,
    ),
    FailureCase(
        FailureKind.NAMESPACE_NOT_FOUND,
        "/admin/v2/persistent/ghost/ns/t/partitions",
        "Namespace not found",  # master: PulsarWebResource.checkLocalOrGetPeerReplicationCluster
        status=404,
    ),
    FailureCase(
        FailureKind.NO_BROKER,
        f"{LOOKUP}/{UNOWNED_TOPIC}",
        "No broker",
        cluster(0, leader=None),
        status=503,
    ),
    FailureCase(
        FailureKind.TOO_MANY_REQUESTS,
        f"{LOOKUP}/{OWNED_TOPIC}",
        "maxConcurrentLookupRequest=0",
        max_concurrent=0,
        status=503,
    ),
    FailureCase(
        FailureKind.BUNDLE_UNLOADING,
        f"{LOOKUP}/{OWNED_TOPIC}",
        "being unloaded",
        _unloading(),
        status=503,
    ),
    FailureCase(
        FailureKind.METADATA_UNAVAILABLE,
        f"{LOOKUP}/{OWNED_TOPIC}",
        "no quorum",
        nodes=None,
        status=503,
    ),
    FailureCase(
        FailureKind.METADATA_UNAVAILABLE,
        "/admin/v2/persistent/public/default/t/partitions",
        "no quorum",
        nodes=None,
        status=503,
    ),
    FailureCase(
        FailureKind.METADATA_MALFORMED,
        f"{LOOKUP}/{OWNED_TOPIC}",
        f"/namespace/{NS}/{OWNED_BUNDLE}",
        _malformed(),
        status=500,
    ),
    FailureCase(
        # Without checkAllowAutoCreation a missing topic is not found, as the broker answers.
        FailureKind.TOPIC_NOT_FOUND,
        "/admin/v2/persistent/public/default/missing/partitions",
        "Topic not found persistent://public/default/missing",
        status=404,
    ),
    FailureCase(
        # Schemas live in BookKeeper: with no broker link there is no one to ask.
        FailureKind.BROKER_UNAVAILABLE,
        "/admin/v2/schemas/public/default/t/schema",
        "needs a broker",
        status=503,
    ),
    FailureCase(
        FailureKind.NAMESPACE_DELETED,
        f"{LOOKUP}/{OWNED_TOPIC}",
        "Namespace is deleted",
        _geo(["west"], [], deleted=True),
        status=404,
    ),
    FailureCase(
        FailureKind.NOT_IN_CLUSTER,
        f"{LOOKUP}/{OWNED_TOPIC}",
        "missing local cluster name",
        _geo(["east"], ["south"]),
        cluster_name="west",
        status=412,
    ),
    FailureCase(
        FailureKind.PEER_CLUSTER_MISSING,
        "/admin/v2/persistent/public/default/t/partitions",
        "Peer cluster east data not found",
        _geo(["east"], ["east"]),
        cluster_name="west",
        status=404,
    ),
    FailureCase(
        FailureKind.OWNER_INACTIVE,
        f"{LOOKUP}/{OWNED_TOPIC}",
        "is not registered",
        _extensible_state({"state": "Owned", "dstBroker": "gone:8080"}),
        status=503,
    ),
    FailureCase(
        FailureKind.BUNDLE_DELETED,
        f"{LOOKUP}/{OWNED_TOPIC}",
        "is deleted",
        _extensible_state({"state": "Deleted", "sourceBroker": broker_id(1)}),
        status=503,
    ),
    FailureCase(
        FailureKind.PROTOCOL_NOT_ADVERTISED,
        f"{LOOKUP}/{OWNED_TOPIC}/protocol/kafka",
        "does not advertise protocol 'kafka'; the protocols it advertises: none",
        status=404,
    ),
    FailureCase(
        FailureKind.NO_PROTOCOL_ENDPOINT,
        f"{LOOKUP}/{OWNED_TOPIC}/protocol/kafka?listenerName=zone",
        "the topic's owner advertises no kafka endpoint for listener 'zone'",
        _with_protocols({"kafka": "external:SSL://b1.example.com:9093"}),
        status=404,
    ),
]


# Answered over HTTP by tests/integration/listeners/test_auth.py (it needs an authenticator), and
# by test_redirect_over_tls_prefers_the_targets_https_url (an https socket).
ACCESS_KINDS = {
    FailureKind.NOT_AUTHENTICATED,
    FailureKind.NOT_AUTHORIZED,
    FailureKind.LISTENER_NOT_ALLOWED,
    FailureKind.NO_TLS_REDIRECT,
}
# Binary only: the REST topic list takes no pattern (integration/brokers/test_broker_fidelity.py).
BINARY_ONLY_KINDS = {FailureKind.INVALID_PATTERN}


def test_every_failure_kind_has_a_status_and_an_http_case() -> None:
    assert set(STATUS) == set(FailureKind)
    assert {case.kind for case in FAILURES} | ACCESS_KINDS | BINARY_ONLY_KINDS == set(FailureKind)


@pytest.mark.parametrize("case", FAILURES, ids=lambda c: f"{c.kind.name}:{c.path[-40:]}")
async def test_failure_status_and_reason(tmp_path: Path, case: FailureCase) -> None:
    nodes = case.nodes
    async with aiohttp.ClientSession() as session:
        if nodes is None:
            service = LookupService(UnreachableStore(), max_concurrent=case.max_concurrent)
            async with serving(service) as server:
                reply = await get(session, server, case.path)
        else:
            policy = ResolvePolicy(cluster_name=case.cluster_name)
            async with (
                file_service(
                    tmp_path, nodes, max_concurrent=case.max_concurrent, policy=policy
                ) as service,
                serving(service) as server,
            ):
                headers = {"X-Pulsar-ListenerName": case.header} if case.header else None
                reply = await get(session, server, case.path, headers=headers)
    expected = case.status
    assert reply.status == expected, reply.text
    assert reply.headers["Content-Type"].startswith("application/json")
    assert set(reply.json()) == {"reason"}
    assert case.reason in reply.json()["reason"]
    # every 503 is retriable, and says when to retry
    assert reply.headers.get("Retry-After") == ("1" if expected == 503 else None)


async def test_failures_are_counted_with_their_error_code(gw: Gateway) -> None:
    await get(gw.session, gw.zone, f"{LOOKUP}/{OWNED_TOPIC}?listenerName=nope")
    assert (
        gw.sample(
            "pulsar_broker_lookup_failures_total",
            listener="nope",
            chosen_by="explicit",
            protocol="http",
            error="ServiceNotReady",
        )
        == 1.0
    )


# -- routes that are not there -----------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/nope",
        "/lookup/v2/topic/persistent/public/default",
        "/lookup/v2/topic/persistent/public/default/a/b",
        "/lookup/v2/topic/persistent//default/t",
        "/admin/v2/persistent/public/default/t",
        "/admin/v2/gateway",
        "/%0A",
        "/status.html%0A",
        "/lookup/v2/topic/persistent/public/default/t/%0D%0A",
    ],
)
async def test_unknown_routes_are_404_json(gw: Gateway, path: str) -> None:
    reply = await get(gw.session, gw.untagged, path)
    assert reply.status == 404
    assert reply.headers["Content-Type"].startswith("application/json")
    assert "no route" in reply.json()["reason"]


async def test_wrong_method_is_405_json(gw: Gateway) -> None:
    reply = await get(gw.session, gw.untagged, f"{LOOKUP}/{OWNED_TOPIC}", method="POST")
    assert reply.status == 405
    assert "GET" in reply.headers["Allow"]
    assert reply.json() == {"reason": "Method Not Allowed"}


# -- operations --------------------------------------------------------------------------------


async def test_status_page_and_health(gw: Gateway) -> None:
    status = await get(gw.session, gw.untagged, "/status.html")
    health = await get(gw.session, gw.zone, "/health")
    assert (status.status, status.text) == (200, "OK")
    assert health.status == 200


async def test_ready_when_the_snapshot_is_loaded(gw: Gateway) -> None:
    reply = await get(gw.session, gw.untagged, "/ready")
    assert reply.status == 200
    assert reply.json()["ready"] is True


async def test_not_ready_is_503_with_the_sources_reason() -> None:
    service = LookupService(UnreachableStore())
    async with serving(service) as server, aiohttp.ClientSession() as session:
        ready = await get(session, server, "/ready")
        health = await get(session, server, "/health")
    assert ready.status == 503
    assert ready.json()["reason"] == "ZooKeeper session lost; reconnecting"
    assert ready.json()["ready"] is False
    assert health.status == 200  # alive, only not ready


async def test_metrics_exposition(gw: Gateway) -> None:
    await get(gw.session, gw.zone, f"{LOOKUP}/{OWNED_TOPIC}")
    header = {"X-Pulsar-ListenerName": "external"}
    await get(gw.session, gw.zone, f"{LOOKUP}/{UNOWNED_TOPIC}", headers=header)
    await get(gw.session, gw.untagged, f"{LOOKUP}/{OWNED_TOPIC}?listenerName=nope")

    reply = await get(gw.session, gw.untagged, "/metrics")

    assert reply.status == 200
    assert reply.headers["Content-Type"].startswith("text/plain")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(reply.text)
        for s in family.samples
    }

    def value(name: str, **labels: str) -> float | None:
        return samples.get((name, tuple(sorted(labels.items()))))

    zone = {"listener": "zone", "chosen_by": "socket", "protocol": "http"}
    external = {"listener": "external", "chosen_by": "header", "protocol": "http"}
    nope = {"listener": "nope", "chosen_by": "explicit", "protocol": "http"}
    assert value("pulsar_broker_lookup_count", **zone) == 1.0
    assert value("pulsar_broker_lookup_answers_total", **zone) == 1.0
    assert value("pulsar_broker_lookup_redirects_total", **external) == 1.0
    assert value("pulsar_broker_lookup_failures_total", error="ServiceNotReady", **nope) == 1.0
    assert value("pulsar_broker_lookup_pending_requests") == 0.0


async def test_client_chosen_listener_names_do_not_become_metric_labels(tmp_path: Path) -> None:
    declared = ["internal", "external", "zone"]
    async with (
        file_service(tmp_path, gateway_cluster(), declared_listeners=declared) as service,
        serving(service, "zone") as server,
        aiohttp.ClientSession() as session,
    ):
        for name in ("nope-1", "nope-2", "nope-3"):
            reply = await get(session, server, f"{LOOKUP}/{OWNED_TOPIC}?listenerName={name}")
            assert reply.status == 400
        header = {"X-Pulsar-ListenerName": "external"}
        assert (await get(session, server, f"{LOOKUP}/{OWNED_TOPIC}", headers=header)).status == 200
        exposition = (await get(session, server, "/metrics")).text
    assert "nope" not in exposition
    assert 'listener="undeclared"' in exposition
    assert 'listener="external"' in exposition


async def test_listener_table(gw: Gateway) -> None:
    reply = await get(gw.session, gw.zone, "/admin/v2/gateway/listeners")
    assert reply.status == 200
    assert reply.json() == TABLE


async def test_openapi_describes_every_route(gw: Gateway) -> None:
    reply = await get(gw.session, gw.untagged, "/openapi.json")
    assert reply.status == 200
    document = reply.json()
    assert document == OPENAPI
    assert document["openapi"].startswith("3.")
    app = build_app(gw.service, HttpSettings(None))
    # the routes the app serves, with their segment patterns dropped: {topic:[^/]+} -> {topic};
    # '/{path}' is the catch-all that answers 404/405
    routes = {
        re.sub(r"\{(\w+):[^}]+\}", r"{\1}", resource.canonical)
        for resource in app.router.resources()
    } - {"/{path}"}
    assert set(document["paths"]) == routes


# -- the server socket ------------------------------------------------------------------------


async def test_start_binds_port_zero_and_logs(
    gw: Gateway, caplog: pytest.LogCaptureFixture
) -> None:
    service = gw.service
    with caplog.at_level(logging.INFO, logger="pulsar_lookup_gateway.http_api.server"):
        async with serving(service, "zone") as server:
            port = server.port
    assert port > 0
    messages = [
        r.getMessage() for r in caplog.records if r.name == "pulsar_lookup_gateway.http_api.server"
    ]
    assert f"listening on http://127.0.0.1:{port} listener=zone tls=no" in messages


async def test_tls_socket_logs_tls_yes_and_serves_https(
    gw: Gateway, tls: tuple[ssl.SSLContext, ssl.SSLContext], caplog: pytest.LogCaptureFixture
) -> None:
    server_ctx, client_ctx = tls
    with caplog.at_level(logging.INFO, logger="pulsar_lookup_gateway.http_api.server"):
        async with serving(gw.service, None, ssl_context=server_ctx) as server:
            reply = await get(gw.session, server, "/status.html", ssl_context=client_ctx)
    assert server.url.startswith("https://")
    assert reply.status == 200
    assert any(r.getMessage().endswith("listener=(none) tls=yes") for r in caplog.records)


def test_socket_and_ssl_context_must_agree(tls: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    app = web.Application()
    https = SocketSpec(Endpoint(Scheme.HTTPS, "127.0.0.1", 0), None, "webServicePortTls")
    http = SocketSpec(Endpoint(Scheme.HTTP, "127.0.0.1", 0), None, "webServicePort")
    binary = SocketSpec(Endpoint(Scheme.PULSAR, "127.0.0.1", 0), None, "brokerServicePort")
    with pytest.raises(ValueError, match="webServicePortTls"):
        HttpServer(https, app)
    with pytest.raises(ValueError, match="takes no SSL context"):
        HttpServer(http, app, tls[0])
    with pytest.raises(ValueError, match="not an http"):
        HttpServer(binary, app)


class SlowPeer:
    """A test application whose handler waits until the test releases it."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.app = web.Application()
        self.app.router.add_get("/slow", self.slow)
        self.app.router.add_get("/fast", self.fast)

    async def slow(self, request: web.Request) -> web.Response:
        self.entered.set()
        await self.release.wait()
        return web.Response(text="finished")

    async def fast(self, request: web.Request) -> web.Response:
        return web.Response(text="fast")


async def _raw_get(port: int, path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    await writer.drain()
    return reader, writer


async def _read_response(reader: asyncio.StreamReader) -> bytes:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    fields = dict(line.split(b":", 1) for line in head.split(b"\r\n")[1:] if b":" in line)
    length = int({k.strip().lower(): v for k, v in fields.items()}[b"content-length"])
    return head + await asyncio.wait_for(reader.readexactly(length), 10)


@pytest.fixture
def slow_server() -> Iterator[tuple[SlowPeer, HttpServer]]:
    peer = SlowPeer()
    spec = SocketSpec(Endpoint(Scheme.HTTP, "127.0.0.1", 0), "internal", "test socket")
    yield peer, HttpServer(spec, peer.app)


async def test_stop_finishes_requests_in_flight_and_refuses_new_ones(
    slow_server: tuple[SlowPeer, HttpServer],
) -> None:
    peer, server = slow_server
    await server.start()
    port = server.port
    reader, writer = await _raw_get(port, "/slow")
    await asyncio.wait_for(peer.entered.wait(), 10)

    stopping = asyncio.create_task(server.stop(timeout=30))

    async def refused() -> bool:
        try:
            _, w = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return True
        w.close()
        return False

    for _ in range(500):  # the listening socket closes before in-flight requests are drained
        if await refused():
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("the server kept accepting connections while stopping")
    assert not stopping.done()
    peer.release.set()
    response = await _read_response(reader)
    await asyncio.wait_for(stopping, 10)
    assert response.startswith(b"HTTP/1.1 200")
    assert response.endswith(b"finished")
    assert await asyncio.wait_for(reader.read(), 10) == b""  # then the connection is closed
    writer.close()


async def test_stop_closes_idle_keep_alive_connections(
    slow_server: tuple[SlowPeer, HttpServer],
) -> None:
    _, server = slow_server
    await server.start()
    reader, writer = await _raw_get(server.port, "/fast")
    response = await _read_response(reader)
    assert response.endswith(b"fast")
    assert b"close" not in response.lower()  # HTTP/1.1 keep-alive: the connection stays open

    await asyncio.wait_for(server.stop(timeout=30), 10)

    assert await asyncio.wait_for(reader.read(), 10) == b""
    writer.close()


async def test_stop_cancels_requests_that_outlive_the_timeout(
    slow_server: tuple[SlowPeer, HttpServer],
) -> None:
    peer, server = slow_server
    await server.start()
    reader, writer = await _raw_get(server.port, "/slow")
    await asyncio.wait_for(peer.entered.wait(), 10)

    await asyncio.wait_for(server.stop(timeout=0.1), 10)

    assert b"finished" not in await asyncio.wait_for(reader.read(), 10)
    writer.close()
