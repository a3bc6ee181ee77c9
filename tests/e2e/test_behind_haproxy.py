"""A real HAProxy in front of the gateway, on the recipes in deploy/haproxy/.

- PROXY protocol v2 (pulsar-lookup-gateway-proxy-v2.cfg): every connection reaches the gateway
  from HAProxy's address, and the real pulsar-client gets the broker of the listener of ITS
  network. Loopback clients all come from 127.0.0.1, so two more frontends make HAProxy present
  other client addresses (`tcp-request connection set-src`): the PROXY header then carries
  10.1.2.3 or 192.168.7.7 (no traffic goes there), which clientCidrs map to 'office' and
  'partner'; the recipe's own frontend presents 127.0.0.1, which no rule names.
- SNI routing (pulsar-lookup-gateway-sni.cfg): HAProxy routes two names to ONE TLS socket of the
  gateway without terminating TLS; each name gets its listener's certificate and URLs.

Brokers are test peers (tests/broker_peer.py) that record which one the client reached.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
import trustme

from pulsar_lookup_gateway.gateway.process import Gateway
from pulsar_lookup_gateway.listeners.config.model import GatewayConfig
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import free_port
from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
from tests.broker_peer import BrokerPeer
from tests.e2e.clients import in_thread, produce, reached
from tests.gateways import config_from, running
from tests.neighbours import (
    WAIT,
    binary_lookup,
    common_name,
    haproxy,
    haproxy_binary,
    lookups,
    one_broker_cluster,
    recipe,
    refusals,
)

pytestmark = pytest.mark.e2e

TOPIC = "persistent://public/default/haproxy-t1"
LOOKUP_PATH = "/lookup/v2/topic/persistent/public/default/haproxy-t1"


def config_of(tmp_path: Path, nodes: dict[str, object], text: str) -> GatewayConfig:
    path = tmp_path / "cluster.json"
    write_snapshot(path, nodes)
    return config_from(f"metadataStoreUrl=file:{path}\n{text}")


@contextlib.asynccontextmanager
async def peers(**hosts: str) -> AsyncIterator[dict[str, BrokerPeer]]:
    async with contextlib.AsyncExitStack() as stack:
        started = {}
        for name, host in hosts.items():
            started[name] = await stack.enter_async_context(BrokerPeer(host, name=name))
        yield started


# -- PROXY protocol v2 ---------------------------------------------------------------------------

PROXIED_GATEWAY = (
    "advertisedListeners=internal:pulsar://127.0.0.1:16650,office:pulsar://gw-office:6650,"
    "partner:pulsar://gw-partner:6650,lb:pulsar://gw-lb:6650\n"
    "bindAddresses=lb:pulsar://127.0.0.1:0,lb:http://127.0.0.1:0\n"
    "brokerServicePort=\nwebServicePort=\n"
    "listener.office.clientCidrs=10.1.0.0/16\n"
    "listener.partner.clientCidrs=192.168.0.0/16\n"
    "listener.lb.proxyProtocol=true\n"
    "trustedProxyCidrs=127.0.0.1/32\n"
    "listener.lb.allowedListenerNames=office,partner\n"  # the recipe's bound (gateway side)
)

# The test's own frontends, added to the recipe's (they use its defaults and backends).
CLIENT_NETWORKS = """\
frontend office_binary from pulsar_lookup
    bind 127.0.0.1:{office_binary}
    tcp-request connection set-src ipv4(10.1.2.3)
    default_backend pulsar_lookup_gateway_binary

frontend partner_binary from pulsar_lookup
    bind 127.0.0.1:{partner_binary}
    tcp-request connection set-src ipv4(192.168.7.7)
    default_backend pulsar_lookup_gateway_binary

frontend office_http from pulsar_lookup
    bind 127.0.0.1:{office_http}
    tcp-request connection set-src ipv4(10.1.2.3)
    default_backend pulsar_lookup_gateway_http

frontend partner_http from pulsar_lookup
    bind 127.0.0.1:{partner_http}
    tcp-request connection set-src ipv4(192.168.7.7)
    default_backend pulsar_lookup_gateway_http
