"""The HTTP lookup route with its answer memo answers byte for byte what it answers without it.

Random lookups (owned, unowned, unloading, partitioned, missing and invalid topics; raw paths
with escapes; `?listenerName=` and `X-Pulsar-ListenerName` with good, unknown, blank and
malformed names; bearer tokens valid, unauthorized and broken; forwarded client addresses) are
sent over real sockets to sockets with the memo and to sockets without it, plain and TLS, open
and requiring authentication, of two lookup services reading one real ZooKeeper. Between
batches, ZooKeeper writes move, unload and take bundles and move a broker's address (each
awaited in the view). Every answer is compared as bytes (status line, headers in order, body;
the Date header aside), and at the end both services' lookup metrics hold the same counts.
Answers are kept across the writes that cannot change them (another bundle's owner), and those
of persistent topics go when the namespace's topic nodes change (auto-creation off: a topic
that does not exist is 404)."""

from __future__ import annotations

import asyncio
import logging
import random
import re
import ssl
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import jwt
import pytest
from kazoo.client import KazooClient

from pulsar_lookup_gateway.http_api.app import ANSWER_MEMO, build_app
from pulsar_lookup_gateway.http_api.server import HttpServer
from pulsar_lookup_gateway.http_api.settings import HttpSettings
from pulsar_lookup_gateway.listeners.auth import Authenticator, TokenAuthenticationProvider
from pulsar_lookup_gateway.listeners.endpoints.addresses import Endpoint, Scheme
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.lookup.authorization import LookupAuthorizer
from pulsar_lookup_gateway.lookup.errors import NodeNotLoaded
from pulsar_lookup_gateway.lookup.networks import NetworkTable, parse_cidr
from pulsar_lookup_gateway.lookup.selection import ClientRoutes
from pulsar_lookup_gateway.metadata_store.admin import encode, seed
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper
from pulsar_lookup_gateway.metadata_store.synthetic import (
    broker_node,
    cluster,
    ownership_node,
    topic_in_range,
)
from pulsar_lookup_gateway.metadata_store.url import parse_metadata_url
from pulsar_lookup_gateway.metadata_store.zookeeper import ZooKeeperSource
from pulsar_lookup_gateway.serving.memo import SocketTables
from pulsar_lookup_gateway.serving.service import LookupService
from tests.tls_pair import server_and_client

HOST = "127.0.0.1"
WAIT = 10.0
NS = "public/default"
LOW, MID, HIGH, TOP = (
    "0x00000000_0x40000000",
    "0x40000000_0x80000000",
    "0x80000000_0xc0000000",
    "0xc0000000_0xffffffff",
)
SECRET = bytes(range(32))
ROOT, STRANGER = "root", "stranger"
LOCALS = [
    topic_in_range(0x00000000, 0x40000000).rsplit("/", 1)[1],
    topic_in_range(0x40000000, 0x80000000).rsplit("/", 1)[1],
    topic_in_range(0x80000000, 0xC0000000).rsplit("/", 1)[1],
    topic_in_range(0xC0000000, 0xFFFFFFFF).rsplit("/", 1)[1],
    "orders",
    "orders-partition-1",
    "..",
    "a%2Fb",
    "%C3%BCn%C3%AFcode",
    "t%20space",
    "t" * 1100,  # past the memo's longest target: the full path every time
]
DOMAINS = ["persistent", "persistent", "persistent", "non-persistent", "bogus"]
NAMESPACES = [NS, NS, NS, NS, "public/missing", "ghost/ns"]
QUERIES = [
    "", "", "", "?listenerName=external", "?listenerName=internal", "?listenerName=nope",
    "?listenerName=bad%20name!", "?listenerName=", "?authoritative=true",
    "?listenerName=internal&listenerName=external", "?listenerName=external&x=1",
]  # fmt: skip
LISTENER_HEADERS = [None, None, None, "external", "internal", "nope", "bad name!", ""]
FORWARDED = [None, "10.1.0.5", "10.2.0.5", "192.168.0.1"]
DATE = re.compile(rb"\r\nDate: [^\r]*")


def token(role: str) -> str:
    return jwt.encode({"sub": role}, SECRET, algorithm="HS256")


AUTHORIZATION = [None, f"Bearer {token(ROOT)}", f"Bearer {token(STRANGER)}", "Bearer x"]


def nodes() -> dict[str, Any]:
    result = cluster(3, {LOW: 1, MID: 2})
    result[f"/namespace/{NS}/{HIGH}"] = ownership_node(3, disabled=True)  # being unloaded
    result[f"/admin/partitioned-topics/{NS}/persistent/orders"] = {"partitions": 4}
    return result  # TOP: nobody's (a redirect)


def moved_broker() -> dict[str, Any]:
    node = broker_node(2, usage=0.2)
    node["advertisedListeners"]["internal"]["brokerHttpUrl"] = "http://10.9.9.2:8080"
    return node


