"""The real `pulsar-client` with `pulsar.AuthenticationToken` against a gateway whose external
listener requires tokens and whose lookups are authorized.

Over `pulsar://` the client sends the token in CONNECT (auth method `token`); over `http://` in
`Authorization: Bearer`. A valid token with permission gets the external listener's address and
the client reaches the broker test peer there; a bad token, or a valid token whose role has no
permission on the topic, ends in a client error within a bounded time, and no broker is reached.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import pytest
from prometheus_client import CollectorRegistry

from pulsar_lookup_gateway.http_api.app import build_app
from pulsar_lookup_gateway.http_api.server import HttpServer
from pulsar_lookup_gateway.http_api.settings import HttpSettings
from pulsar_lookup_gateway.listeners.auth import Authenticator, TokenAuthenticationProvider
from pulsar_lookup_gateway.listeners.binary import BinaryServer, BinarySettings
from pulsar_lookup_gateway.listeners.endpoints.addresses import Endpoint, Scheme
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.lookup.authorization import LookupAuthorizer
from pulsar_lookup_gateway.metadata_store.file import FileSource
from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
from pulsar_lookup_gateway.metadata_store.synthetic import cluster, topic_in_range
from pulsar_lookup_gateway.serving.service import LookupService
from tests.broker_peer import BrokerPeer
from tests.e2e import clients
from tests.e2e.clients import OPERATION_TIMEOUT, in_thread

pulsar = pytest.importorskip("pulsar")

pytestmark = pytest.mark.e2e

SECRET = bytes(range(32))
OWNED_BUNDLES = ("0x00000000_0x40000000", "0x40000000_0x80000000", "0x80000000_0xc0000000")
TOPIC = topic_in_range(0x00000000, 0xC0000000)  # owned by b1
FAILING_TIMEOUT = 2  # a refused client may retry until this; keeps the suite short


def token(role: str, secret: bytes = SECRET) -> str:
    return jwt.encode({"sub": role}, secret, algorithm="HS256")


def snapshot(external: BrokerPeer, internal: BrokerPeer) -> dict[str, Any]:
    """b1 owns three bundles; 'writer' may produce in public/default, nobody else may."""
    listeners = {
        "internal": {"brokerServiceUrl": internal.url},
        "external": {"brokerServiceUrl": external.url},
    }
    nodes = cluster(brokers=1, owned=dict.fromkeys(OWNED_BUNDLES, 1), leader=1)
    nodes["/loadbalance/brokers/b1:8080"].update(
        pulsarServiceUrl=internal.url, advertisedListeners=listeners
    )
    for bundle in OWNED_BUNDLES:
        nodes[f"/namespace/public/default/{bundle}"].update(
            nativeUrl=internal.url, advertisedListeners=listeners
        )
    nodes["/admin/policies/public/default"]["auth_policies"] = {
        "namespace_auth": {"writer": ["produce"]},
        "destination_auth": {},
        "subscription_auth_roles": {},
    }
    return nodes


@dataclass
class Gateway:
    binary: BinaryServer  # pulsar://, listener 'external', tokens required
    http: HttpServer  # http://, listener 'external', tokens required
    external: BrokerPeer
    internal: BrokerPeer
    service: LookupService
    auth_metrics: CollectorRegistry

    def authentications(self, outcome: str, **labels: str) -> float:
        name = f"pulsar_authentication_{outcome}_total"
        token_provider = {"provider_name": "AuthenticationProviderToken", "auth_method": "token"}
        value = self.auth_metrics.get_sample_value(name, {**token_provider, **labels})
        return value or 0.0

    def reached(self, topic: str) -> bool:
        return topic in self.external.producer_topics()

    def untouched(self) -> bool:
        return not self.external.seen and not self.internal.seen


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with contextlib.AsyncExitStack() as stack:
        external = await stack.enter_async_context(BrokerPeer("127.0.0.2", name="external"))
        internal = await stack.enter_async_context(BrokerPeer("127.0.0.3", name="internal"))
        path = tmp_path / "cluster.json"
        write_snapshot(path, snapshot(external, internal))
        source = FileSource(path, poll_interval=60)
        await source.start()
        stack.push_async_callback(source.close)
        service = LookupService(
            source, internal_listener="internal", authorizer=LookupAuthorizer(frozenset())
        )
        registry = CollectorRegistry()
        auth = Authenticator(
            (TokenAuthenticationProvider(SECRET, "HS256"),),
            required={"external": True},
            allowed_names={"external": []},  # its own name only
            registry=registry,
        )
        binary = BinaryServer(
            SocketSpec(Endpoint(Scheme.PULSAR, "127.0.0.1", 0), "external", "e2e binary"),
            service,
            BinarySettings(keep_alive_interval=0, handshake_timeout=10),
            authenticator=auth,
        )
        await binary.start()
        stack.push_async_callback(binary.stop, 5)
        app = build_app(service, HttpSettings("external", authenticator=auth))
        http = HttpServer(
            SocketSpec(Endpoint(Scheme.HTTP, "127.0.0.1", 0), "external", "e2e http"), app
        )
        await http.start()
        stack.push_async_callback(http.stop, 5)
        yield Gateway(binary, http, external, internal, service, registry)


def produce(
    url: str,
    topic: str,
    auth_token: str | None,
    timeout: int = OPERATION_TIMEOUT,
    **options: Any,
) -> str:
    """A producer with the real client, authenticating with `auth_token` if given."""
    if auth_token is not None:
        options["authentication"] = pulsar.AuthenticationToken(auth_token)
    return clients.produce(url, topic, timeout=timeout, **options)


def url_of(gateway: Gateway, protocol: str) -> str:
    return gateway.binary.url if protocol == "binary" else gateway.http.url


@pytest.mark.parametrize("protocol", ["binary", "http"])
async def test_a_valid_token_with_permission_reaches_the_broker(
    gateway: Gateway, protocol: str
) -> None:
    url = url_of(gateway, protocol)
    assert await in_thread(produce, url, TOPIC, token("writer")) == TOPIC
    assert gateway.reached(TOPIC)
    assert not gateway.internal.seen  # the socket's listener decided, not the role
    assert gateway.authentications("success") >= 1


@pytest.mark.parametrize("protocol", ["binary", "http"])
@pytest.mark.parametrize(
    ("auth_token", "reason"),
    [
        (token("writer", bytes(range(1, 33))), "bad-signature"),
        ("not-a-jwt", "malformed"),
        (None, None),
    ],
    ids=["wrong-signature", "garbage", "no-token"],
)
async def test_a_bad_token_is_rejected(
    gateway: Gateway, protocol: str, auth_token: str | None, reason: str | None
) -> None:
    """Binary: ERROR AuthenticationError answers CONNECT and the connection is closed, as a
    Pulsar broker does; the C++ client keeps reconnecting until its operation timeout.
    HTTP: 401, which the C++ client reports as a connect error."""
    url = url_of(gateway, protocol)
    with pytest.raises(pulsar.PulsarException):
        await in_thread(produce, url, TOPIC, auth_token, FAILING_TIMEOUT)
    assert gateway.untouched()
    assert gateway.authentications("success") == 0
    if reason is not None:
        assert gateway.authentications("failures", reason=reason) >= 1
    # refused before any lookup: nothing was answered
    assert gateway.service.metrics.registry.get_sample_value(
        "pulsar_broker_lookup_answers_total",
        {"listener": "external", "chosen_by": "socket", "protocol": protocol},
    ) in (None, 0.0)


@pytest.mark.parametrize("protocol", ["binary", "http"])
async def test_a_valid_token_without_permission_is_rejected(
    gateway: Gateway, protocol: str
) -> None:
    """The client asks for the partitioned metadata first: refused with AuthorizationError
    (binary; the client gives up at once) or 403 (HTTP: a connect error)."""
    url = url_of(gateway, protocol)
    expected = pulsar.AuthorizationError if protocol == "binary" else pulsar.ConnectError
    with pytest.raises(expected):
        await in_thread(produce, url, TOPIC, token("reader-of-nothing"), FAILING_TIMEOUT)
    assert gateway.untouched()
    assert gateway.authentications("success") >= 1  # the token itself was fine


async def test_a_listener_name_outside_the_allowed_list_fails_at_once(gateway: Gateway) -> None:
    """listener.external.allowedListenerNames: the external socket answers only its own
    listener. Naming another one gets NotAllowedError, which the client does not retry."""
    url = gateway.binary.url
    with pytest.raises(pulsar.NotAllowedError):
        await in_thread(produce, url, TOPIC, token("writer"), listener_name="internal")
    assert gateway.untouched()
    await in_thread(produce, url, TOPIC, token("writer"), listener_name="external")
    assert gateway.reached(TOPIC)
