"""Authentication and authorization on real sockets (127.0.0.1): the binary and HTTP servers
answering from a snapshot file, the external listener requiring tokens (or a client certificate
on its TLS sockets), the internal one requiring nothing; and a permission change in a real
ZooKeeper reaching the gateway through its watches."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import pytest
import trustme
from kazoo.client import KazooClient
from yarl import URL

from pulsar_lookup_gateway.http_api.app import build_app
from pulsar_lookup_gateway.http_api.server import HttpServer
from pulsar_lookup_gateway.http_api.settings import HttpSettings
from pulsar_lookup_gateway.listeners.auth import (
    Authenticator,
    TlsAuthenticationProvider,
    TokenAuthenticationProvider,
)
from pulsar_lookup_gateway.listeners.binary import BinaryServer, BinarySettings
from pulsar_lookup_gateway.listeners.endpoints.addresses import Endpoint, Scheme
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import BaseCommand, LookupType, ServerError
from pulsar_lookup_gateway.lookup.authorization import LookupAuthorizer
from pulsar_lookup_gateway.lookup.source import MetadataSource
from pulsar_lookup_gateway.metadata_store.admin import encode, seed
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper
from pulsar_lookup_gateway.metadata_store.file import FileSource
from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
from pulsar_lookup_gateway.metadata_store.synthetic import cluster, topic_in_range
from pulsar_lookup_gateway.metadata_store.url import parse_metadata_url
from pulsar_lookup_gateway.metadata_store.zookeeper import ZooKeeperSource
from pulsar_lookup_gateway.serving.service import LookupService
from tests.broker_peer import RawClient
from tests.waiting import eventually

HOST = "127.0.0.1"
WAIT = 10.0
SECRET = bytes(range(32))
OTHER_SECRET = bytes(range(1, 33))
LOW = "0x00000000_0x40000000"
TOPIC = topic_in_range(0x00000000, 0x40000000)  # owned by b1
LOCAL = TOPIC.rsplit("/", 1)[1]
PARTITIONED = "persistent://public/default/orders"
GHOST = "persistent://ghost/ns/t"
EXTERNAL_URL = "pulsar://b1.example.com:6650"
INTERNAL_URL = "pulsar://10.0.0.1:6650"
POLICIES = "/admin/policies/public/default"
TENANT = "/admin/policies/public"
LOOKUP = f"/lookup/v2/topic/persistent/public/default/{LOCAL}"
SETTINGS = BinarySettings(keep_alive_interval=0, handshake_timeout=WAIT)

# Roles, and what the snapshot grants them.
PRODUCER, READER, STRANGER, ROOT, ADMIN = "producer", "reader", "stranger", "root", "public-admin"
ALLOWED = {PRODUCER: True, READER: True, STRANGER: False, ROOT: True, ADMIN: True}


def auth_policies(namespace: dict[str, list[str]], topics: dict[str, Any]) -> dict[str, Any]:
    return {"namespace_auth": namespace, "destination_auth": topics, "subscription_auth_roles": {}}


def nodes(grants: dict[str, list[str]] | None = None) -> dict[str, Any]:
    snapshot = cluster(brokers=3, owned={LOW: 1})
    snapshot[POLICIES]["auth_policies"] = auth_policies(
        {PRODUCER: ["produce"]} if grants is None else grants,
        {TOPIC: {READER: ["consume"]}, PARTITIONED: {READER: ["consume"]}},
    )
    snapshot[TENANT] = {"adminRoles": [ADMIN], "allowedClusters": ["test"]}
    snapshot["/admin/partitioned-topics/public/default/persistent/orders"] = {"partitions": 4}
    return snapshot


def token(role: str, secret: bytes = SECRET, **claims: Any) -> str:
    return jwt.encode({"sub": role, **claims}, secret, algorithm="HS256")


class Clock:
    """The authenticator's clock, moved by hand (token expiry on open connections)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def authenticator(clock: Callable[[], float] = time.time) -> Authenticator:
    """Token and TLS providers; the external listener requires authentication and may ask
    only for itself; the internal one requires nothing."""
    return Authenticator(
        (TokenAuthenticationProvider(SECRET, "HS256"), TlsAuthenticationProvider()),
        enabled=False,
        required={"external": True},
        allowed_names={"external": ["external"]},
        clock=clock,
    )


