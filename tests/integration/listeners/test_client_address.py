"""Where the client is, on the gateway's real sockets and without a balancer in front: clients
bound to distinct loopback source addresses (listener.<name>.clientCidrs), X-Forwarded-For and
Forwarded believed from trustedProxyCidrs only, and PROXY headers written by hand to a socket
with listener.<name>.proxyProtocol=true (v1, v2, LOCAL; refused from an untrusted peer, when
missing, malformed or late; then also with TLS and SNI behind the header).

Real nginx and HAProxy in front of the gateway: tests/e2e/test_behind_nginx.py and
tests/e2e/test_behind_haproxy.py. Every network wait is bounded.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import ssl
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trustme

from pulsar_lookup_gateway.gateway.process import Gateway
from pulsar_lookup_gateway.listeners.config.model import GatewayConfig
from pulsar_lookup_gateway.listeners.endpoints.proxy_protocol import V2_SIGNATURE
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
from tests.gateways import config_from, running
from tests.neighbours import (
    WAIT,
    binary_lookup,
    closed_without_answer,
    common_name,
    http_broker_url,
    lookups,
    one_broker_cluster,
    refusals,
)
from tests.waiting import eventually

TOPIC = "persistent://public/default/t1"
LOOKUP_PATH = "/lookup/v2/topic/persistent/public/default/t1"
OFFICE, PARTNER, PROXY, STRANGER = "127.0.0.7", "127.0.0.8", "127.0.0.9", "127.0.0.1"
# What broker b1 advertises for each listener (answers only: nobody connects to them here).
URLS = {
    "internal": "pulsar://127.0.0.2:6650",
    "office": "pulsar://127.0.0.3:6650",
    "partner": "pulsar://127.0.0.4:6650",
    "lb": "pulsar://127.0.0.5:6650",
}
TLS_URLS = {name: url.replace("pulsar://", "pulsar+ssl://") for name, url in URLS.items()}

GATEWAY = (
    "advertisedListeners=internal:pulsar://127.0.0.1:16650,office:pulsar://gw-office:6650,"
    "partner:pulsar://gw-partner:6650,lb:pulsar://gw-lb:6650\n"
    "bindAddresses=internal:pulsar://127.0.0.1:0,internal:http://127.0.0.1:0,"
    "lb:pulsar://127.0.0.1:0,lb:http://127.0.0.1:0\n"
    "brokerServicePort=\nwebServicePort=\n"
    f"listener.office.clientCidrs={OFFICE}/32\n"
    f"listener.partner.clientCidrs={PARTNER}/32\n"
    "listener.lb.proxyProtocol=true\n"
    f"trustedProxyCidrs={PROXY}/32\n"
)


def config_of(tmp_path: Path, text: str, *, tls: bool = False) -> GatewayConfig:
    listeners = {
        name: {("brokerServiceUrlTls" if tls else "brokerServiceUrl"): url}
        for name, url in (TLS_URLS if tls else URLS).items()
    }
    path = tmp_path / "cluster.json"
    write_snapshot(path, one_broker_cluster(listeners))
    return config_from(f"metadataStoreUrl=file:{path}\n{text}")


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with running(config_of(tmp_path, GATEWAY)) as started:
        yield started


def v1(source: str, port: int = 40000) -> bytes:
    return f"PROXY TCP4 {source} 127.0.0.1 {port} 6650\r\n".encode()


def v2(source: str | None, port: int = 40000) -> bytes:
    """A v2 PROXY header for TCP over IPv4 from `source`; None: a LOCAL header (a balancer's
    own health check, which names no client)."""
    if source is None:
        return V2_SIGNATURE + struct.pack(">BBH", 0x20, 0x00, 0)
    body = ipaddress.IPv4Address(source).packed + ipaddress.IPv4Address("127.0.0.1").packed
    body += struct.pack(">HH", port, 6650)
    return V2_SIGNATURE + struct.pack(">BBH", 0x21, 0x11, len(body)) + body


async def lookup_url(port: int, *, local_host: str, preamble: bytes = b"") -> str:
    answer, _ = await binary_lookup(
        "127.0.0.1", port, TOPIC, local_host=local_host, preamble=preamble
    )
    return str(answer.lookupTopicResponse.brokerServiceUrl)


async def raw_http_broker_url(port: int, preamble: bytes, *, local_host: str) -> str:
    """An HTTP lookup written by hand after `preamble` (a PROXY header)."""
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", port, local_addr=(local_host, 0)), WAIT
    )
    try:
        request = f"GET {LOOKUP_PATH} HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n"
        writer.write(preamble + request.encode())
        response = await asyncio.wait_for(reader.read(), WAIT)
    finally:
        writer.close()
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), response[:200]
    return str(json.loads(body)["brokerUrl"])


# -- client networks, no balancer ----------------------------------------------------------------


async def test_binary_clients_get_the_listener_of_their_network(gateway: Gateway) -> None:
    port = gateway.port_of("internal", "pulsar")
    assert await lookup_url(port, local_host=OFFICE) == URLS["office"]
    assert await lookup_url(port, local_host=PARTNER) == URLS["partner"]
    # a network no rule names: the socket's listener
    assert await lookup_url(port, local_host=STRANGER) == URLS["internal"]
    registry = gateway.service.metrics.registry
    assert lookups(registry, "office", "network", "binary") == 1
    assert lookups(registry, "partner", "network", "binary") == 1
    assert lookups(registry, "internal", "socket", "binary") == 1


async def test_http_clients_get_the_listener_of_their_network(gateway: Gateway) -> None:
    port = gateway.port_of("internal", "http")
    assert await http_broker_url(port, LOOKUP_PATH, local_host=OFFICE) == URLS["office"]
    assert await http_broker_url(port, LOOKUP_PATH, local_host=PARTNER) == URLS["partner"]
    assert await http_broker_url(port, LOOKUP_PATH, local_host=STRANGER) == URLS["internal"]
    assert lookups(gateway.service.metrics.registry, "partner", "network", "http") == 1


async def test_a_listener_name_the_client_gives_still_wins(gateway: Gateway) -> None:
    port = gateway.port_of("internal", "http")
    header = {"X-Pulsar-ListenerName": "partner"}
    assert (
        await http_broker_url(port, LOOKUP_PATH, local_host=OFFICE, headers=header)
        == URLS["partner"]
    )
    answer, _ = await binary_lookup("127.0.0.1", gateway.port_of("internal", "pulsar"), TOPIC)
    assert answer.lookupTopicResponse.brokerServiceUrl == URLS["internal"]


# -- forwarded headers ---------------------------------------------------------------------------


async def test_forwarded_headers_from_an_untrusted_peer_are_ignored(gateway: Gateway) -> None:
    port = gateway.port_of("internal", "http")
    for headers in ({"X-Forwarded-For": PARTNER}, {"Forwarded": f"for={PARTNER}"}):
        assert (
            await http_broker_url(port, LOOKUP_PATH, local_host=OFFICE, headers=headers)
            == URLS["office"]
        )
        assert (
            await http_broker_url(port, LOOKUP_PATH, local_host=STRANGER, headers=headers)
            == URLS["internal"]
        )


async def test_forwarded_headers_from_a_trusted_proxy_name_the_client(gateway: Gateway) -> None:
    port = gateway.port_of("internal", "http")

    async def via_proxy(headers: dict[str, str]) -> str:
        return await http_broker_url(port, LOOKUP_PATH, local_host=PROXY, headers=headers)

    assert await via_proxy({"X-Forwarded-For": PARTNER}) == URLS["partner"]
    assert await via_proxy({"Forwarded": f'for="{OFFICE}:4711";proto=http'}) == URLS["office"]
    # a client's own entry left of the one the proxy appended is not believed
    assert await via_proxy({"X-Forwarded-For": f"{PARTNER}, {OFFICE}"}) == URLS["office"]
    # an entry that is no address: the proxy itself is the client (no rule names it)
    assert await via_proxy({"X-Forwarded-For": "unknown"}) == URLS["internal"]
    # no header: the proxy's own address
    assert await via_proxy({}) == URLS["internal"]
    registry = gateway.service.metrics.registry
    assert lookups(registry, "partner", "network", "http") == 1
    assert lookups(registry, "office", "network", "http") == 2


# -- PROXY protocol ------------------------------------------------------------------------------


async def test_proxy_headers_from_a_trusted_balancer_name_the_client(gateway: Gateway) -> None:
    port = gateway.port_of("lb", "pulsar")
    assert await lookup_url(port, local_host=PROXY, preamble=v2(OFFICE)) == URLS["office"]
    assert await lookup_url(port, local_host=PROXY, preamble=v1(PARTNER)) == URLS["partner"]
    # LOCAL (a health check's) names no client: the balancer is, and no rule names it
    assert await lookup_url(port, local_host=PROXY, preamble=v2(None)) == URLS["lb"]
    http = gateway.port_of("lb", "http")
    assert await raw_http_broker_url(http, v2(PARTNER), local_host=PROXY) == URLS["partner"]
    assert await raw_http_broker_url(http, v1(OFFICE), local_host=PROXY) == URLS["office"]


async def test_a_proxy_protocol_socket_refuses_what_is_not_a_trusted_header(
    gateway: Gateway,
) -> None:
    registry = gateway.service.metrics.registry
    connect = codec.connect("no-header", 21)
    for scheme in ("pulsar", "http"):
        port = gateway.port_of("lb", scheme)
        # a connection that is fine, open before the refusals and used after them
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, local_addr=(PROXY, 0)), WAIT
        )
        try:
            writer.write(v2(OFFICE))
            # a peer outside trustedProxyCidrs, even with a well-formed header
            assert await closed_without_answer("127.0.0.1", port, v2(OFFICE), local_host=OFFICE)
            # a trusted peer without a header (a Pulsar CONNECT, an HTTP request line) ...
            first = connect if scheme == "pulsar" else b"GET / HTTP/1.1\r\n\r\n"
            assert await closed_without_answer("127.0.0.1", port, first, local_host=PROXY)
            # ... or with a malformed one
            bad = b"PROXY TCP4 10.1.2.3 nonsense\r\n"
            assert await closed_without_answer("127.0.0.1", port, bad, local_host=PROXY)
            assert refusals(registry, "lb", "untrusted-proxy") == (1 if scheme == "pulsar" else 2)
            assert refusals(registry, "lb", "proxy-header") == (2 if scheme == "pulsar" else 4)
            # the connection opened first is unaffected
            if scheme == "pulsar":
                writer.write(connect + codec.lookup(TOPIC, 7))
                data = await asyncio.wait_for(reader.read(65536), WAIT)
                assert data, "the good connection was closed"
            else:
                writer.write(f"GET {LOOKUP_PATH} HTTP/1.1\r\nHost: gw\r\n\r\n".encode())
                data = await asyncio.wait_for(reader.readuntil(b"}"), WAIT)
                assert URLS["office"].encode() in data
        finally:
            writer.close()
    # and new connections are served
    port = gateway.port_of("lb", "pulsar")
    assert await lookup_url(port, local_host=PROXY, preamble=v2(PARTNER)) == URLS["partner"]


async def test_a_header_that_does_not_arrive_in_time_is_refused(tmp_path: Path) -> None:
    config = config_of(tmp_path, GATEWAY + "connectionHandshakeTimeoutSeconds=1\n")
    async with running(config) as gateway:
        port = gateway.port_of("lb", "pulsar")
        # half a header, then nothing: closed by the deadline (waited for, not timed)
        assert await closed_without_answer("127.0.0.1", port, b"PROXY TCP4 ", local_host=PROXY)
        registry = gateway.service.metrics.registry
        assert refusals(registry, "lb", "proxy-header-timeout") == 1


# -- PROXY header, then TLS with a server name ---------------------------------------------------


async def test_tls_behind_a_proxy_header_with_server_names(tmp_path: Path) -> None:
    """The header is read before the TLS handshake; the name the client dialled then chooses
    the certificate and (before the network the header gave) the listener."""
    ca = trustme.CA()
    files = {}
    for stem in ("lb", "partner"):
        leaf = ca.issue_cert("127.0.0.1", "localhost", "partner.test", common_name=f"{stem}-gw")
        leaf.private_key_pem.write_to_path(tmp_path / f"{stem}.key")
        leaf.cert_chain_pems[0].write_to_path(tmp_path / f"{stem}.crt")
        files[stem] = (tmp_path / f"{stem}.crt", tmp_path / f"{stem}.key")
    text = (
        "advertisedListeners=internal:pulsar+ssl://127.0.0.1:16651,"
        "office:pulsar+ssl://gw-office:6651,partner:pulsar+ssl://gw-partner:6651,"
        "lb:pulsar+ssl://gw-lb:6651\n"
        "bindAddresses=lb:pulsar+ssl://127.0.0.1:0\nbrokerServicePort=\nwebServicePort=\n"
        f"tlsCertificateFilePath={files['lb'][0]}\ntlsKeyFilePath={files['lb'][1]}\n"
        f"listener.partner.tlsCertificateFilePath={files['partner'][0]}\n"
        f"listener.partner.tlsKeyFilePath={files['partner'][1]}\n"
        "listener.partner.sniHostnames=partner.test\n"
        f"listener.office.clientCidrs={OFFICE}/32\n"
        f"listener.lb.proxyProtocol=true\ntrustedProxyCidrs={PROXY}/32\n"
    )
    trust = ssl.create_default_context()
    ca.configure_trust(trust)
    async with running(config_of(tmp_path, text, tls=True)) as gateway:
        port = gateway.port_of("lb", "pulsar+ssl")

        async def tls_lookup(header: bytes, name: str) -> tuple[str, str]:
            answer, ssl_object = await binary_lookup(
                "127.0.0.1",
                port,
                TOPIC,
                local_host=PROXY,
                preamble=header,
                ssl_context=trust,
                server_hostname=name,
            )
            return answer.lookupTopicResponse.brokerServiceUrlTls, common_name(ssl_object)

        assert await tls_lookup(v2(OFFICE), "partner.test") == (TLS_URLS["partner"], "partner-gw")
        assert await tls_lookup(v2(OFFICE), "localhost") == (TLS_URLS["office"], "lb-gw")
        assert await tls_lookup(v1(STRANGER), "localhost") == (TLS_URLS["lb"], "lb-gw")
        registry = gateway.service.metrics.registry
        assert lookups(registry, "partner", "sni", "binary") == 1
        assert lookups(registry, "office", "network", "binary") == 1
        # the header must come first, in the clear: a bare ClientHello is refused
        with pytest.raises((ssl.SSLError, OSError)):
            await asyncio.to_thread(bare_handshake, trust, port)

        async def counted() -> bool:
            return refusals(registry, "lb", "proxy-header") == 1

        await eventually(counted)


def bare_handshake(context: ssl.SSLContext, port: int) -> None:
    """A TLS handshake with no PROXY header before it (blocking: run it in a thread)."""
    with (
        socket.create_connection(("127.0.0.1", port), WAIT, source_address=(PROXY, 0)) as sock,
        context.wrap_socket(sock, server_hostname="partner.test"),
    ):
        pass
