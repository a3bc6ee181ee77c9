"""The real `pulsar-client` over an `http://` service URL.

The Python client (the C++ client inside) sends no listener name over HTTP: it asks
`/admin/v2/.../partitions`, then `/lookup/v2/topic/...`, then connects to the `brokerUrl` of the
answer. Which listener it gets therefore depends on the gateway socket it used, or on a header an
ingress injects. Broker test peers (tests/broker_peer.py) on 127.0.0.2-4 stand in for the brokers
and record which one the client reached, and what it asked there.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pulsar_lookup_gateway.http_api.app import build_app
from pulsar_lookup_gateway.http_api.server import HttpServer
from pulsar_lookup_gateway.http_api.settings import HttpSettings
from pulsar_lookup_gateway.listeners.endpoints.addresses import Endpoint, Scheme
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import free_port
from pulsar_lookup_gateway.metadata_store.file import FileSource
from pulsar_lookup_gateway.metadata_store.synthetic import FOUR_BUNDLES, topic_in_range
from pulsar_lookup_gateway.serving.service import LookupService
from tests import neighbours
from tests.broker_peer import BrokerPeer
from tests.neighbours import nginx_binary

pulsar = pytest.importorskip("pulsar")

pytestmark = pytest.mark.e2e

MODULAR = "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl"
UNOWNED_BUNDLE = "0x80000000_0xc0000000"
OWNED_TOPIC = topic_in_range(0x00000000, 0x40000000)
UNOWNED_TOPIC = topic_in_range(0x80000000, 0xC0000000)
CLIENT_WAIT = 30.0  # bound on one client run (its own timeouts are shorter)
UNUSED_HTTP = "http://127.0.0.1:9"  # a web URL no test follows


def _broker(listeners: dict[str, dict[str, str]]) -> dict[str, Any]:
    return {
        "webServiceUrl": UNUSED_HTTP,
        "pulsarServiceUrl": listeners["internal"]["brokerServiceUrl"],
        "advertisedListeners": listeners,
        "loadManagerClassName": MODULAR,
    }


def _owner(listeners: dict[str, dict[str, str]]) -> dict[str, Any]:
    return {
        "nativeUrl": listeners["internal"]["brokerServiceUrl"],
        "httpUrl": UNUSED_HTTP,
        "disabled": False,
        "advertisedListeners": listeners,
    }


def entry_cluster(internal: str, external: str, redirect_to: str) -> dict[str, Any]:
    """Broker b1 (the leader) owns every bundle but UNOWNED_BUNDLE; its 'external' listener's
    web URL is `redirect_to`, where an unowned bundle's lookup is sent."""
    listeners = {
        "internal": {"brokerServiceUrl": internal},
        "external": {"brokerServiceUrl": external, "brokerHttpUrl": redirect_to},
    }
    nodes: dict[str, Any] = {
        "/loadbalance/brokers/b1:8080": _broker(listeners),
        "/loadbalance/leader": {"brokerId": "b1:8080", "serviceUrl": UNUSED_HTTP},
        "/admin/policies/public/default": {
            "bundles": {"boundaries": FOUR_BUNDLES, "numBundles": 4}
        },
    }
    for lower, upper in itertools.pairwise(FOUR_BUNDLES):
        if f"{lower}_{upper}" != UNOWNED_BUNDLE:
            nodes[f"/namespace/public/default/{lower}_{upper}"] = _owner(listeners)
    return nodes


def owner_cluster(entry: dict[str, Any], final_external: str) -> dict[str, Any]:
    """What the redirect target knows: broker b2 has taken UNOWNED_BUNDLE."""
    listeners = {
        "internal": {"brokerServiceUrl": "pulsar://127.0.0.1:9"},
        "external": {"brokerServiceUrl": final_external},
    }
    nodes = dict(entry)
    nodes["/loadbalance/brokers/b2:8080"] = _broker(listeners)
    nodes[f"/namespace/public/default/{UNOWNED_BUNDLE}"] = _owner(listeners)
    return nodes


@dataclass
class Deployment:
    internal_peer: BrokerPeer  # what b1 advertises for 'internal' (127.0.0.2)
    external_peer: BrokerPeer  # what b1 advertises for 'external' (127.0.0.3)
    final_peer: BrokerPeer  # b2, the owner behind the redirect (127.0.0.4)
    tagged: HttpServer  # entry gateway socket tagged 'external'
    untagged: HttpServer  # entry gateway legacy socket, no listener
    target: HttpServer  # the HTTP lookup endpoint the 307 points to
    entry_service: LookupService
    target_service: LookupService

    @property
    def peers(self) -> list[BrokerPeer]:
        return [self.internal_peer, self.external_peer, self.final_peer]


async def _gateway(
    stack: AsyncExitStack, path: Path, nodes: dict[str, Any], listeners: list[str | None]
) -> tuple[LookupService, list[HttpServer]]:
    path.write_text(json.dumps(nodes))
    source = FileSource(path, poll_interval=60)
    await source.start()
    stack.push_async_callback(source.close)
    service = LookupService(source, internal_listener="internal")
    servers = []
    for listener in listeners:
        spec = SocketSpec(Endpoint(Scheme.HTTP, "127.0.0.1", 0), listener, "e2e socket")
        server = HttpServer(spec, build_app(service, HttpSettings(listener)))
        await server.start()
        stack.push_async_callback(server.stop, 5)
        servers.append(server)
    return service, servers