def no_auto_creation() -> dict[str, Any]:
    policies = dict(nodes()[f"/admin/policies/{NS}"])
    policies["autoTopicCreationOverride"] = {"allowAutoTopicCreation": False}
    return policies


LEDGER = f"/managed-ledgers/{NS}/persistent/{LOCALS[0]}"
#: (what, path, new content or None to delete) written between batches.
CHANGES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("move the low bundle to b3", f"/namespace/{NS}/{LOW}", ownership_node(3)),
    ("b2 takes the unloading bundle", f"/namespace/{NS}/{HIGH}", ownership_node(2)),
    ("auto-creation off", f"/admin/policies/{NS}", no_auto_creation()),
    ("the low bundle's topic is created", LEDGER, {}),
    (
        "a partitioned topic is created",
        f"/admin/partitioned-topics/{NS}/persistent/p",
        {"partitions": 2},
    ),
    ("the low bundle's topic is deleted", LEDGER, None),
    ("the middle bundle's owner goes", f"/namespace/{NS}/{MID}", None),
    ("b2 moves its internal web address", "/loadbalance/brokers/b2:8080", moved_broker()),
]
#: Writes that leave most kept answers in place (another bundle's owner).
KEEPING = ("move the low bundle to b3", "b2 takes the unloading bundle")


def write(zk: KazooClient, path: str, content: dict[str, Any] | None) -> None:
    if content is None:
        zk.delete(path)
    elif zk.exists(path):
        zk.set(path, encode(content))
    else:
        zk.create(path, encode(content), makepath=True)


async def shown(source: ZooKeeperSource, path: str, content: dict[str, Any] | None) -> None:
    """Wait until the view reads `content` at `path` (None: absent)."""
    # (a topic's node counts where its parent's children list names it, or not: lookups read
    # whether a topic exists from the list)
    listed = path.startswith(("/managed-ledgers/", "/admin/partitioned-topics/"))
    for _ in range(int(WAIT / 0.01)):
        try:
            now = source.view.raw(path)
            if listed and source.view.listed(path) != (content is not None):
                now = "not listed yet"
        except NodeNotLoaded as missing:  # (a node no lookup read yet)
            await source.fetch(missing.path)
            continue
        except Exception:
            now = "not loaded"
        if now == content:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the view never showed the write to {path}")


@dataclass(frozen=True)
class Request:
    method: str
    target: str
    headers: tuple[tuple[str, str], ...]

    def encode(self) -> bytes:
        lines = [f"{self.method} {self.target} HTTP/1.1", f"Host: {HOST}"]
        lines += [f"{name}: {value}" for name, value in self.headers]
        return ("\r\n".join(lines) + "\r\n\r\n").encode()


def random_request(rng: random.Random) -> Request:
    domain, namespace = rng.choice(DOMAINS), rng.choice(NAMESPACES)
    target = f"/lookup/v2/topic/{domain}/{namespace}/{rng.choice(LOCALS)}{rng.choice(QUERIES)}"
    header = rng.choice(LISTENER_HEADERS)
    return Request(
        "HEAD" if rng.random() < 0.05 else "GET",
        target,
        () if header is None else (("X-Pulsar-ListenerName", header),),
    )


def pinned() -> list[Request]:
    """One lookup asked by every kind of client, the one with credentials first (what the
    memo's key leaves out: an answer kept for it must not reach the others): naming no
    listener, the open one and the one that requires a token, from every network."""
    owned = f"/lookup/v2/topic/persistent/{NS}/{LOCALS[0]}"
    requests = []
    for target, header in [
        (owned, None),
        (f"{owned}?listenerName=internal", None),
        (owned, "internal"),
        (f"{owned}?listenerName=external", None),
        (owned, "external"),
    ]:
        for authorization in AUTHORIZATION[1:] + AUTHORIZATION[:1]:
            for forwarded in ("10.2.0.5", None, "10.1.0.5"):
                headers = [("X-Pulsar-ListenerName", header)] if header is not None else []
                if authorization is not None:
                    headers.append(("Authorization", authorization))
                if forwarded is not None:
                    headers.append(("X-Forwarded-For", forwarded))
                requests.append(Request("GET", target, tuple(headers)))
    return requests


def who(rng: random.Random, request: Request) -> Request:
    """`request` from a client of its own: another token, another forwarded address (what
    the memo's key leaves out, and must therefore never have mattered to a kept answer)."""
    headers = [(name, value) for name, value in request.headers if name == "X-Pulsar-ListenerName"]
    for name, values in (("Authorization", AUTHORIZATION), ("X-Forwarded-For", FORWARDED)):
        value = rng.choice(values)
        if value is not None:
            headers.append((name, value))
    return Request(request.method, request.target, tuple(headers))