def lookup_service(source: MetadataSource) -> LookupService:
    return LookupService(
        source, internal_listener="internal", authorizer=LookupAuthorizer(frozenset({ROOT}))
    )


@dataclass
class Tls:
    ca: trustme.CA
    server: ssl.SSLContext  # verifies client certificates when presented

    def client(self, role: str | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context()
        self.ca.configure_trust(context)
        if role is not None:
            self.ca.issue_cert(f"{role}.clients.example", common_name=role).configure_cert(context)
        return context


@pytest.fixture(scope="module")
def tls() -> Tls:
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(HOST).configure_cert(server)
    ca.configure_trust(server)
    server.verify_mode = ssl.CERT_OPTIONAL  # tlsTrustCertsFilePath without ...OnConnect
    return Tls(ca, server)


@dataclass
class World:
    service: LookupService
    binary: dict[str, BinaryServer]  # "external", "internal", "external-tls"
    http: dict[str, HttpServer]  # "external", "internal", "external-tls"
    session: aiohttp.ClientSession
    clock: Clock

    def failures(self, error: str) -> float:
        value = self.service.metrics.registry.get_sample_value(
            "pulsar_broker_lookup_failures_total",
            {"listener": "external", "chosen_by": "socket", "protocol": "binary", "error": error},
        )
        return value or 0.0


@contextlib.asynccontextmanager
async def running(
    service: LookupService, auth: Authenticator, tls: Tls | None = None
) -> AsyncIterator[tuple[dict[str, BinaryServer], dict[str, HttpServer]]]:
    sockets: list[tuple[str, str, ssl.SSLContext | None]] = [
        ("external", "external", None),
        ("internal", "internal", None),
    ]
    if tls is not None:
        sockets.append(("external-tls", "external", tls.server))
    binary: dict[str, BinaryServer] = {}
    http: dict[str, HttpServer] = {}
    async with contextlib.AsyncExitStack() as stack:
        for name, listener, context in sockets:
            scheme = Scheme.PULSAR_SSL if context else Scheme.PULSAR
            spec = SocketSpec(Endpoint(scheme, HOST, 0), listener, f"test {name}")
            server = BinaryServer(spec, service, SETTINGS, context, authenticator=auth)
            await server.start()
            stack.push_async_callback(server.stop, 5)
            binary[name] = server
            scheme = Scheme.HTTPS if context else Scheme.HTTP
            spec = SocketSpec(Endpoint(scheme, HOST, 0), listener, f"test {name}")
            settings = HttpSettings(listener, authenticator=auth, super_users=frozenset({ROOT}))
            app = build_app(service, settings)
            web = HttpServer(spec, app, context)
            await web.start()
            stack.push_async_callback(web.stop, 5)
            http[name] = web
        yield binary, http


@pytest.fixture
async def world(tmp_path: Path, tls: Tls) -> AsyncIterator[World]:
    path = tmp_path / "cluster.json"
    write_snapshot(path, nodes())
    source = FileSource(path, poll_interval=60)
    await source.start()
    clock = Clock()
    service = lookup_service(source)
    try:
        async with (
            running(service, authenticator(clock), tls) as (binary, http),
            aiohttp.ClientSession() as session,
        ):
            yield World(service, binary, http, session, clock)
    finally:
        await source.close()


# --- binary ------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def raw_client(
    server: BinaryServer, context: ssl.SSLContext | None = None
) -> AsyncIterator[RawClient]:
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(
            HOST, server.port, ssl=context, server_hostname=HOST if context else None
        ),
        WAIT,
    )
    raw = RawClient(reader, writer)
    try:
        yield raw
    finally:
        await raw.close()


async def connect(
    raw: RawClient, method: str | None = None, data: str | bytes | None = None
) -> BaseCommand:
    """Send CONNECT with these credentials; the first command back."""
    payload = data.encode() if isinstance(data, str) else data
    raw.send(codec.connect("auth-test", 21, auth_method_name=method, auth_data=payload))
    return await raw.expect(WAIT)


async def lookup(raw: RawClient, topic: str = TOPIC, request_id: int = 1, **kw: Any) -> Any:
    return (await raw.lookup(topic, request_id, timeout=WAIT, **kw)).lookupTopicResponse


