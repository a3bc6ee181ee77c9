"""The HTTP front end against hostile input, over real sockets on 127.0.0.1 (issue 13):
what an answer may tell a stranger (redirect targets, the listener table, /ready, malformed
requests, refused listener names, the Server header), and how long a connection that sends
nothing, or too many connections, can hold a socket.

Every attack is bounded in count and time; the figures measured are printed (pytest -s).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import pytest
from yarl import URL

from pulsar_lookup_gateway.http_api.app import build_app
from pulsar_lookup_gateway.http_api.server import SERVER_NAME, HttpServer
from pulsar_lookup_gateway.http_api.settings import HttpSettings
from pulsar_lookup_gateway.listeners.auth import Authenticator, TokenAuthenticationProvider
from pulsar_lookup_gateway.listeners.endpoints.addresses import Endpoint, Scheme
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.lookup.source import MetadataSource
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import free_port
from pulsar_lookup_gateway.metadata_store.synthetic import broker_id
from pulsar_lookup_gateway.metadata_store.url import parse_metadata_url
from pulsar_lookup_gateway.metadata_store.zookeeper import ZooKeeperSource
from pulsar_lookup_gateway.serving.service import LookupService
from tests.integration.http_api.served import (
    LOOKUP,
    OWNED_TOPIC,
    UNOWNED_TOPIC,
    file_service,
    gateway_cluster,
)
from tests.tls_pair import server_and_client

HOST = "127.0.0.1"
WAIT = 10.0  # bound on any single read in these tests
SLACK = 5.0  # added to a deadline before a test calls the connection "held"
SECRET = bytes(range(32))
ROOT, STRANGER = "root", "stranger"
TABLE: list[dict[str, object]] = [{"address": "10.9.9.9:8080", "listener": "internal"}]
# What no answer to a stranger may contain: the brokers' internal addresses and ids.
INTERNAL = ("10.0.0.", "b1:8080", "b2:8080", "b3:8080")


def bearer(role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {jwt.encode({'sub': role}, SECRET, algorithm='HS256')}"}


def authenticator() -> Authenticator:
    """'external' requires a token and may ask only for itself; 'internal' requires nothing."""
    return Authenticator(
        (TokenAuthenticationProvider(SECRET, "HS256"),),
        required={"external": True},
        allowed_names={"external": ["external"]},
    )


@contextlib.asynccontextmanager
async def serving(
    service: LookupService,
    listener: str | None,
    *,
    auth: Authenticator | None = None,
    ssl_context: ssl.SSLContext | None = None,
    **server: Any,
) -> AsyncIterator[HttpServer]:
    scheme = Scheme.HTTPS if ssl_context is not None else Scheme.HTTP
    spec = SocketSpec(Endpoint(scheme, HOST, 0), listener, "hardening test socket")
    settings = HttpSettings(
        listener,
        authenticator=auth or Authenticator(),
        super_users=frozenset({ROOT}),
        listener_table=lambda: TABLE,
    )
    app = build_app(service, settings)
    http = HttpServer(spec, app, ssl_context, **server)
    await http.start()
    try:
        yield http
    finally:
        await http.stop(5)


async def get(
    server: HttpServer, path: str, headers: dict[str, str] | None = None
) -> tuple[int, Any, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            URL(server.url + path, encoded=True), headers=headers, allow_redirects=False
        ) as response,
    ):
        return response.status, response.headers, await response.text()


def bare_listener_cluster(*, default_web_urls: bool) -> dict[str, Any]:
    """gateway_cluster() whose brokers also advertise 'bare': a binary URL, no web URL."""
    nodes = gateway_cluster()
    for i in (1, 2, 3):
        broker = nodes[f"/loadbalance/brokers/{broker_id(i)}"]
        broker["advertisedListeners"]["bare"] = {"brokerServiceUrl": f"pulsar://bare.b{i}:6650"}
        if not default_web_urls:
            broker.pop("webServiceUrl", None)
    for path, node in nodes.items():
        if path.startswith("/namespace/") and "advertisedListeners" in node:
            node["advertisedListeners"]["bare"] = {"brokerServiceUrl": "pulsar://bare.b1:6650"}
    return nodes


# -- item 5: an answer for listener X carries X's URLs only -----------------------------------


@pytest.mark.parametrize("default_web_urls", [True, False], ids=["defaults", "no-defaults"])
async def test_redirect_without_a_web_url_for_the_listener_is_503_retry_after(
    tmp_path: Path, default_web_urls: bool
) -> None:
    """The leader has web URLs for 'internal' only: a lookup for 'bare' that must be redirected
    answers 503 with Retry-After instead of sending the client to an internal address."""
    nodes = bare_listener_cluster(default_web_urls=default_web_urls)
    async with (
        file_service(tmp_path, nodes) as service,
        serving(service, "zone") as server,
    ):
        status, headers, text = await get(server, f"{LOOKUP}/{UNOWNED_TOPIC}?listenerName=bare")
        owned_status, _, owned = await get(server, f"{LOOKUP}/{OWNED_TOPIC}?listenerName=bare")
    print(f"redirect for a listener without web URL: {status} {dict(headers)} {text}")
    assert status == 503
    assert headers["Retry-After"] == "1"
    assert "Location" not in headers
    assert "'bare'" in json.loads(text)["reason"]
    answer = f"{dict(headers)} {text}"
    assert not any(address in answer for address in INTERNAL), answer
    # the owner answers for 'bare' with its binary URL, and its web URLs empty, not defaulted
    assert owned_status == 200
    assert json.loads(owned) == {
        "brokerUrl": "pulsar://bare.b1:6650",
        "brokerUrlTls": "",
        "httpUrl": "",
        "httpUrlTls": "",
        "nativeUrl": "pulsar://bare.b1:6650",
        "brokerUrlSsl": "",
    }


async def test_listener_table_is_for_super_users_where_authentication_is_on(
    tmp_path: Path,
) -> None:
    path = "/admin/v2/gateway/listeners"
    async with (
        file_service(tmp_path, gateway_cluster()) as service,
        serving(service, "external", auth=authenticator()) as external,
        serving(service, "internal", auth=authenticator()) as internal,
    ):
        anonymous = await get(external, path)
        stranger = await get(external, path, bearer(STRANGER))
        root = await get(external, path, bearer(ROOT))
        open_socket = await get(internal, path)
    assert (anonymous[0], anonymous[1]["WWW-Authenticate"]) == (401, "Bearer")
    assert stranger[0] == 403
    assert "super-users" in json.loads(stranger[2])["reason"]
    for _, _, text in (anonymous, stranger):
        assert "10.9.9.9" not in text
    assert (root[0], json.loads(root[2])) == (200, TABLE)
    assert (open_socket[0], json.loads(open_socket[2])) == (200, TABLE)


async def send(
    server: HttpServer, method: str, path: str, headers: dict[str, str] | None = None
) -> int:
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, URL(server.url + path, encoded=True), headers=headers) as reply,
    ):
        return reply.status


async def test_operations_routes_authenticate_before_routing(tmp_path: Path) -> None:
    """Security: on a socket that requires authentication, a stranger learns nothing of which
    operations paths and methods exist (was: 404 for an unknown /admin/v2/gateway/ path, 405
    for a known path with another method, before asking for credentials); /metrics is for any
    authenticated role, as Pulsar's proxy has it (issue 41: it was for super-users, and
    Prometheus needed a super-user token), the listener table for super-users; with
    authenticateMetricsEndpoint=false /metrics is open."""
    gateway_paths = (
        ("GET", "/admin/v2/gateway/nope"),
        ("GET", "/admin/v2/gateway/"),
        ("POST", "/admin/v2/gateway/listeners"),
        ("DELETE", "/metrics"),
        ("PUT", "/admin/v2/anything"),
        ("GET", "/admin/v2/namespaces/public/default/topics?mode=NOPE"),
        ("GET", "/admin/v2/schemas/public/default/t/schema/not-a-version"),
    )
    async with (
        file_service(tmp_path, gateway_cluster()) as service,
        serving(service, "external", auth=authenticator()) as external,
        serving(service, "internal", auth=authenticator()) as internal,
    ):
        for method, path in gateway_paths:
            assert await send(external, method, path) == 401, (method, path)
            # once authenticated, the route is looked up as before
            assert await send(external, method, path, bearer(ROOT)) in (400, 404, 405)
            assert await send(internal, method, path) in (400, 404, 405)
        assert await send(external, "GET", "/metrics") == 401
        assert await send(external, "GET", "/metrics", bearer(STRANGER)) == 200
        assert await send(external, "GET", "/metrics", {"Authorization": "Bearer nope"}) == 401
        listeners = "/admin/v2/gateway/listeners"
        assert await send(external, "GET", listeners, bearer(STRANGER)) == 403
        assert await send(external, "GET", listeners, bearer(ROOT)) == 200
        assert await send(external, "GET", "/metrics", bearer(ROOT)) == 200
        assert await send(internal, "GET", "/metrics") == 200  # nobody authenticates there
        assert await send(external, "GET", "/health") == 200  # the probes stay open
        spec = SocketSpec(Endpoint(Scheme.HTTP, HOST, 0), "external", "open metrics socket")
        settings = HttpSettings(
            "external",
            authenticator=authenticator(),
            super_users=frozenset({ROOT}),
            authenticate_metrics=False,
            listener_table=lambda: TABLE,
        )
        app = build_app(service, settings)
        open_metrics = HttpServer(spec, app, None)
        await open_metrics.start()
        try:
            assert await send(open_metrics, "GET", "/metrics") == 200
        finally:
            await open_metrics.stop(5)


# -- item 9: /ready tells strangers nothing about the metadata store ---------------------------


async def test_ready_on_an_authenticated_socket_gives_a_generic_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A real ZooKeeper client pointed at a port where nothing listens: never ready; the
    socket that requires authentication does not say where ZooKeeper is."""
    port = free_port()
    chroot = "/secret-chroot"
    source: MetadataSource = ZooKeeperSource(
        parse_metadata_url(f"zk:{HOST}:{port}{chroot}"), start_timeout=0.2
    )
    with caplog.at_level(logging.WARNING):
        await source.start()
    try:
        service = LookupService(source, internal_listener="internal")
        async with (
            serving(service, "external", auth=authenticator()) as external,
            serving(service, "internal", auth=authenticator()) as internal,
        ):
            stranger = await get(external, "/ready")
            operator = await get(internal, "/ready")
    finally:
        await source.close()
    print(f"/ready: authenticated socket {stranger[2]}; open socket {operator[2]}")
    assert stranger[0] == operator[0] == 503
    assert json.loads(stranger[2]) == {
        "ready": False,
        "stale": False,
        "reason": "metadata store not ready",
    }
    assert str(port) not in stranger[2] and chroot not in stranger[2]
    assert chroot in json.loads(operator[2])["reason"]  # the detail where no stranger asks
    assert any(chroot in record.getMessage() for record in caplog.records)  # and in the log