"""


@dataclass
class ProxiedDeployment:
    gateway: Gateway
    peers: dict[str, BrokerPeer]
    ports: dict[str, int]  # HAProxy's frontends

    def reached(self, topic: str) -> list[str]:
        return [name for name, peer in self.peers.items() if reached(peer, topic)]


@pytest.fixture
async def proxied(tmp_path: Path) -> AsyncIterator[ProxiedDeployment]:
    haproxy_binary()  # skip before starting anything when HAProxy is not installed
    async with peers(
        internal="127.0.0.2", office="127.0.0.3", partner="127.0.0.4", lb="127.0.0.5"
    ) as started:
        nodes = one_broker_cluster(
            {name: {"brokerServiceUrl": peer.url} for name, peer in started.items()}
        )
        async with running(config_of(tmp_path, nodes, PROXIED_GATEWAY)) as gateway:
            names = ("binary", "http", "office_binary", "partner_binary", "office_http")
            ports = {name: free_port() for name in (*names, "partner_http")}
            lb_binary, lb_http = gateway.port_of("lb", "pulsar"), gateway.port_of("lb", "http")
            text = recipe(
                "haproxy/pulsar-lookup-gateway-proxy-v2.cfg",
                {
                    "bind :6650": f"bind 127.0.0.1:{ports['binary']}",
                    "bind :8080": f"bind 127.0.0.1:{ports['http']}",
                    "gateway-1.pulsar.example.com:6650": f"127.0.0.1:{lb_binary}",
                    "gateway-2.pulsar.example.com:6650": f"127.0.0.1:{lb_binary}",
                    "gateway-1.pulsar.example.com:8080": f"127.0.0.1:{lb_http}",
                    "gateway-2.pulsar.example.com:8080": f"127.0.0.1:{lb_http}",
                },
            )
            configs = [text, CLIENT_NETWORKS.format(**ports)]
            async with haproxy(tmp_path / "haproxy", configs, list(ports.values())):
                yield ProxiedDeployment(gateway, started, ports)


@pytest.mark.parametrize("scheme", ["pulsar", "http"])
async def test_the_real_client_gets_the_broker_of_its_own_network(
    proxied: ProxiedDeployment, scheme: str
) -> None:
    kind = "binary" if scheme == "pulsar" else "http"
    for frontend, expected in (("office", "office"), ("partner", "partner"), ("", "lb")):
        port = proxied.ports[f"{frontend}_{kind}" if frontend else kind]
        topic = f"{TOPIC}-{scheme}-{expected}"
        await in_thread(produce, f"{scheme}://127.0.0.1:{port}", topic)
        assert proxied.reached(topic) == [expected], frontend
    registry = proxied.gateway.service.metrics.registry
    assert lookups(registry, "office", "network", kind) >= 1
    assert lookups(registry, "partner", "network", kind) >= 1
    assert lookups(registry, "lb", "socket", kind) >= 1
    # HAProxy's health checks carry the header too (check-send-proxy): nothing was refused
    for reason in ("untrusted-proxy", "proxy-header", "proxy-header-timeout"):
        assert refusals(registry, "lb", reason) == 0


async def test_a_client_naming_the_internal_listener_gets_no_internal_address(
    proxied: ProxiedDeployment,
) -> None:
    """Issue 41: in TCP mode HAProxy cannot drop a client's listener name (the binary field,
    ?listenerName=, X-Pulsar-ListenerName), so the recipe's gateway side is the guard: through
    every frontend, whatever network the client is on, asking for the internal listener is
    refused (binary NotAllowedError, HTTP 400) and its address never answered."""
    internal = proxied.peers["internal"].url
    for frontend in ("office", "partner", ""):
        port = proxied.ports[f"{frontend}_binary" if frontend else "binary"]
        answer, _ = await binary_lookup("127.0.0.1", port, TOPIC, listener="internal")
        reply = answer.lookupTopicResponse
        assert reply.error == codec.ServerError.NotAllowedError, (frontend, reply)
        assert internal not in str(reply), frontend
        port = proxied.ports[f"{frontend}_http" if frontend else "http"]
        for query, headers in (
            ("?listenerName=internal", {}),
            ("?a=1&listener%4Eame=internal", {}),
            ("", {"X-Pulsar-ListenerName": "internal"}),
        ):
            status, body = await http_get(f"http://127.0.0.1:{port}{LOOKUP_PATH}{query}", headers)
            assert status == 400, (frontend, query, headers, status, body)
            assert internal.removeprefix("pulsar://") not in body, (frontend, query, body)
    # a name the bound allows is answered as asked
    answer, _ = await binary_lookup("127.0.0.1", proxied.ports["binary"], TOPIC, listener="office")
    assert answer.lookupTopicResponse.brokerServiceUrl == proxied.peers["office"].url


async def http_get(url: str, headers: dict[str, str]) -> tuple[int, str]:
    timeout = aiohttp.ClientTimeout(total=WAIT)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(url, headers=headers) as response,
    ):
        return response.status, await response.text()


# -- SNI routing to one TLS socket ---------------------------------------------------------------

PUBLIC_NAME = "public.gateway.test"
CORP_NAME = "localhost"  # the real client sends this name; an IP literal sends none


def sni_gateway(files: dict[str, tuple[Path, Path]]) -> str:
    text = (
        "advertisedListeners=internal:pulsar+ssl://127.0.0.1:16651,edge:pulsar+ssl://gw-e:6651,"
        "public:pulsar+ssl://gw-public:6651,corp:pulsar+ssl://gw-corp:6651\n"
        "bindAddresses=edge:pulsar+ssl://127.0.0.1:0\nbrokerServicePort=\nwebServicePort=\n"
        f"tlsCertificateFilePath={files['edge'][0]}\ntlsKeyFilePath={files['edge'][1]}\n"
        f"listener.public.sniHostnames={PUBLIC_NAME}\n"
        f"listener.corp.sniHostnames={CORP_NAME}\n"
        # the recipe's bound: the names a server name chooses on this socket, no other
        "listener.edge.allowedListenerNames=public,corp\n"
    )
    for name in ("public", "corp"):
        text += f"listener.{name}.tlsCertificateFilePath={files[name][0]}\n"
        text += f"listener.{name}.tlsKeyFilePath={files[name][1]}\n"
    return text


@dataclass
class SniDeployment:
    gateway: Gateway
    peers: dict[str, BrokerPeer]
    port: int  # HAProxy's TLS frontend
    ca_file: Path
    trust: ssl.SSLContext

    def reached(self, topic: str) -> list[str]:
        return [name for name, peer in self.peers.items() if reached(peer, topic)]


@pytest.fixture
async def sni(tmp_path: Path) -> AsyncIterator[SniDeployment]:
    haproxy_binary()
    ca = trustme.CA()
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(ca_file)
    files = {}
    for stem in ("edge", "public", "corp", "peer"):
        leaf = ca.issue_cert(
            "127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4", CORP_NAME, PUBLIC_NAME,
            common_name=f"{stem}-gateway",
        )  # fmt: skip
        leaf.private_key_pem.write_to_path(tmp_path / f"{stem}.key")
        leaf.cert_chain_pems[0].write_to_path(tmp_path / f"{stem}.crt")
        files[stem] = (tmp_path / f"{stem}.crt", tmp_path / f"{stem}.key")
    peer_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    peer_context.load_cert_chain(*files["peer"])
    trust = ssl.create_default_context(cafile=str(ca_file))
    async with contextlib.AsyncExitStack() as stack:
        started = {}
        for name, host in (("edge", "127.0.0.2"), ("public", "127.0.0.3"), ("corp", "127.0.0.4")):
            peer = BrokerPeer(host, name=name, ssl_context=peer_context)
            started[name] = await stack.enter_async_context(peer)
        listeners = {name: {"brokerServiceUrlTls": peer.url} for name, peer in started.items()}
        listeners["internal"] = {"brokerServiceUrlTls": "pulsar+ssl://127.0.0.6:9"}
        config = config_of(tmp_path, one_broker_cluster(listeners), sni_gateway(files))
        gateway = await stack.enter_async_context(running(config))
        port, elsewhere = free_port(), free_port()  # nothing listens on `elsewhere`
        tls = gateway.port_of("edge", "pulsar+ssl")
        text = recipe(
            "haproxy/pulsar-lookup-gateway-sni.cfg",
            {
                "bind :6651": f"bind 127.0.0.1:{port}",
                "lookup.pulsar.corp.example.com": CORP_NAME,
                "lookup.pulsar.example.com": PUBLIC_NAME,
                "gateway-1.pulsar.example.com:6651": f"127.0.0.1:{tls}",
                "gateway-2.pulsar.example.com:6651": f"127.0.0.1:{tls}",
                "broker-1.pulsar.example.com:6651": f"127.0.0.1:{elsewhere}",
            },
        )
        await stack.enter_async_context(haproxy(tmp_path / "haproxy", [text], [port]))
        yield SniDeployment(gateway, started, port, ca_file, trust)


async def test_each_name_gets_its_listeners_certificate_and_urls(sni: SniDeployment) -> None:
    async def dialling(
        name: str | None, port: int, context: ssl.SSLContext = sni.trust
    ) -> tuple[str, str]:
        answer, ssl_object = await binary_lookup(
            "127.0.0.1", port, TOPIC, ssl_context=context, server_hostname=name
        )
        return answer.lookupTopicResponse.brokerServiceUrlTls, common_name(ssl_object)

    peers = sni.peers
    public = await dialling(PUBLIC_NAME, sni.port)
    assert public == (peers["public"].url, "public-gateway")
    corp = await dialling(CORP_NAME, sni.port)
    assert corp == (peers["corp"].url, "corp-gateway")
    # any other name goes to the recipe's other backend (where nothing listens here)
    with pytest.raises((ConnectionError, ssl.SSLError, OSError)):
        await dialling("broker-1.gateway.test", sni.port)
    # straight to the gateway's socket without a name: the socket's listener and certificate
    nameless = ssl.create_default_context(cafile=str(sni.ca_file))
    nameless.check_hostname = False  # no name to check (the chain is still verified)
    direct = await dialling(None, sni.gateway.port_of("edge", "pulsar+ssl"), nameless)
    assert direct == (peers["edge"].url, "edge-gateway")
    registry = sni.gateway.service.metrics.registry
    assert lookups(registry, "public", "sni", "binary") == 1
    assert lookups(registry, "corp", "sni", "binary") == 1
    assert lookups(registry, "edge", "socket", "binary") == 1


async def test_the_real_client_dialling_a_name_gets_that_names_listener(
    sni: SniDeployment,
) -> None:
    trust = {"tls_trust_certs_file_path": str(sni.ca_file)}
    # pulsar+ssl://localhost:... sends the name 'localhost'; HAProxy routes on it
    topic = f"{TOPIC}-by-name"
    await in_thread(produce, f"pulsar+ssl://{CORP_NAME}:{sni.port}", topic, **trust)
    assert sni.reached(topic) == ["corp"]
    # an IP address sends no name: the socket's listener
    topic = f"{TOPIC}-by-address"
    port = sni.gateway.port_of("edge", "pulsar+ssl")
    await in_thread(produce, f"pulsar+ssl://127.0.0.1:{port}", topic, **trust)
    assert sni.reached(topic) == ["edge"]


async def test_a_client_naming_the_internal_listener_through_sni_is_refused(
    sni: SniDeployment,
) -> None:
    """Issue 41: HAProxy passes TLS through and never sees the listener name a client sends;
    the recipe's gateway side (allowedListenerNames) refuses the internal listener whatever
    name the client dialled."""
    for name in (PUBLIC_NAME, CORP_NAME):
        answer, _ = await binary_lookup(
            "127.0.0.1", sni.port, TOPIC, ssl_context=sni.trust, server_hostname=name,
            listener="internal",
        )  # fmt: skip
        reply = answer.lookupTopicResponse
        assert reply.error == codec.ServerError.NotAllowedError, (name, reply)
        assert "127.0.0.6" not in str(reply), name
    # a listener the bound allows is answered as asked, over another name's connection
    answer, _ = await binary_lookup(
        "127.0.0.1", sni.port, TOPIC, ssl_context=sni.trust, server_hostname=PUBLIC_NAME,
        listener="corp",
    )  # fmt: skip
    assert answer.lookupTopicResponse.brokerServiceUrlTls == sni.peers["corp"].url