async def partitions(raw: RawClient, topic: str, request_id: int) -> Any:
    raw.send(codec.partitioned_metadata(topic, request_id))
    command = await raw.expect(WAIT)
    assert command.type == BaseCommand.PARTITIONED_METADATA_RESPONSE
    return command.partitionMetadataResponse


@pytest.mark.parametrize(
    ("method", "data", "reason"),
    [
        (None, None, "no credentials were presented (accepted: token or tls)"),
        ("token", None, "no token was presented"),
        ("token", token(PRODUCER, OTHER_SECRET), "signature does not verify"),
        ("token", token(PRODUCER, exp=int(time.time()) - 10), "expired"),
        ("token", "eyJhbGciOiJub25lIn0.eyJzdWIiOiJyb290In0.", "only algorithm accepted"),
        ("token", "not-a-jwt", "not a well-formed JWT"),
        ("tls", None, "no client certificate verified"),
        ("basic", "user:password", "'basic' is not enabled"),
        (None, token(PRODUCER, OTHER_SECRET), "signature does not verify"),
    ],
    # Ids from the method and reason: a token in an id holds the clock, and pytest-xdist's
    # workers must collect the same ids.
    ids=lambda value: "jwt" if isinstance(value, str) and len(value) > 60 else str(value),
)
async def test_binary_external_listener_refuses_connect_without_valid_credentials(
    world: World, method: str | None, data: str | None, reason: str
) -> None:
    async with raw_client(world.binary["external"]) as raw:
        answer = await connect(raw, method, data)
        assert answer.type == BaseCommand.ERROR, answer
        assert answer.error.error == ServerError.AuthenticationError
        assert answer.error.request_id == 2**64 - 1  # Pulsar's -1
        assert answer.error.message.startswith("Unable to authenticate: ")
        assert reason in answer.error.message
        assert data is None or data not in answer.error.message
        assert await raw.closed(WAIT)


async def test_binary_internal_listener_needs_no_credentials(world: World) -> None:
    async with raw_client(world.binary["internal"]) as raw:
        await raw.handshake()
        answer = await lookup(raw)  # no role: not authorized, not refused
        assert (answer.response, answer.brokerServiceUrl) == (LookupType.Connect, INTERNAL_URL)
    async with raw_client(world.binary["internal"]) as raw:
        # credentials are not looked at where none are required
        assert (await connect(raw, "token", "garbage")).type == BaseCommand.CONNECTED


@pytest.mark.parametrize("role", list(ALLOWED))
async def test_binary_lookups_are_authorized_per_role(world: World, role: str) -> None:
    async with raw_client(world.binary["external"]) as raw:
        assert (await connect(raw, "token", token(role))).type == BaseCommand.CONNECTED
        answer = await lookup(raw)
        meta = await partitions(raw, PARTITIONED, 2)
        if ALLOWED[role]:
            assert (answer.response, answer.brokerServiceUrl) == (LookupType.Connect, EXTERNAL_URL)
            assert meta.partitions == 4 and not meta.HasField("error")
        else:
            assert (answer.response, answer.error) == (
                LookupType.Failed,
                ServerError.AuthorizationError,
            )
            assert f"role '{role}' is not authorized to look up {TOPIC}" in answer.message
            assert meta.error == ServerError.AuthorizationError
            # the connection stays usable: the same question fails the same way
            again = await lookup(raw, request_id=3)
            assert again.error == ServerError.AuthorizationError
    assert world.failures("AuthorizationError") == (0 if ALLOWED[role] else 2)


async def test_binary_unauthorized_role_cannot_probe_namespaces(world: World) -> None:
    async with raw_client(world.binary["external"]) as raw:
        await connect(raw, "token", token(STRANGER))
        assert (await lookup(raw, GHOST)).error == ServerError.AuthorizationError
    async with raw_client(world.binary["external"]) as raw:
        await connect(raw, "token", token(ROOT))
        assert (await lookup(raw, GHOST)).error == ServerError.TopicNotFound  # as master


