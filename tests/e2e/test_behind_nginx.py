"""A real nginx in front of the gateway, on the recipes in deploy/nginx/.

- stream (TCP) with `proxy_protocol on` (pulsar-lookup-gateway-stream.conf) to a binary socket
  with listener.lb.proxyProtocol=true;
- http with X-Forwarded-For (pulsar-lookup-gateway-forwarded.conf) to an HTTP socket.

nginx connects to the gateway from 127.0.0.9 (`proxy_bind`, the test's own setting), the only
trusted proxy; clients connect to nginx from 127.0.0.1 (the real pulsar-client), 127.0.0.8 or
127.0.0.7 (raw clients with a bound source address). clientCidrs map 127.0.0.1 to 'office' and
127.0.0.8 to 'partner', so an answer shows whose address the gateway went by. Brokers are test
peers that record which one the client reached.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pulsar_lookup_gateway.gateway.process import Gateway
from pulsar_lookup_gateway.listeners.config.conf_file import parse_properties
from pulsar_lookup_gateway.listeners.config.model import validate_raw
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import free_port
from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
from tests.broker_peer import BrokerPeer, RawClient
from tests.e2e.clients import in_thread, produce, reached
from tests.neighbours import (
    binary_lookup,
    closed_without_answer,
    http_broker_url,
    lookups,
    nginx,
    nginx_binary,
    nginx_stream_module,
    one_broker_cluster,
    recipe,
    refusals,
)

pytestmark = pytest.mark.e2e

TOPIC = "persistent://public/default/nginx-t1"
LOOKUP_PATH = "/lookup/v2/topic/persistent/public/default/nginx-t1"
CLIENT, PARTNER, NOBODY, NGINX = "127.0.0.1", "127.0.0.8", "127.0.0.7", "127.0.0.9"

GATEWAY = (
    "advertisedListeners=internal:pulsar://127.0.0.1:16650,office:pulsar://gw-office:6650,"
    "partner:pulsar://gw-partner:6650,lb:pulsar://gw-lb:6650\n"
    "bindAddresses=lb:pulsar://127.0.0.1:0,internal:http://127.0.0.1:0\n"
    "brokerServicePort=\nwebServicePort=\n"
    f"listener.office.clientCidrs={CLIENT}/32\n"
    f"listener.partner.clientCidrs={PARTNER}/32\n"
    "listener.lb.proxyProtocol=true\n"
    f"trustedProxyCidrs={NGINX}/32\n"
    # the stream recipe's bound (its gateway side); the HTTP socket here is the internal one,
    # which bounds nothing, so there the forwarded recipe alone must keep listener names out
    "listener.lb.allowedListenerNames=office,partner\n"
)


@dataclass
class Deployment:
    gateway: Gateway
    peers: dict[str, BrokerPeer]

    def reached(self, topic: str) -> list[str]:
        return [name for name, peer in self.peers.items() if reached(peer, topic)]

    @property
    def registry(self) -> object:
        return self.gateway.service.metrics.registry


@pytest.fixture
async def deployment(tmp_path: Path) -> AsyncIterator[Deployment]:
    nginx_binary()  # skip before starting anything when nginx is not installed
    async with contextlib.AsyncExitStack() as stack:
        peers = {}
        hosts = {"internal": "127.0.0.2", "office": "127.0.0.3", "partner": "127.0.0.4"}
        for name, host in {**hosts, "lb": "127.0.0.5"}.items():
            peers[name] = await stack.enter_async_context(BrokerPeer(host, name=name))
        snapshot = tmp_path / "cluster.json"
        write_snapshot(
            snapshot,
            one_broker_cluster({name: {"brokerServiceUrl": p.url} for name, p in peers.items()}),
        )
        raw = parse_properties(f"metadataStoreUrl=file:{snapshot}\n{GATEWAY}", "test.conf")
        gateway = Gateway(validate_raw(raw).config)
        await gateway.start()
        stack.push_async_callback(gateway.stop)
        yield Deployment(gateway, peers)


@pytest.fixture
async def stream_port(deployment: Deployment, tmp_path: Path) -> AsyncIterator[int]:
    """nginx's stream proxy with `proxy_protocol on` to the gateway's 'lb' binary socket."""
    nginx_stream_module()
    port, upstream = free_port(), deployment.gateway.port_of("lb", "pulsar")
    stream = recipe(
        "nginx/pulsar-lookup-gateway-stream.conf",
        {
            "listen 6650;": f"listen 127.0.0.1:{port};",
            "gateway-1.pulsar.example.com:6650": f"127.0.0.1:{upstream}",
            "gateway-2.pulsar.example.com:6650": f"127.0.0.1:{upstream}",
        },
    )
    directives = f"    proxy_bind {NGINX};"
    async with nginx(
        tmp_path / "nginx-stream", [port], stream=stream, stream_directives=directives
    ):
        yield port


@pytest.fixture
async def http_port(deployment: Deployment, tmp_path: Path) -> AsyncIterator[int]:
    """nginx's http proxy with X-Forwarded-For to the gateway's 'internal' HTTP socket."""
    port, upstream = free_port(), deployment.gateway.port_of("internal", "http")
    forwarded = recipe(
        "nginx/pulsar-lookup-gateway-forwarded.conf",
        {
            "listen 8080;": f"listen 127.0.0.1:{port};",
            "gateway-1.pulsar.example.com:8080": f"127.0.0.1:{upstream}",
            "gateway-2.pulsar.example.com:8080": f"127.0.0.1:{upstream}",
        },
    )
    directives = f"    proxy_bind {NGINX};"
    async with nginx(tmp_path / "nginx-http", [port], http=forwarded, http_directives=directives):
        yield port


async def lookup_url(port: int, local_host: str) -> str:
    answer, _ = await binary_lookup("127.0.0.1", port, TOPIC, local_host=local_host)
    return str(answer.lookupTopicResponse.brokerServiceUrl)


# -- stream: PROXY protocol ----------------------------------------------------------------------


async def test_the_real_client_through_the_stream_proxy_gets_its_networks_broker(
    deployment: Deployment, stream_port: int
) -> None:
    topic = f"{TOPIC}-stream"
    await in_thread(produce, f"pulsar://127.0.0.1:{stream_port}", topic)
    # the client's 127.0.0.1 is 'office'; nginx's own 127.0.0.9 is no rule's
    assert deployment.reached(topic) == ["office"]
    assert lookups(deployment.registry, "office", "network", "binary") >= 1


async def test_raw_clients_through_the_stream_proxy(
    deployment: Deployment, stream_port: int
) -> None:
    peers = deployment.peers
    assert await lookup_url(stream_port, PARTNER) == peers["partner"].url
    # a network no rule names: the socket's listener
    assert await lookup_url(stream_port, NOBODY) == peers["lb"].url


async def test_the_proxy_protocol_socket_refuses_all_but_nginx_headers(
    deployment: Deployment, stream_port: int
) -> None:
    port = deployment.gateway.port_of("lb", "pulsar")
    registry = deployment.registry
    # a client connected through nginx before the refusals, and used after them
    async with await RawClient.open("127.0.0.1", stream_port) as through_nginx:
        await through_nginx.handshake()
        # straight to the gateway from a peer outside trustedProxyCidrs, header or not
        forged = b"PROXY TCP4 127.0.0.8 127.0.0.1 4000 6650\r\n"
        assert await closed_without_answer("127.0.0.1", port, forged, local_host=CLIENT)
        # from the trusted address, but without a header, or with a malformed one
        connect = codec.connect("no-header", 21)
        assert await closed_without_answer("127.0.0.1", port, connect, local_host=NGINX)
        bad = b"PROXY TCP4 127.0.0.8\r\n"
        assert await closed_without_answer("127.0.0.1", port, bad, local_host=NGINX)
        assert refusals(registry, "lb", "untrusted-proxy") == 1
        assert refusals(registry, "lb", "proxy-header") == 2
        answer = await through_nginx.lookup(TOPIC)
        assert answer.lookupTopicResponse.brokerServiceUrl == deployment.peers["office"].url
    assert await lookup_url(stream_port, PARTNER) == deployment.peers["partner"].url


async def test_through_the_stream_proxy_a_client_naming_the_internal_listener_is_refused(
    deployment: Deployment, stream_port: int
) -> None:
    """Issue 41: the stream module cannot read the binary protocol's listener name, so the
    recipe's gateway side (listener.lb.allowedListenerNames) is the guard: no internal address
    for a client that asks for one, from any network."""
    internal = deployment.peers["internal"].url
    for source in (CLIENT, PARTNER, NOBODY):
        answer, _ = await binary_lookup(
            "127.0.0.1", stream_port, TOPIC, local_host=source, listener="internal"
        )
        reply = answer.lookupTopicResponse
        assert reply.error == codec.ServerError.NotAllowedError, (source, reply)
        assert internal not in str(reply), source
    # a name the bound allows is answered as asked
    answer, _ = await binary_lookup(
        "127.0.0.1", stream_port, TOPIC, local_host=NOBODY, listener="partner"
    )
    assert answer.lookupTopicResponse.brokerServiceUrl == deployment.peers["partner"].url


# -- http: X-Forwarded-For -----------------------------------------------------------------------


async def test_the_real_client_through_the_http_proxy_gets_its_networks_broker(
    deployment: Deployment, http_port: int
) -> None:
    topic = f"{TOPIC}-http"
    await in_thread(produce, f"http://127.0.0.1:{http_port}", topic)
    assert deployment.reached(topic) == ["office"]
    assert lookups(deployment.registry, "office", "network", "http") >= 1


async def test_forwarded_addresses_through_the_http_proxy(
    deployment: Deployment, http_port: int
) -> None:
    peers = deployment.peers
    port = http_port
    assert await http_broker_url(port, LOOKUP_PATH, local_host=PARTNER) == peers["partner"].url
    assert await http_broker_url(port, LOOKUP_PATH, local_host=NOBODY) == peers["internal"].url
    # what a client writes itself gains it nothing: nginx appends the address it saw ...
    spoofed = {"X-Forwarded-For": PARTNER}
    assert (
        await http_broker_url(port, LOOKUP_PATH, local_host=CLIENT, headers=spoofed)
        == peers["office"].url
    )
    # ... and drops a listener name (the recipe's proxy_set_header X-Pulsar-ListenerName "")
    named = {"X-Pulsar-ListenerName": "partner"}
    assert (
        await http_broker_url(port, LOOKUP_PATH, local_host=CLIENT, headers=named)
        == peers["office"].url
    )


async def test_a_forwarded_header_from_an_untrusted_peer_is_ignored(
    deployment: Deployment,
) -> None:
    port = deployment.gateway.port_of("internal", "http")
    peers = deployment.peers
    for headers in ({"X-Forwarded-For": PARTNER}, {"Forwarded": f"for={PARTNER}"}):
        # straight to the gateway: the peer is the client
        assert await http_broker_url(port, LOOKUP_PATH, local_host=NOBODY, headers=headers) == (
            peers["internal"].url
        )


async def test_nginx_keeps_serving_while_strangers_are_refused(
    deployment: Deployment, stream_port: int
) -> None:
    """Many refused connections at once do not disturb lookups through nginx."""
    port = deployment.gateway.port_of("lb", "pulsar")
    strangers = [
        closed_without_answer("127.0.0.1", port, b"GET / HTTP/1.1\r\n\r\n", local_host=NGINX)
        for _ in range(20)
    ]
    results = await asyncio.gather(*strangers, lookup_url(stream_port, PARTNER))
    assert all(results[:-1])
    assert results[-1] == deployment.peers["partner"].url
    assert refusals(deployment.registry, "lb", "proxy-header") == 20


async def test_through_the_http_proxy_a_client_naming_a_listener_gets_its_networks_broker(
    deployment: Deployment, http_port: int
) -> None:
    """Issue 41: a client's ?listenerName= won over its network (and reached the internal
    listener's address). The recipe passes on only the parameters the routes read, however the
    name is spelt; the gateway's socket here bounds nothing, so the recipe alone must hold."""
    peers = deployment.peers
    direct = deployment.gateway.port_of("internal", "http")
    asked = f"{LOOKUP_PATH}?listenerName=internal"
    # (straight to the gateway, the name wins over the network)
    assert await http_broker_url(direct, asked, local_host=PARTNER) == peers["internal"].url
    queries = [
        "listenerName=internal",
        "listenerName=internal&listenerName=internal",
        "a=1&listenerName=internal",
        "listener%4Eame=internal",  # the gateway decodes a parameter's name
        "listenerName=partner",
    ]
    for query in queries:
        path = f"{LOOKUP_PATH}?{query}"
        assert await http_broker_url(http_port, path, local_host=CLIENT) == peers["office"].url
    # the header, likewise (the recipe removes it)
    named = {"X-Pulsar-ListenerName": "internal"}
    assert (
        await http_broker_url(http_port, asked, local_host=PARTNER, headers=named)
        == peers["partner"].url
    )