@pytest.fixture
async def deployment(tmp_path: Path) -> AsyncIterator[Deployment]:
    async with AsyncExitStack() as stack:
        internal = await stack.enter_async_context(BrokerPeer("127.0.0.2", name="internal"))
        external = await stack.enter_async_context(BrokerPeer("127.0.0.3", name="external"))
        final = await stack.enter_async_context(BrokerPeer("127.0.0.4", name="final"))
        # the redirect target first: the entry gateway's snapshot names its URL
        entry_placeholder = entry_cluster(internal.url, external.url, UNUSED_HTTP)
        target_service, (target,) = await _gateway(
            stack, tmp_path / "owner.json", owner_cluster(entry_placeholder, final.url), [None]
        )
        entry_service, (tagged, untagged) = await _gateway(
            stack,
            tmp_path / "entry.json",
            entry_cluster(internal.url, external.url, target.url),
            ["external", None],
        )
        yield Deployment(
            internal, external, final, tagged, untagged, target, entry_service, target_service
        )


def _produce(service_url: str, topic: str) -> None:
    """Create a producer with the real client (blocking: run it in an executor)."""
    client = pulsar.Client(
        service_url,
        operation_timeout_seconds=10,
        connection_timeout_ms=5000,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
    )
    try:
        producer = client.create_producer(topic)
        producer.close()
    finally:
        client.close()


async def produce(service_url: str, topic: str) -> None:
    loop = asyncio.get_running_loop()
    await asyncio.wait_for(loop.run_in_executor(None, _produce, service_url, topic), CLIENT_WAIT)


def http_lookups(service: LookupService, kind: str, listener: str, chosen_by: str) -> float:
    """How many HTTP lookups `service` answered with `kind` (answers, redirects) like this."""
    labels = {"listener": listener, "chosen_by": chosen_by, "protocol": "http"}
    value = service.metrics.registry.get_sample_value(f"pulsar_broker_lookup_{kind}_total", labels)
    return value or 0.0


def reached(deployment: Deployment, topic: str) -> list[str]:
    """The names of the broker peers that got a PRODUCER for `topic`."""
    return [peer.name for peer in deployment.peers if topic in peer.producer_topics()]


async def test_socket_tagged_external_gets_the_external_broker(deployment: Deployment) -> None:
    await produce(deployment.tagged.url, OWNED_TOPIC)
    assert reached(deployment, OWNED_TOPIC) == ["external"]
    assert http_lookups(deployment.entry_service, "answers", "external", "socket") >= 1


async def test_untagged_socket_gets_the_internal_broker(deployment: Deployment) -> None:
    await produce(deployment.untagged.url, OWNED_TOPIC)
    assert reached(deployment, OWNED_TOPIC) == ["internal"]
    assert http_lookups(deployment.entry_service, "answers", "internal", "internal") >= 1


async def test_client_follows_the_307_to_the_owner(deployment: Deployment) -> None:
    await produce(deployment.tagged.url, UNOWNED_TOPIC)
    # entry gateway -> 307 (listenerName=external) -> target gateway -> b2's external address
    assert reached(deployment, UNOWNED_TOPIC) == ["final"]
    assert http_lookups(deployment.entry_service, "redirects", "external", "socket") >= 1
    # the listener travelled in the Location's query: explicit at the target
    assert http_lookups(deployment.target_service, "answers", "external", "explicit") >= 1


# -- nginx in front, injecting X-Pulsar-ListenerName (the Istio / ingress pattern) --------------

NGINX_SERVER = """
server {{
    listen 127.0.0.1:{port};
    location / {{
        proxy_pass http://127.0.0.1:{upstream};
        proxy_set_header X-Pulsar-ListenerName external;
    }}
}}
"""


@pytest.fixture
async def nginx(deployment: Deployment, tmp_path: Path) -> AsyncIterator[int]:
    """nginx on 127.0.0.1 in front of the entry gateway's untagged socket; yields its port."""
    nginx_binary()
    port = free_port()
    server = NGINX_SERVER.format(port=port, upstream=deployment.untagged.port)
    async with neighbours.nginx(tmp_path / "nginx", [port], http=server):
        yield port


async def test_nginx_injecting_the_header_gets_the_external_broker(
    deployment: Deployment, nginx: int
) -> None:
    await produce(f"http://127.0.0.1:{nginx}", OWNED_TOPIC)
    # the same untagged socket answers 'internal' without nginx (see above)
    assert reached(deployment, OWNED_TOPIC) == ["external"]
    assert http_lookups(deployment.entry_service, "answers", "external", "header") >= 1


def test_peers_and_topics_are_distinct() -> None:
    """The assertions above can only tell the listeners apart if the setup differs."""
    assert OWNED_TOPIC != UNOWNED_TOPIC
    nodes = entry_cluster("pulsar://127.0.0.2:1", "pulsar://127.0.0.3:2", "http://127.0.0.1:3")
    assert f"/namespace/public/default/{UNOWNED_BUNDLE}" not in nodes
    assert len([p for p in nodes if p.startswith("/namespace/")]) == 3