async def test_binary_allowed_listener_names(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pulsar_lookup_gateway.serving.service")
    async with raw_client(world.binary["external"]) as raw:
        await connect(raw, "token", token(ROOT))
        refused = await lookup(raw, listener="internal")
        assert (refused.response, refused.error) == (LookupType.Failed, ServerError.NotAllowedError)
        assert "listener 'internal' may not be asked for" in refused.message
        logged = [
            r.getMessage() for r in caplog.records if "lookup NotAllowedError" in r.getMessage()
        ]
        assert len(logged) == 1 and "protocol=binary" in logged[0], logged
        assert "listener=internal chosen_by=explicit" in logged[0]
        assert "external" not in refused.message  # the allowed names are not told to clients
        own = await lookup(raw, request_id=2, listener="external")
        assert own.brokerServiceUrl == EXTERNAL_URL
        blank = await lookup(raw, request_id=3, listener="")  # blank means absent
        assert blank.brokerServiceUrl == EXTERNAL_URL
    # the external listener requires authentication on every route to it: a connection of
    # the internal socket, which proved no role, may not name it
    async with raw_client(world.binary["internal"]) as raw:
        await raw.handshake()
        named = await lookup(raw, listener="external")
        assert (named.response, named.error) == (
            LookupType.Failed,
            ServerError.AuthenticationError,
        )
        assert not named.brokerServiceUrl


async def test_binary_connection_with_expired_token_is_closed(world: World) -> None:
    exp = int(world.clock.now) + 600
    async with raw_client(world.binary["external"]) as raw:
        await connect(raw, "token", token(PRODUCER, exp=exp))
        assert (await lookup(raw)).response == LookupType.Connect
        world.clock.now = exp + 1
        raw.send(codec.lookup(TOPIC, 2))
        assert await raw.closed(WAIT)  # no answer: the client reconnects with a fresh token


@pytest.mark.parametrize(
    ("role", "method", "data", "expected"),
    [
        (PRODUCER, None, None, "connect"),
        (PRODUCER, "tls", None, "connect"),
        (STRANGER, None, None, "not-authorized"),
        (ADMIN, "tls", None, "connect"),
        (None, None, None, "not-authenticated"),
        (None, "token", token(READER), "connect"),  # a token on a TLS socket works too
        (STRANGER, "token", token(PRODUCER), "connect"),  # the named method is used
    ],
)
async def test_binary_mtls_role_is_the_certificate_cn(
    world: World,
    tls: Tls,
    role: str | None,
    method: str | None,
    data: str | None,
    expected: str,
) -> None:
    async with raw_client(world.binary["external-tls"], tls.client(role)) as raw:
        answer = await connect(raw, method, data)
        if expected == "not-authenticated":
            assert answer.error.error == ServerError.AuthenticationError
            return
        assert answer.type == BaseCommand.CONNECTED
        result = await lookup(raw)
        if expected == "connect":
            assert result.brokerServiceUrl == EXTERNAL_URL
        else:
            assert result.error == ServerError.AuthorizationError
            assert f"'{role}'" in result.message


# --- HTTP ------------------------------------------------------------------------------------


@dataclass
class Reply:
    status: int
    headers: Any
    body: Any


async def get(
    world: World,
    socket: str,
    path: str,
    *,
    bearer: str | None = None,
    headers: dict[str, str] | None = None,
    context: ssl.SSLContext | None = None,
) -> Reply:
    sent = dict(headers or {})
    if bearer is not None:
        sent["Authorization"] = f"Bearer {bearer}"
    url = URL(world.http[socket].url + path, encoded=True)
    async with world.session.get(
        url, headers=sent, allow_redirects=False, ssl=context or True
    ) as response:
        text = await response.text()
        body = json.loads(text) if response.content_type == "application/json" else text
        return Reply(response.status, response.headers, body)


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({}, "no credentials were presented"),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, "no credentials were presented"),
        ({"Authorization": f"Bearer {token(PRODUCER, OTHER_SECRET)}"}, "does not verify"),
        ({"Authorization": f"Bearer {token(PRODUCER, nbf=int(time.time()) + 600)}"},
         "not valid yet"),
        ({"Authorization": "Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJyb290In0."},
         "only algorithm accepted"),
        ({"Authorization": f"Bearer {token(PRODUCER)}", "X-Pulsar-Auth-Method-Name": "tls"},
         "no client certificate verified"),
    ],
)  # fmt: skip
async def test_http_external_listener_answers_401(
    world: World, headers: dict[str, str], reason: str
) -> None:
    for path in (LOOKUP, f"{LOOKUP}/bundle", "/admin/v2/persistent/public/default/t/partitions"):
        reply = await get(world, "external", path, headers=headers)
        assert reply.status == 401, (path, reply)
        assert reply.headers["WWW-Authenticate"] == "Bearer"
        assert reply.body["reason"].startswith("Unable to authenticate: ")
        assert reason in reply.body["reason"]


