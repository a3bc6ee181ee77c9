"""Every HTTP route of the gateway through a real nginx running the recipes of deploy/nginx, as
written but for addresses, ports and certificate paths.

- pulsar-lookup-gateway.conf: the internet server block (TLS, re-encrypted to the external
  listener's HTTPS socket, X-Pulsar-ListenerName: external) and the corporate one (TLS, to the
  internal listener's HTTP socket, X-Pulsar-ListenerName: internal);
- pulsar-lookup-gateway-forwarded.conf: plain HTTP to the internal socket, X-Forwarded-For.

Each client route (tests/deploy/routes.py) must be answered through nginx exactly as the gateway
answers it directly, with the header that server block sets; the operations routes must stay
inside (nginx's own 404). The ownership watch's WebSocket upgrade must reach the upstream with
its Upgrade and Connection headers, and the tunnel must carry bytes both ways: an upstream that
records the request head and completes the handshake stands in for the gateway's socket.

The broker is a test peer (schemas and non-persistent topic lists are forwarded to it).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import re
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from pulsar_lookup_gateway.gateway.process import Gateway
from pulsar_lookup_gateway.http_api.server import HttpServer
from pulsar_lookup_gateway.listeners.config.conf_file import parse_properties
from pulsar_lookup_gateway.listeners.config.model import validate_raw
from pulsar_lookup_gateway.listeners.protocol.codec import Schema
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import free_port
from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
from pulsar_lookup_gateway.tls.devcerts import DevCerts, write_dev_certs
from tests.broker_peer import BrokerPeer
from tests.deploy.routes import CLIENT_ROUTES, OPERATIONS, WATCH, uncovered
from tests.neighbours import WAIT, nginx, nginx_binary, one_broker_cluster, recipe

pytestmark = pytest.mark.e2e

LISTENER_HEADER = "X-Pulsar-ListenerName"
#: The name nginx checks the gateway's certificate against (proxy_ssl_name of the recipe).
GATEWAY_NAME = "pulsar.example.com"
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455
TOPIC_PATH = "public/default/t1"  # the topic of the example routes (tests/deploy/routes.py)


@dataclass(frozen=True)
class Front:
    """One nginx server block: where clients reach it, and what the gateway answers there."""

    name: str
    url: str  # nginx
    direct: str  # the gateway socket the block proxies to
    listener: str | None  # the X-Pulsar-ListenerName the block sets (None: removes it)


@dataclass
class Stage:
    certs: DevCerts
    fronts: list[Front] = field(default_factory=list)
    gateway: Gateway | None = None

    def client_tls(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.certs.directory / "ca.crt"))


def recipes(certs: DevCerts, ports: dict[str, int], upstream: dict[str, int]) -> str:
    """Both HTTP recipes, as one http {} include, on loopback ports: `ports` of nginx's server
    blocks (external, corp, forwarded), `upstream` the gateway's (or a stand-in's) https and
    http sockets."""
    d = certs.directory
    main = recipe(
        "nginx/pulsar-lookup-gateway.conf",
        {
            "listen 443 ssl;": f"listen 127.0.0.1:{ports['external']} ssl;",
            "listen 10.0.0.10:443 ssl;": f"listen 127.0.0.1:{ports['corp']} ssl;",
            "/etc/nginx/tls/lookup.pulsar.example.com.crt": str(d / "server.crt"),
            "/etc/nginx/tls/lookup.pulsar.example.com.key": str(d / "server.key"),
            "/etc/nginx/tls/lookup.pulsar.corp.example.com.crt": str(d / "server.crt"),
            "/etc/nginx/tls/lookup.pulsar.corp.example.com.key": str(d / "server.key"),
            "/etc/nginx/tls/pulsar-lookup-gateway-ca.crt": str(d / "ca.crt"),
            "gateway-1.pulsar.example.com:8443": f"127.0.0.1:{upstream['https']}",
            "gateway-2.pulsar.example.com:8443": f"127.0.0.1:{upstream['https']}",
            "gateway-1.pulsar.example.com:8080": f"127.0.0.1:{upstream['http']}",
            "gateway-2.pulsar.example.com:8080": f"127.0.0.1:{upstream['http']}",
        },
    )
    forwarded = recipe(
        "nginx/pulsar-lookup-gateway-forwarded.conf",
        {
            "listen 8080;": f"listen 127.0.0.1:{ports['forwarded']};",
            "gateway-1.pulsar.example.com:8080": f"127.0.0.1:{upstream['http']}",
            "gateway-2.pulsar.example.com:8080": f"127.0.0.1:{upstream['http']}",
        },
    )
    return main + "\n" + forwarded


def fronts(ports: dict[str, int], upstream: dict[str, int]) -> list[Front]:
    https, http = f"https://127.0.0.1:{upstream['https']}", f"http://127.0.0.1:{upstream['http']}"
    return [
        Front("internet", f"https://127.0.0.1:{ports['external']}", https, "external"),
        Front("corp", f"https://127.0.0.1:{ports['corp']}", http, "internal"),
        Front("forwarded", f"http://127.0.0.1:{ports['forwarded']}", http, None),
    ]


def cluster(broker: BrokerPeer) -> dict[str, Any]:
    """One broker (the test peer on the internal listener) owning public/default, with a
    Kafka handler, a persistent topic t1 and a partitioned topic orders."""
    nodes = one_broker_cluster(
        {
            "internal": {"brokerServiceUrl": broker.url, "brokerHttpUrl": "http://10.0.0.1:8080"},
            "external": {
                "brokerServiceUrlTls": "pulsar+ssl://broker-1.pulsar.example.com:6651",
                "brokerHttpsUrl": "https://broker-1.pulsar.example.com:8443",
            },
        }
    )
    nodes["/loadbalance/brokers/b1:8080"]["protocols"] = {
        "kafka": "internal:PLAINTEXT://10.0.0.1:9092,external:SSL://kafka.example.com:9093"
    }
    nodes["/managed-ledgers/public/default/persistent/t1"] = {}
    nodes["/admin/partitioned-topics/public/default/persistent/orders"] = {"partitions": 3}
    return nodes


@pytest.fixture
async def stage(tmp_path: Path) -> AsyncIterator[Stage]:
    """The gateway (internal: HTTP, external: HTTPS) behind nginx on both recipes."""
    nginx_binary()  # skip before starting anything when nginx is not installed
    certs = write_dev_certs(tmp_path / "certs", [GATEWAY_NAME])
    async with contextlib.AsyncExitStack() as stack:
        broker = await stack.enter_async_context(BrokerPeer(name="broker"))
        broker.schemas["persistent://public/default/s"] = Schema(
            name="public/default/s", schema_data=b"", type=Schema.STRING
        )
        broker.topics["public/default"] = ["non-persistent://public/default/np"]
        snapshot = tmp_path / "cluster.json"
        write_snapshot(snapshot, cluster(broker))
        d = certs.directory
        raw = parse_properties(
            f"metadataStoreUrl=file:{snapshot}\n"
            f"advertisedListeners=internal:http://127.0.0.1:8080,external:https://{GATEWAY_NAME}\n"
            "bindAddresses=internal:http://127.0.0.1:0,external:https://127.0.0.1:0\n"
            "brokerServicePort=\nwebServicePort=\n"
            f"tlsCertificateFilePath={d / 'server.crt'}\ntlsKeyFilePath={d / 'server.key'}\n",
            "test.conf",
        )
        gateway = Gateway(validate_raw(raw).config)
        await gateway.start()
        stack.push_async_callback(gateway.stop)
        upstream = {
            "https": gateway.port_of("external", "https"),
            "http": gateway.port_of("internal", "http"),
        }
        ports = {name: free_port() for name in ("external", "corp", "forwarded")}
        await stack.enter_async_context(
            nginx(tmp_path / "nginx", list(ports.values()), http=recipes(certs, ports, upstream))
        )
        yield Stage(certs, fronts(ports, upstream), gateway)


async def get(
    stage: Stage, url: str, headers: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """(status, content type, body) of a GET."""
    timeout = aiohttp.ClientTimeout(total=WAIT)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(url, headers=headers, ssl=stage.client_tls(), allow_redirects=False) as reply,
    ):
        return reply.status, reply.content_type, await reply.text()


async def test_every_client_route_is_answered_through_nginx_as_by_the_gateway(
    stage: Stage,
) -> None:
    for front in stage.fronts:
        header = {LISTENER_HEADER: front.listener} if front.listener else {}
        for name, path in CLIENT_ROUTES.items():
            direct = await get(stage, front.direct + path, header)
            assert direct[0] == 200, (name, direct)  # the route answers (not an error)
            # a client header nginx replaces or removes changes nothing
            through = await get(stage, front.url + path, {LISTENER_HEADER: "not-a-listener"})
            assert through == direct, f"{front.name}: {name} {path}"
    # the answers came from each listener: the header each block sets chose it
    lookups = {
        front.name: json.loads((await get(stage, front.url + CLIENT_ROUTES["lookup"]))[2])
        for front in stage.fronts
    }
    assert lookups["internet"]["brokerUrlTls"] == "pulsar+ssl://broker-1.pulsar.example.com:6651"
    assert lookups["corp"]["brokerUrl"].startswith("pulsar://127.0.0.1:")  # the broker peer
    assert lookups["forwarded"] == lookups["corp"]  # the socket's listener: internal


async def test_an_internet_client_naming_the_internal_listener_gets_no_internal_address(
    stage: Stage,
) -> None:
    """Issue 41: `?listenerName=internal` through the internet block won over the header nginx
    sets (the answer was the internal listener's address). The recipe passes on no listener
    name of a client's, however spelt; here the gateway bounds nothing itself (no
    allowedListenerNames), so the recipe alone must hold. The parameters the routes read
    still pass."""
    internet = stage.fronts[0]
    assert internet.name == "internet"
    external = json.loads((await get(stage, internet.url + CLIENT_ROUTES["lookup"]))[2])
    # (directly, the gateway answers the internal listener's addresses)
    direct = await get(stage, f"{internet.direct}{CLIENT_ROUTES['lookup']}?listenerName=internal")
    assert "127.0.0.1" in direct[2], direct
    asked = [
        "listenerName=internal",
        "listenerName=internal&listenerName=internal",
        "a=1&listenerName=internal",
        "listener%4Eame=internal",  # the gateway decodes a parameter's name
        "ListenerName=internal&listenerName=internal",
    ]
    internal = ("127.0.0.1", "10.0.0.1")  # the broker peer's and the Kafka handler's addresses
    for query in asked:
        for path in (CLIENT_ROUTES["lookup"], CLIENT_ROUTES["protocol"]):
            status, _, body = await get(stage, f"{internet.url}{path}?{query}")
            assert status == 200, (query, path, body)
            assert not [a for a in internal if a in body], (query, path, body)
        status, _, body = await get(stage, f"{internet.url}{CLIENT_ROUTES['lookup']}?{query}")
        assert json.loads(body) == external, query
    # the header too: the block's own value replaces the client's
    for path in (CLIENT_ROUTES["lookup"], CLIENT_ROUTES["protocol"]):
        status, _, body = await get(stage, internet.url + path, {LISTENER_HEADER: "internal"})
        assert status == 200 and not [a for a in internal if a in body], (path, body)
    # the admin routes' own parameters pass (an unknown mode is refused, as directly)
    topics = "/admin/v2/namespaces/public/default/topics"
    bad = await get(stage, f"{internet.url}{topics}?mode=NOPE&listenerName=internal")
    assert bad[0] == 400 and "mode" in bad[2], bad
    forwarded = await get(stage, f"{internet.url}{topics}?listenerName=internal&mode=ALL")
    assert forwarded[0] == 200 and "non-persistent://public/default/np" in forwarded[2]


async def test_the_operations_routes_stay_inside(stage: Stage) -> None:
    for front in stage.fronts:
        for path in OPERATIONS:
            direct = await get(stage, front.direct + path)
            assert direct[0] != 404, (front.name, path, direct)
            status, content_type, _ = await get(stage, front.url + path)
            # nginx's own page, not the gateway's JSON
            assert (status, content_type) == (404, "text/html"), (front.name, path)


def test_the_examples_cover_every_route_of_the_gateway(stage: Stage) -> None:
    """A route added to the gateway without an example here (and a decision in the recipes)
    fails this test."""
    assert stage.gateway is not None
    (app,) = [
        server.app
        for spec, server in stage.gateway.servers
        if isinstance(server, HttpServer) and spec.listener == "internal"
    ]
    patterns: list[re.Pattern[str] | str] = []
    for resource in app.router.resources():
        info = resource.get_info()
        if "path" in info:
            patterns.append(info["path"])
        elif info.get("formatter") != "/{path}":  # the catch-all
            patterns.append(info["pattern"])
    assert len(patterns) >= 13
    assert uncovered(patterns, [*CLIENT_ROUTES.values(), WATCH, *OPERATIONS]) == []


# -- the ownership watch: the WebSocket upgrade through nginx --------------------------------


@dataclass
class Upgrades:
    """A stand-in for the gateway's HTTP(S) socket that takes WebSocket upgrades: it records
    each request head, answers 101 as RFC 6455 asks, then echoes what the client sends."""

    heads: list[dict[str, str]] = field(default_factory=list)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT)).decode()
            lines = head.split("\r\n")
            headers = {"": lines[0]} | {
                name.strip().lower(): value.strip()
                for name, _, value in (line.partition(":") for line in lines[1:] if line)
            }
            self.heads.append(headers)
            accept = base64.b64encode(
                hashlib.sha1((headers["sec-websocket-key"] + WS_GUID).encode()).digest()
            ).decode()
            writer.write(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept.encode() + b"\r\n\r\n"
            )
            while data := await asyncio.wait_for(reader.read(65536), WAIT):
                writer.write(data)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError, KeyError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def watch_stage(tmp_path: Path) -> AsyncIterator[tuple[Stage, Upgrades]]:
    """nginx on both recipes in front of the upgrade stand-in (HTTPS with the certificate the
    recipe checks, and plain HTTP)."""
    nginx_binary()
    certs = write_dev_certs(tmp_path / "certs", [GATEWAY_NAME])
    upgrades = Upgrades()
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(certs.server_cert, certs.server_key)
    async with contextlib.AsyncExitStack() as stack:
        https = await asyncio.start_server(upgrades.serve, "127.0.0.1", 0, ssl=tls)
        http = await asyncio.start_server(upgrades.serve, "127.0.0.1", 0)
        for server in (https, http):
            stack.push_async_callback(server.wait_closed)
            stack.callback(server.close)
        upstream = {
            "https": https.sockets[0].getsockname()[1],
            "http": http.sockets[0].getsockname()[1],
        }
        ports = {name: free_port() for name in ("external", "corp", "forwarded")}
        await stack.enter_async_context(
            nginx(tmp_path / "nginx", list(ports.values()), http=recipes(certs, ports, upstream))
        )
        yield Stage(certs, fronts(ports, upstream)), upgrades


async def upgrade(stage: Stage, url: str) -> tuple[str, bytes]:
    """Ask `url`'s host to upgrade WATCH to a WebSocket; its status line, and what comes back
    through the tunnel after sending some bytes."""
    scheme, _, address = url.partition("://")
    host, _, port = address.rpartition(":")
    tls = stage.client_tls() if scheme == "https" else None
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port), ssl=tls), WAIT)
    try:
        key = base64.b64encode(b"sixteen-byte-key").decode()
        writer.write(
            f"GET {WATCH} HTTP/1.1\r\nHost: {address}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            f"Sec-WebSocket-Version: 13\r\n{LISTENER_HEADER}: not-a-listener\r\n\r\n".encode()
        )
        head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT)).decode()
        status = head.split("\r\n", 1)[0]
        if " 101 " not in status:
            return status, b""
        writer.write(b"through the tunnel")
        echoed = await asyncio.wait_for(reader.readexactly(len(b"through the tunnel")), WAIT)
        return status, echoed
    finally:
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError, TimeoutError):
            await asyncio.wait_for(writer.wait_closed(), WAIT)


async def test_the_watch_upgrade_passes_nginx_with_its_headers(
    watch_stage: tuple[Stage, Upgrades],
) -> None:
    stage, upgrades = watch_stage
    for front in stage.fronts:
        status, echoed = await upgrade(stage, front.url)
        assert " 101 " in status, (front.name, status)
        assert echoed == b"through the tunnel", front.name
        head = upgrades.heads[-1]
        assert head[""] == f"GET {WATCH} HTTP/1.1", front.name
        assert head["upgrade"] == "websocket", front.name
        assert head["connection"].lower() == "upgrade", front.name
        assert "sec-websocket-key" in head and head["sec-websocket-version"] == "13"
        # the listener is the server block's, never the client's
        assert head.get(LISTENER_HEADER.lower()) == front.listener, front.name
    assert len(upgrades.heads) == len(stage.fronts)


async def first_watch_message(
    stage: Stage, url: str, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """Subscribe to the lookup route's topic over the gateway's ownership watch at `url`; the
    first message pushed."""
    timeout = aiohttp.ClientTimeout(total=WAIT)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.ws_connect(url + WATCH, headers=headers, ssl=stage.client_tls()) as ws,
    ):
        await ws.send_json({"type": "subscribe", "topics": [f"persistent://{TOPIC_PATH}"]})
        message = await ws.receive_json(timeout=WAIT)
        assert isinstance(message, dict)
        return message


async def test_the_gateways_watch_streams_through_nginx_for_the_blocks_listener(
    stage: Stage,
) -> None:
    for front in stage.fronts:
        header = {LISTENER_HEADER: front.listener} if front.listener else {}
        direct = await first_watch_message(stage, front.direct, header)
        assert direct["type"] == "owner", direct
        through = await first_watch_message(stage, front.url, {LISTENER_HEADER: "nobody"})
        assert through == direct, front.name
    internet = await first_watch_message(stage, stage.fronts[0].url)
    assert internet["brokerUrlTls"] == "pulsar+ssl://broker-1.pulsar.example.com:6651"