class Connection:
    """One keep-alive connection; answers read raw (a body only by Content-Length: aiohttp
    sends no chunked lookup answer), reopened if the server closed it."""

    def __init__(self, port: int, context: ssl.SSLContext | None) -> None:
        self.port, self.context = port, context
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def ask(self, request: Request) -> bytes:
        if self.streams is None:
            self.streams = await asyncio.open_connection(HOST, self.port, ssl=self.context)
        reader, writer = self.streams
        writer.write(request.encode())
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT)
        length = re.search(rb"\r\nContent-Length: (\d+)", head)
        size = int(length.group(1)) if length and request.method != "HEAD" else 0
        body = await asyncio.wait_for(reader.readexactly(size), WAIT)
        if re.search(rb"\r\nConnection: close", head, re.I):
            await self.close()
        return DATE.sub(b"", head) + body

    async def close(self) -> None:
        if self.streams is not None:
            self.streams[1].close()
            self.streams = None


@dataclass
class Side:
    """The sockets of one lookup service: with the memo, or without."""

    service: LookupService
    connections: dict[str, Connection]
    memos: list[SocketTables]


#: (socket name, its listener, TLS); the listener that requires tokens has no memo on its
#: own sockets, and the legacy socket answers for the internal listener.
SOCKETS = [
    ("internal", "internal", False),
    ("legacy", None, False),
    ("external", "external", False),
    ("internal-tls", "internal", True),
]


@asynccontextmanager
async def side(
    stack: AsyncExitStack,
    source: ZooKeeperSource,
    memoise: bool,
    located: bool,
    tls: tuple[ssl.SSLContext, ssl.SSLContext],
    secured: str = "external",
) -> AsyncIterator[Side]:
    """`secured`: the listener that requires a token (the other requires nothing)."""
    routes = ClientRoutes.build({}, {"internal": ["10.1.0.0/16"], "external": ["10.2.0.0/16"]})
    service = LookupService(
        source,
        internal_listener="internal",
        authorizer=LookupAuthorizer(frozenset({ROOT})),
        routes=routes if located else ClientRoutes(),
    )
    auth = Authenticator(
        (TokenAuthenticationProvider(SECRET, "HS256"),),
        enabled=False,
        required={secured: True},
        allowed_names={"internal": ["internal", "external"]},
    )
    trusted = NetworkTable.build([(parse_cidr("127.0.0.0/8"), True)])
    connections: dict[str, Connection] = {}
    memos: list[SocketTables] = []
    for name, listener, secure in SOCKETS:
        spec = SocketSpec(
            Endpoint(Scheme.HTTPS if secure else Scheme.HTTP, HOST, 0), listener, name
        )
        settings = HttpSettings(
            listener, authenticator=auth, trusted_proxies=trusted, memoise_lookups=memoise
        )
        app = build_app(service, settings)
        assert (ANSWER_MEMO in app) == (memoise and listener != secured)
        if ANSWER_MEMO in app:
            memos.append(app[ANSWER_MEMO])
        server = HttpServer(spec, app, tls[0] if secure else None)
        await server.start()
        stack.push_async_callback(server.stop, 5)
        connection = Connection(server.port, tls[1] if secure else None)
        stack.push_async_callback(connection.close)
        connections[name] = connection
    yield Side(service, connections, memos)