async def test_http_authentication_comes_first(world: World) -> None:
    # an invalid topic or an unknown namespace tells an anonymous client nothing
    assert (await get(world, "external", "/lookup/v2/topic/durable/a/b/c")).status == 401
    assert (await get(world, "external", "/lookup/v2/topic/persistent/ghost/ns/t")).status == 401
    stranger, root = token(STRANGER), token(ROOT)
    ghost = "/lookup/v2/topic/persistent/ghost/ns/t"
    assert (await get(world, "external", ghost, bearer=stranger)).status == 403
    assert (await get(world, "external", ghost, bearer=root)).status == 404


@pytest.mark.parametrize("role", list(ALLOWED))
async def test_http_lookups_are_authorized_per_role(world: World, role: str) -> None:
    bearer = token(role)
    lookup_reply = await get(world, "external", LOOKUP, bearer=bearer)
    bundle_reply = await get(world, "external", f"{LOOKUP}/bundle", bearer=bearer)
    parts = await get(
        world, "external", "/admin/v2/persistent/public/default/orders/partitions", bearer=bearer
    )
    if ALLOWED[role]:
        assert lookup_reply.status == 200
        assert lookup_reply.body["brokerUrl"] == EXTERNAL_URL
        assert (bundle_reply.status, bundle_reply.body) == (200, LOW)
        assert (parts.status, parts.body) == (200, {"partitions": 4})
    else:
        for reply in (lookup_reply, bundle_reply, parts):
            assert reply.status == 403
            assert f"role '{role}' is not authorized" in reply.body["reason"]
            assert "WWW-Authenticate" not in reply.headers


async def test_http_internal_listener_needs_no_credentials(world: World) -> None:
    reply = await get(world, "internal", LOOKUP)
    assert (reply.status, reply.body["brokerUrl"]) == (200, INTERNAL_URL)
    # a stranger's token is not even looked at there
    reply = await get(world, "internal", LOOKUP, bearer=token(STRANGER, OTHER_SECRET))
    assert reply.status == 200


@pytest.mark.parametrize(
    ("socket", "query", "header", "status"),
    [
        ("external", "internal", None, 400),
        ("external", None, "internal", 400),
        ("external", "external", "internal", 200),  # the query wins, and is allowed
        ("external", "external", None, 200),
        ("internal", "external", None, 200),  # the internal socket is not limited
        ("internal", None, "external", 200),
    ],
)
async def test_http_allowed_listener_names(
    world: World, socket: str, query: str | None, header: str | None, status: int
) -> None:
    path = LOOKUP + (f"?listenerName={query}" if query else "")
    headers = {"X-Pulsar-ListenerName": header} if header else None
    reply = await get(world, socket, path, bearer=token(PRODUCER), headers=headers)
    assert reply.status == status, reply
    if status == 400:
        assert "listener 'internal' may not be asked for" in reply.body["reason"]
    else:
        assert reply.body["brokerUrl"] == EXTERNAL_URL


async def test_http_operations_routes(world: World) -> None:
    for path in ("/health", "/ready", "/status.html"):  # probes stay open
        assert (await get(world, "external", path)).status == 200
    for path in ("/metrics", "/admin/v2/gateway/listeners", "/openapi.json"):
        denied = await get(world, "external", path)
        assert (denied.status, denied.headers["WWW-Authenticate"]) == (401, "Bearer")
        stranger = (await get(world, "external", path, bearer=token(STRANGER))).status
        # The listener table (internal addresses) is for super-users on an authenticated
        # socket; the metrics (authenticateMetricsEndpoint) for any authenticated role, as
        # Pulsar's proxy has it.
        assert stranger == (403 if path == "/admin/v2/gateway/listeners" else 200)
        assert (await get(world, "external", path, bearer=token(ROOT))).status == 200
        assert (await get(world, "internal", path)).status == 200