# -- item 11: errors free of request bytes, no version, no list of allowed names --------------

SECRET_TOKEN = "eyJzZWNyZXQ.dG9rZW4.c2ln"
MALFORMED = [
    b"GET /health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + SECRET_TOKEN.encode()
    + b"\x01\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + SECRET_TOKEN.encode()
    + b"A" * 9000 + b"\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\nBad Header: Bearer " + SECRET_TOKEN.encode()
    + b"\r\n\r\n",
    b"GET /\x01" + SECRET_TOKEN.encode() + b" HTTP/1.1\r\n\r\n",
    b"GARBAGE " + SECRET_TOKEN.encode() + b"\r\n\r\n",
]  # fmt: skip


async def raw_exchange(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), WAIT)
    finally:
        writer.close()


@pytest.mark.parametrize("request_bytes", MALFORMED, ids=range(len(MALFORMED)))
async def test_malformed_requests_get_a_generic_400(
    tmp_path: Path, request_bytes: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    async with file_service(tmp_path, gateway_cluster()) as service:
        with caplog.at_level(logging.DEBUG):
            async with serving(service, "external", auth=authenticator()) as server:
                answer = await raw_exchange(server.port, request_bytes)
    head, _, body = answer.partition(b"\r\n\r\n")
    print(f"malformed request -> {answer!r}")
    assert head.startswith(b"HTTP/1.") and b" 400 " in head.split(b"\r\n")[0]
    assert f"Server: {SERVER_NAME}\r\n".encode() in head + b"\r\n"
    assert b"aiohttp" not in answer and b"Python" not in answer
    assert json.loads(body) == {"reason": "Bad Request"}
    assert SECRET_TOKEN.encode() not in answer
    # no error, no traceback, and no token in the log for a client's mistake
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not any(SECRET_TOKEN in r.getMessage() for r in caplog.records)
    assert not any(r.exc_info for r in caplog.records)


async def test_no_answer_names_the_server_version(tmp_path: Path) -> None:
    async with (
        file_service(tmp_path, gateway_cluster()) as service,
        serving(service, "zone") as server,
    ):
        for path in (f"{LOOKUP}/{OWNED_TOPIC}", f"{LOOKUP}/{UNOWNED_TOPIC}", "/nope", "/metrics"):
            status, headers, _ = await get(server, path)
            assert headers.getall("Server") == [SERVER_NAME], (path, status)


async def test_refused_listener_names_are_not_listed(tmp_path: Path) -> None:
    async with (
        file_service(tmp_path, gateway_cluster()) as service,
        serving(service, "external", auth=authenticator()) as server,
    ):
        status, _, text = await get(
            server, f"{LOOKUP}/{OWNED_TOPIC}?listenerName=internal", bearer(ROOT)
        )
        header_status, _, header_text = await get(
            server, f"{LOOKUP}/{OWNED_TOPIC}", {**bearer(ROOT), "X-Pulsar-ListenerName": "zone"}
        )
    assert (status, header_status) == (400, 400)
    refused = "listener '{}' may not be asked for on this socket"
    assert json.loads(text)["reason"] == refused.format("internal")
    assert json.loads(header_text)["reason"] == refused.format("zone")
    assert "external" not in text + header_text  # the allowed name stays unsaid


# -- item 8: client text echoed is escaped and cut ---------------------------------------------


@pytest.mark.parametrize(
    ("path", "escaped"),
    [
        (f"{LOOKUP}/{OWNED_TOPIC}?listenerName=a%1B%5B31mb", "a\\x1b[31mb"),
        ("/x%1B%5B2J%0Aforged", "/x\\x1b[2J\\nforged"),
        ("/" + "y" * 5000, "more characters"),
    ],
)
async def test_echoed_client_text_is_escaped_and_cut(
    tmp_path: Path, path: str, escaped: str
) -> None:
    async with (
        file_service(tmp_path, gateway_cluster()) as service,
        serving(service, "zone") as server,
    ):
        status, _, text = await get(server, path)
    reason = json.loads(text)["reason"]
    print(f"{status}: {len(path)} characters sent, {len(reason)} echoed: {reason[:90]!r}")
    assert status in (400, 404)
    assert escaped in reason
    assert reason.isprintable()
    assert len(reason) < 400


# -- item 6: the handshake deadline counts from accept ------------------------------------------


async def closed_after(reader: asyncio.StreamReader, started: float) -> float:
    """Seconds from `started` until the server closed the connection (EOF or reset); fails
    if it is still open after WAIT seconds."""
    with contextlib.suppress(ConnectionResetError):
        while await asyncio.wait_for(reader.read(65536), WAIT):
            pass
    return time.monotonic() - started


@pytest.fixture(scope="module")
def tls_pair() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    return server_and_client(HOST)


HEAD_TIMEOUT = 0.5


@pytest.mark.parametrize("kind", ["http-silent", "https-no-client-hello", "https-no-request"])
async def test_a_silent_connection_is_closed_at_the_handshake_deadline(
    tmp_path: Path, tls_pair: tuple[ssl.SSLContext, ssl.SSLContext], kind: str
) -> None:
    """Before: a silent HTTP connection was held 75 s (keep-alive), an HTTPS one without a
    ClientHello 60 s (asyncio's TLS handshake default)."""
    server_ctx, client_ctx = tls_pair
    tls = kind.startswith("https")
    async with (
        file_service(tmp_path, gateway_cluster()) as service,
        serving(
            service, "zone", ssl_context=server_ctx if tls else None, head_timeout=HEAD_TIMEOUT
        ) as server,
    ):
        started = time.monotonic()
        context = client_ctx if kind == "https-no-request" else None
        reader, writer = await asyncio.open_connection(
            HOST, server.port, ssl=context, server_hostname=HOST if context else None
        )
        try:
            seconds = await closed_after(reader, started)
        finally:
            writer.close()
    print(f"{kind}: closed {seconds:.2f}s after connecting (deadline {HEAD_TIMEOUT}s)")
    assert seconds < HEAD_TIMEOUT + SLACK


async def test_a_slow_request_head_is_closed_at_the_deadline_from_accept(tmp_path: Path) -> None:
    """Slowloris: a header line every 50 ms never completes the head."""
    async with (
        file_service(tmp_path, gateway_cluster()) as service,
        serving(service, "zone", head_timeout=HEAD_TIMEOUT) as server,
    ):
        started = time.monotonic()
        reader, writer = await asyncio.open_connection(HOST, server.port)
        writer.write(b"GET /health HTTP/1.1\r\n")
        lines = 0
        try:
            while not reader.at_eof() and lines < 400:  # 20 s at most
                writer.write(b"X-Drip: %d\r\n" % lines)
                await writer.drain()
                lines += 1
                await asyncio.sleep(0.05)
        except ConnectionError:
            pass
        seconds = await closed_after(reader, started)
        writer.close()
        timed_out = server.timed_out_connections
    print(f"slow head: closed after {seconds:.2f}s and {lines} header lines")
    assert timed_out == 1
    assert lines < 400


async def test_keep_alive_between_requests_is_not_the_head_deadline(tmp_path: Path) -> None:
    """After a request, an idle keep-alive connection outlives the head deadline."""
    async with (
        file_service(tmp_path, gateway_cluster()) as service,
        serving(service, "zone", head_timeout=HEAD_TIMEOUT) as server,
    ):
        reader, writer = await asyncio.open_connection(HOST, server.port)
        request = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
        answers = []
        for _ in range(2):
            writer.write(request)
            answers.append(await asyncio.wait_for(reader.readuntil(b'"alive"}'), WAIT))
            await asyncio.sleep(HEAD_TIMEOUT * 3)
        writer.close()
    assert len(answers) == 2 and all(b" 200 OK" in answer for answer in answers)


async def test_many_silent_connections_log_a_few_lines(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    count = 50
    async with file_service(tmp_path, gateway_cluster()) as service:
        with caplog.at_level(logging.INFO, logger="pulsar_lookup_gateway.http_api.server"):
            async with serving(service, "zone", head_timeout=HEAD_TIMEOUT) as server:
                streams = [await asyncio.open_connection(HOST, server.port) for _ in range(count)]
                started = time.monotonic()
                seconds = [await closed_after(reader, started) for reader, _ in streams]
                for _, writer in streams:
                    writer.close()
                timed_out = server.timed_out_connections
    lines = [r for r in caplog.records if "no complete request head" in r.getMessage()]
    closed_within = max(seconds)
    print(f"{count} silent connections: closed within {closed_within:.2f}s; {len(lines)} log lines")
    assert timed_out == count
    assert 1 <= len(lines) <= 2


# -- item 6: the connection cap (maxHttpServerConnections) -------------------------------------


async def test_connections_beyond_the_cap_are_closed_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cap, extra = 4, 40
    request = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    async with file_service(tmp_path, gateway_cluster()) as service:
        with caplog.at_level(logging.WARNING, logger="pulsar_lookup_gateway.http_api.server"):
            async with serving(service, "zone", max_connections=cap) as server:
                admitted = []
                for _ in range(cap):  # each answers a request and stays open (keep-alive)
                    reader, writer = await asyncio.open_connection(HOST, server.port)
                    writer.write(request)
                    await asyncio.wait_for(reader.readuntil(b'"alive"}'), WAIT)
                    admitted.append((reader, writer))
                started = time.monotonic()
                closed = 0
                for _ in range(extra):
                    reader, writer = await asyncio.open_connection(HOST, server.port)
                    with contextlib.suppress(ConnectionError):
                        writer.write(request)
                    await closed_after(reader, started)
                    closed += 1
                    writer.close()
                seconds = time.monotonic() - started
                refused, open_count = server.refused_connections, server.connection_count
                # one admitted connection leaves: a newcomer is served again
                admitted.pop()[1].close()
                for _ in range(500):
                    if server.connection_count < cap:
                        break
                    await asyncio.sleep(0.01)
                status, _, _ = await get(server, "/health")
                for _, writer in admitted:
                    writer.close()
    lines = [r for r in caplog.records if "maxHttpServerConnections" in r.getMessage()]
    print(
        f"cap {cap}: {refused} of {extra} extra connections closed at accept in {seconds:.2f}s; "
        f"{len(lines)} log line(s)"
    )
    assert (closed, refused, open_count) == (extra, extra, cap)
    assert len(lines) == 1
    assert status == 200