def counts(service: LookupService) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every lookup counter and histogram count of the service (not the timings)."""
    found = {}
    for family in service.metrics.registry.collect():
        if not family.name.startswith("pulsar_broker_lookup"):
            continue
        for sample in family.samples:
            if sample.name.endswith(("_sum", "_bucket", "_created")) or "pending" in sample.name:
                continue
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


@pytest.fixture(scope="module")
def tls() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    return server_and_client(HOST)


@pytest.mark.slow
@pytest.mark.parametrize("secured", ["external", "internal"])
@pytest.mark.parametrize("located", [False, True], ids=["socket-route", "client-networks"])
async def test_memoised_http_answers_equal_full_answers_across_view_changes(
    zookeeper: EmbeddedZooKeeper,
    zk_chroot: str,
    zk_admin: KazooClient,
    tls: tuple[ssl.SSLContext, ssl.SSLContext],
    located: bool,
    secured: str,
) -> None:
    seed(zk_admin, nodes())
    source = ZooKeeperSource(parse_metadata_url(f"zk:{zookeeper.connect_string}{zk_chroot}"))
    await source.start()
    rng = random.Random(28 + located)
    try:
        async with AsyncExitStack() as stack:
            memoised = await stack.enter_async_context(
                side(stack, source, True, located, tls, secured)
            )
            plain = await stack.enter_async_context(
                side(stack, source, False, located, tls, secured)
            )
            batches = [("start", "", None), *CHANGES]
            for label, path, content in batches:
                if path:
                    held = {(id(m), k): e for m in memoised.memos for k, e in m.entries()}
                    write(zk_admin, path, content)
                    await shown(source, path, content)
                    now = {(id(m), k): e for m in memoised.memos for k, e in m.entries()}
                    kept = sum(now.get(key) is entry for key, entry in held.items())
                    if label in KEEPING:  # (a kept answer made again would be another object)
                        assert kept > 0, f"{label} dropped the other bundles' answers"
                for name in memoised.connections:
                    for request in pinned() * 2:
                        with_memo = await memoised.connections[name].ask(request)
                        without = await plain.connections[name].ask(request)
                        assert with_memo == without, (label, name, request)
                batch = [who(rng, random_request(rng)) for _ in range(100)]
                # then warm: the same requests, and each from other clients
                for request in [*batch, *batch, *(who(rng, r) for r in batch * 2)]:
                    name = rng.choice(list(memoised.connections))
                    with_memo = await memoised.connections[name].ask(request)
                    without = await plain.connections[name].ask(request)
                    assert with_memo == without, (label, name, request)
                assert sum(len(memo) for memo in memoised.memos) > 0, label
            assert counts(memoised.service) == counts(plain.service)
    finally:
        await source.close()


async def test_memo_steps_aside_for_debug_logging_and_full_admission(
    zookeeper: EmbeddedZooKeeper,
    zk_chroot: str,
    zk_admin: KazooClient,
    tls: tuple[ssl.SSLContext, ssl.SSLContext],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """While the service logs every answer, each lookup reaches it (one line each); while
    admission has no room, a memoised lookup is refused as the full path refuses it."""
    seed(zk_admin, nodes())
    source = ZooKeeperSource(parse_metadata_url(f"zk:{zookeeper.connect_string}{zk_chroot}"))
    await source.start()
    owned = f"/lookup/v2/topic/persistent/{NS}/{LOCALS[0]}"
    try:
        async with AsyncExitStack() as stack:
            memoised = await stack.enter_async_context(side(stack, source, True, False, tls))
            connection = memoised.connections["internal"]

            async def ask() -> bytes:
                return await connection.ask(Request("GET", owned, ()))

            # (the first lookup reads its nodes from ZooKeeper: the view it started from
            # changes under it, so its answer is not kept; the next one's is)
            for _ in range(3):
                assert (await ask()).startswith(b"HTTP/1.1 200 ")
            assert sum(len(memo) for memo in memoised.memos) == 1
            with caplog.at_level(logging.DEBUG, logger="pulsar_lookup_gateway.serving.service"):
                for _ in range(5):
                    assert (await ask()).startswith(b"HTTP/1.1 200 ")
            answered = [r for r in caplog.records if owned.rsplit("/", 1)[1] in r.getMessage()]
            assert len(answered) == 5
            memoised.service.admission.max_concurrent = 0
            refused = await ask()
            assert refused.startswith(b"HTTP/1.1 503 ") and b"maxConcurrentLookupRequest" in refused
            memoised.service.admission.max_concurrent = 10
            assert (await ask()).startswith(b"HTTP/1.1 200 ")
    finally:
        await source.close()


async def test_one_app_on_a_plain_and_a_tls_socket_keeps_their_answers_apart(
    zookeeper: EmbeddedZooKeeper,
    zk_chroot: str,
    zk_admin: KazooClient,
    tls: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    """A redirect depends on the request's scheme (the internal listener has no https URL:
    412 over TLS): an application serving both kinds of socket keeps both answers apart."""
    seed(zk_admin, nodes())
    source = ZooKeeperSource(parse_metadata_url(f"zk:{zookeeper.connect_string}{zk_chroot}"))
    await source.start()
    unowned = Request("GET", f"/lookup/v2/topic/persistent/{NS}/{LOCALS[3]}", ())
    try:
        async with AsyncExitStack() as stack:
            service = LookupService(source, internal_listener="internal")
            app = build_app(service, HttpSettings("internal"))
            connections = []
            for secure in (False, True):
                scheme = Scheme.HTTPS if secure else Scheme.HTTP
                spec = SocketSpec(Endpoint(scheme, HOST, 0), "internal", "shared app")
                server = HttpServer(spec, app, tls[0] if secure else None)
                await server.start()
                stack.push_async_callback(server.stop, 5)
                connection = Connection(server.port, tls[1] if secure else None)
                stack.push_async_callback(connection.close)
                connections.append(connection)
            plain, secure_ = connections
            for _ in range(3):
                assert (await plain.ask(unowned)).startswith(b"HTTP/1.1 307 ")
                assert (await secure_.ask(unowned)).startswith(b"HTTP/1.1 412 ")
            assert len(app[ANSWER_MEMO]) == 1
    finally:
        await source.close()