@pytest.mark.parametrize(
    ("role", "headers", "status"),
    [
        (PRODUCER, {}, 200),
        (ADMIN, {}, 200),
        (STRANGER, {}, 403),
        (None, {}, 401),
        (None, {"Authorization": f"Bearer {token(READER)}"}, 200),
        # the certificate proves 'stranger'; a token may prove another role instead
        (STRANGER, {"Authorization": f"Bearer {token(PRODUCER)}"}, 200),
        (PRODUCER, {"X-Pulsar-Auth-Method-Name": "tls"}, 200),
    ],
)
async def test_https_mtls_role_is_the_certificate_cn(
    world: World, tls: Tls, role: str | None, headers: dict[str, str], status: int
) -> None:
    reply = await get(world, "external-tls", LOOKUP, headers=headers, context=tls.client(role))
    assert reply.status == status, reply
    if status == 200:
        assert reply.body["brokerUrl"] == EXTERNAL_URL


async def test_a_socket_without_a_trust_store_lends_no_certificate_a_role(
    tmp_path: Path, tls: Tls
) -> None:
    """Without tlsTrustCertsFilePath the server does not ask for (nor verify) a client
    certificate: the CN of whatever a client might send is never a role."""
    unverified = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.ca.issue_cert(HOST).configure_cert(unverified)
    path = tmp_path / "cluster.json"
    write_snapshot(path, nodes())
    source = FileSource(path, poll_interval=60)
    await source.start()
    auth = Authenticator((TlsAuthenticationProvider(),), required={"external": True})
    service = lookup_service(source)
    app = build_app(service, HttpSettings("external", authenticator=auth))
    spec = SocketSpec(Endpoint(Scheme.HTTPS, HOST, 0), "external", "t")
    server = HttpServer(spec, app, unverified)
    await server.start()
    try:
        async with aiohttp.ClientSession() as session:
            url = URL(server.url + LOOKUP, encoded=True)
            async with session.get(url, ssl=tls.client(PRODUCER)) as response:
                assert response.status == 401
                assert "no credentials were presented" in (await response.json())["reason"]
    finally:
        await server.stop(5)
        await source.close()


# --- ZooKeeper: permission changes apply through watches --------------------------------------


@pytest.mark.zookeeper
async def test_permission_changes_in_zookeeper_apply_through_watches(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk_admin: KazooClient
) -> None:
    snapshot = nodes(grants={})
    del snapshot[TENANT]  # created below, as a parent without data first
    seed(zk_admin, snapshot)
    source = ZooKeeperSource(
        parse_metadata_url(f"zk:{zookeeper.connect_string}{zk_chroot}"), start_timeout=15.0
    )
    await source.start()
    service = lookup_service(source)

    def set_policies(grants: dict[str, list[str]]) -> None:
        content = dict(snapshot[POLICIES], auth_policies=auth_policies(grants, {}))
        zk_admin.set(POLICIES, encode(content))

    try:
        async with (
            running(service, authenticator()) as (binary, http),
            raw_client(binary["external"]) as raw,
            aiohttp.ClientSession() as session,
        ):
            await connect(raw, "token", token(STRANGER))
            request_ids = iter(range(1, 10_000))

            async def answers(expected: int) -> bool:
                reply = await lookup(raw, request_id=next(request_ids))
                return bool(reply.response == expected)

            async def http_status() -> int:
                headers = {"Authorization": f"Bearer {token(STRANGER)}"}
                url = URL(http["external"].url + LOOKUP, encoded=True)
                async with session.get(url, headers=headers) as response:
                    return response.status

            assert await answers(LookupType.Failed)
            assert await http_status() == 403

            set_policies({STRANGER: ["consume"]})  # grant
            await eventually(lambda: answers(LookupType.Connect), timeout=WAIT)
            assert await http_status() == 200

            set_policies({})  # revoke
            await eventually(lambda: answers(LookupType.Failed), timeout=WAIT)
            assert await http_status() == 403

            # tenant admin: the tenant node gets data
            zk_admin.set(TENANT, encode({"adminRoles": [STRANGER], "allowedClusters": []}))
            await eventually(lambda: answers(LookupType.Connect), timeout=WAIT)
            zk_admin.set(TENANT, encode({"adminRoles": [], "allowedClusters": []}))
            await eventually(lambda: answers(LookupType.Failed), timeout=WAIT)
    finally:
        await source.close()
