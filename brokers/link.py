"""The broker link: what only a broker can answer, asked of a live broker over the binary protocol.

Pulsar's proxy, in lookup mode, forwards some requests to a broker; the gateway does the same
for GET_TOPICS_OF_NAMESPACE of non-persistent topics (they exist only in brokers' memory),
GET_SCHEMA (schemas live in BookKeeper), and PARTITIONED_METADATA that must create a
partitioned topic (the gateway only reads the metadata store) or tell whether a non-persistent
topic exists; and a non-authoritative LOOKUP (to the load-manager leader, one Redirect followed)
when a protocol-handler client asks about a bundle nobody owns, so that a broker takes it.

- **Which broker**: the live brokers of the cluster view (their registrations under
  ``/loadbalance/brokers``), at their **internal** listener's binary URL (the registration's
  ``advertisedListeners[internalListenerName]``, else its default ``pulsarServiceUrl``;
  ``pulsar+ssl`` with ``tlsEnabledWithBroker=true``), in turn. A broker that could not be
  reached, or did not answer in time, is skipped for ``FAILURE_COOLDOWN`` seconds unless no
  other broker is left; a request whose connection could not be opened tries the next broker
  (up to ``CONNECT_ATTEMPTS``).
- **Who asks**: the gateway authenticates with Pulsar's proxy keys
  (``brokerClientAuthenticationPlugin`` / ``brokerClientAuthenticationParameters``, a token
  given as ``token:<jwt>``, ``file:///path`` read at each connection, or the bare token). A
  client that authenticated to the gateway is named in CONNECT as ``original_principal`` (its
  token too, as ``original_auth_data``, with ``forwardAuthorizationCredentials=true``), as a
  Pulsar proxy does, so the broker authorizes the client (the gateway's role must be one of the
  broker's ``proxyRoles``). Connections are therefore kept per broker and per client identity.
- **Bounds**: at most ``max_connections`` connections (the least recently used idle one is
  closed to make room; with none idle the request is refused), at most
  ``max_in_flight_per_broker`` requests waiting on one broker (the excess is refused at once
  with ``TooManyRequests``: there is no queue), and each request ends within
  ``request_timeout`` (``FORWARD_TIMEOUT``, 10 s: below the clients' default operation timeout
  of 30 s, so the client gets the gateway's error rather than its own timeout).
- **The REST topic list's fan-out** (`non_persistent_topics`): the brokers that hold the
  namespace's bundles (lookup.bundle_owners), each asked once, at most ``fan_out`` at a time
  per list and ``fan_out_total`` over all lists (the rest wait, within the list's deadline),
  the whole list within one ``request_timeout``; counted against maxConcurrentLookupRequest.
  A broker in its failure cooldown fails the list at once (no connect is tried), and a broker
  that had not answered by the deadline is put in it. A fan-out never closes another
  request's connection: it uses the pooled connection, joins the pool while it has room,
  and otherwise opens a connection of its own, closed once answered (at most
  ``fan_out_total`` such connections besides the pool's ``max_connections``).
- **Answers**: the broker's response command, with the broker's request id (the caller puts
  the client's back). Link failures raise LookupFailure: ``BROKER_UNAVAILABLE`` (binary
  ServiceNotReady, HTTP 503), ``NO_BROKER``, ``TOO_MANY_REQUESTS``.

Credentials are never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import ssl
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import cast
from urllib.parse import unquote, urlsplit

from pulsar_lookup_gateway.brokers.answers import (
    BrokerLookup,
    BrokerRefusal,
    BrokerSchema,
    PartitionCount,
    TopicList,
    lookup_of,
    partitions_of,
    schema_of,
    topics_of,
)
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import (
    BaseCommand,
    FeatureFlags,
    FrameDecoder,
    RemoteProtocolError,
)
from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import CommandGetTopicsOfNamespace
from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure, NodeNotLoaded
from pulsar_lookup_gateway.lookup.model import BrokerData
from pulsar_lookup_gateway.lookup.untrusted import printable
from pulsar_lookup_gateway.lookup.view import BrokerRegistry
from pulsar_lookup_gateway.serving.service import LookupService

__all__ = [
    "FORWARD_TIMEOUT",
    "BrokerLink",
    "LinkSettings",
    "Principal",
]

log = logging.getLogger(__name__)

FORWARD_TIMEOUT = 10.0  # seconds one forwarded request may take
CONNECT_TIMEOUT = 5.0  # seconds to open a connection and have CONNECTED back
MAX_IN_FLIGHT_PER_BROKER = 1000
MAX_CONNECTIONS = 64
FAN_OUT = 8  # brokers one REST topic list asks at once
FAN_OUT_TOTAL = 32  # brokers all REST topic lists ask at once
FAILURE_COOLDOWN = 30.0  # seconds a broker that failed is skipped
CONNECT_ATTEMPTS = 3  # brokers tried when connections cannot be opened
PROTOCOL_VERSION = 21
#: The auth method name of the broker's token provider, as CONNECT and AUTH_RESPONSE send it.
TOKEN_METHOD = "token"


@functools.cache
def _version() -> str:
    """What the gateway calls itself in CONNECT (client_version), as in its CONNECTED."""
    try:
        return f"pulsar-lookup-gateway-{metadata.version('pulsar-lookup-gateway')}"
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "pulsar-lookup-gateway-0+unknown"


@dataclass(frozen=True, slots=True)
class Principal:
    """The client a forwarded request is made for (None role: a socket without authentication)."""

    role: str | None = None
    auth_method: str | None = None
    auth_data: str | None = None


ANONYMOUS = Principal()


@dataclass(frozen=True, slots=True)
class LinkSettings:
    tls: bool = False
    trust_certs_file: str | None = None
    verify_hostname: bool = False
    token: str | None = None  # brokerClientAuthenticationParameters of the token plugin
    forward_credentials: bool = False
    # anonymousUserRole: the original principal of a forwarded request whose client proved no
    # role (None: such requests are refused where the gateway has an identity of its own).
    anonymous_role: str | None = None
    internal_listener: str | None = None
    request_timeout: float = FORWARD_TIMEOUT
    connect_timeout: float = CONNECT_TIMEOUT
    max_in_flight_per_broker: int = MAX_IN_FLIGHT_PER_BROKER
    max_connections: int = MAX_CONNECTIONS
    failure_cooldown: float = FAILURE_COOLDOWN
    fan_out: int = FAN_OUT
    fan_out_total: int = FAN_OUT_TOTAL

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        context = ssl.create_default_context(cafile=self.trust_certs_file)
        context.check_hostname = self.verify_hostname
        return context


def _token_bytes(parameters: str) -> bytes:
    """The token of the token plugin's parameters (`token:<jwt>`, `file:///path`, or bare);
    a file is read each time, so a rotated token is used by the next connection."""
    if parameters.startswith("file:"):
        return Path(unquote(urlsplit(parameters).path)).read_bytes().strip()
    return parameters.removeprefix("token:").strip().encode()


def _unavailable(message: str, detail: str | None = None) -> LookupFailure:
    """A broker could not answer: `message` for the client, without the broker's (internal)
    address; `detail`, naming it, for the log (BrokerLink._failed writes it, once per broker
    and cooldown: a broker that is down fails every request sent its way)."""
    return LookupFailure(FailureKind.BROKER_UNAVAILABLE, message, detail)


def _lost(url: str, reason: str) -> LookupFailure:
    return _unavailable("the connection to the broker was lost; retry", f"{url}: {reason}")


def _cooling_down() -> LookupFailure:
    """A list that needs a broker in its failure cooldown (the log named it when it failed)."""
    return _unavailable("a broker that owns bundles of the namespace failed recently; retry later")


def required(link: BrokerLink | None) -> BrokerLink:
    """`link`, for a request only a broker can answer; LookupFailure(BROKER_UNAVAILABLE) where
    the gateway has none."""
    if link is None:
        raise _unavailable("this request needs a broker; none is configured")
    return link


class BrokerLink:
    """Connections to the cluster's brokers, shared by every server socket of a gateway."""

    def __init__(self, service: LookupService, settings: LinkSettings | None = None) -> None:
        self.service = service
        self.settings = settings or LinkSettings(internal_listener=service.internal_listener)
        self._ssl = self.settings.ssl_context()
        self._pool: OrderedDict[tuple[str, Principal], _BrokerConnection] = OrderedDict()
        self._opening: dict[tuple[str, Principal], asyncio.Task[_BrokerConnection]] = {}
        self._in_flight: dict[str, int] = {}
        self._failed_until: dict[str, float] = {}
        self._turn = itertools.count()
        self._closed = False
        # Connections a fan-out opened for itself while the pool was full (closed once answered).
        self._own: set[_BrokerConnection] = set()
        self._fan_out_slots = asyncio.Semaphore(max(1, self.settings.fan_out_total))

    # -- what the front ends ask ---------------------------------------------------------------

    async def partitioned_metadata(
        self, topic: str, *, auto_creation: bool, principal: Principal = ANONYMOUS
    ) -> PartitionCount | BrokerRefusal:
        """The broker's partition count of `topic` (or its refusal)."""

        def build(request_id: int) -> bytes:
            return codec.partitioned_metadata(
                topic, request_id, metadata_auto_creation_enabled=auto_creation
            )

        # A broker that does not honour field 6 would create the topic it was asked about.
        answer = await self.request(build, principal, needs_no_creation_flag=not auto_creation)
        return partitions_of(answer)

    async def topics_of_namespace(
        self,
        namespace: str,
        mode: CommandGetTopicsOfNamespace.Mode,
        *,
        topics_pattern: str | None = None,
        topics_hash: str | None = None,
        properties: Sequence[tuple[str, str]] = (),
        principal: Principal = ANONYMOUS,
    ) -> TopicList | BrokerRefusal:
        """The broker's topics of `namespace` in `mode` (or its refusal); `properties`: the
        client's PIP-452 context, passed on (a broker's PulsarResourcesExtended may list by
        them)."""

        def build(request_id: int) -> bytes:
            return codec.get_topics_of_namespace(
                namespace,
                request_id,
                mode,
                topics_pattern=topics_pattern,
                topics_hash=topics_hash,
                properties=properties,
            )

        return topics_of(await self.request(build, principal))

    async def non_persistent_topics(
        self,
        namespace: str,
        holders: Collection[str] | None,
        *,
        principal: Principal = ANONYMOUS,
    ) -> TopicList | BrokerRefusal:
        """The non-persistent topics of `namespace` that the brokers `holders` (ids; None:
        every live broker) have loaded, joined and sorted: the REST topic list's, as
        NamespacesBase.internalGetNonPersistentTopics asks each bundle's owner. The bounds
        are the module's (fan-out); a broker's refusal or failure fails the whole list, as
        there. No holder: no topic, and no broker is asked."""
        if self._closed:
            raise _unavailable("the broker link is closed")
        key_principal = self._pool_key(principal)
        urls = self._holder_urls(await self._registry(), holders)
        if not urls:
            return TopicList(())
        if any(self.broker_failed(url) for url in urls):  # (before any other is asked)
            raise _cooling_down()

        def build(request_id: int) -> bytes:
            return codec.get_topics_of_namespace(
                namespace, request_id, CommandGetTopicsOfNamespace.NON_PERSISTENT
            )

        with self.service.admitted():
            listed = await self._fan_out(urls, build, key_principal)
        if isinstance(listed, BrokerRefusal):
            return listed
        return TopicList(tuple(sorted({topic for one in listed for topic in one.topics})))

    def _holder_urls(self, registry: BrokerRegistry, holders: Collection[str] | None) -> list[str]:
        """The URLs to ask for the holders' topics (None: every live broker's)."""
        if holders is None:
            urls = self._live_urls(registry)
            if not urls:
                raise LookupFailure(FailureKind.NO_BROKER, "No broker was available")
            return urls
        found = set()
        for broker_id in holders:
            data = registry.brokers.get(broker_id)
            if data is None:  # (it left since the owners were read)
                raise LookupFailure(
                    FailureKind.OWNER_INACTIVE,
                    "a broker that owns bundles of the namespace is not registered; retry",
                    f"owner {broker_id}",
                )
            url = self._url_of(data)
            if url is None:
                raise _unavailable(
                    "a broker's registration is unusable; retry later",
                    f"{broker_id}: no binary URL for the internal listener",
                )
            found.add(url)
        return sorted(found)

    async def _fan_out(
        self, urls: Sequence[str], build: Callable[[int], bytes], principal: Principal
    ) -> list[TopicList] | BrokerRefusal:
        """Each broker of `urls` asked `build` once, within one deadline (see the module)."""
        waiting = iter(urls)
        lists: list[TopicList] = []
        refusals: list[BrokerRefusal] = []
        asking: set[str] = set()

        async def ask_in_turn() -> None:
            for url in waiting:  # (one iterator shared by the workers: each URL asked once)
                async with self._fan_out_slots:
                    asking.add(url)
                    listed = topics_of(await self._ask(url, build, principal))
                    asking.discard(url)
                if isinstance(listed, BrokerRefusal):
                    refusals.append(listed)
                    raise _Refused  # the others are cancelled: the list is refused
                lists.append(listed)

        timeout = self.settings.request_timeout
        try:
            async with asyncio.timeout(timeout), asyncio.TaskGroup() as group:
                for _ in range(min(max(1, self.settings.fan_out), len(urls))):
                    group.create_task(ask_in_turn())
        except TimeoutError:
            failure = _unavailable(f"the brokers did not answer within {timeout:g}s; retry")
            for url in asking:
                self._failed(url, _unavailable(failure.message, f"{url}: no answer in time"))
            raise failure from None
        except BaseExceptionGroup as errors:
            if refusals:
                return refusals[0]
            failures = [e for e in errors.exceptions if isinstance(e, LookupFailure)]
            if failures:
                raise failures[0] from None
            raise
        return lists

    async def _ask(
        self, url: str, build: Callable[[int], bytes], principal: Principal
    ) -> BaseCommand:
        """One fan-out request to `url`: refused at once while it is in its failure cooldown
        (or has too many requests waiting); on a connection that takes no other request's."""
        if self.broker_failed(url):
            raise _cooling_down()
        if self._in_flight.get(url, 0) >= self.settings.max_in_flight_per_broker:
            raise LookupFailure(
                FailureKind.TOO_MANY_REQUESTS,
                "Too many requests waiting on the brokers; retry later",
            )
        key = (url, principal)
        pooled = self._pool.get(key)
        if pooled is not None and not pooled.usable:
            del self._pool[key]
            pooled = None
        own = False
        try:
            if pooled is not None:
                self._pool.move_to_end(key)
                connection = pooled
            elif key in self._opening or self._has_room():
                connection = await self._connection(url, principal)  # (joins the pool)
            else:
                connection, own = await self._dial(url, principal), True
                self._own.add(connection)
        except LookupFailure as failure:
            if failure.kind is FailureKind.BROKER_UNAVAILABLE:
                self._failed(url, failure)
            raise
        try:
            return await self._counted(url, connection, build)
        finally:
            if own:
                self._own.discard(connection)
                connection.close()

    async def schema(
        self, topic: str, version: bytes | None = None, *, principal: Principal = ANONYMOUS
    ) -> BrokerSchema | BrokerRefusal:
        """The schema of `topic` (its latest, or `version`), or the broker's refusal."""
        answer = await self.request(lambda rid: codec.get_schema(topic, rid, version), principal)
        return schema_of(answer)

    # -- the link ------------------------------------------------------------------------------

    async def request(
        self,
        build: Callable[[int], bytes],
        principal: Principal = ANONYMOUS,
        *,
        needs_no_creation_flag: bool = False,
    ) -> BaseCommand:
        """Send the command `build(request_id)` to a broker and return its answer."""
        if self._closed:
            raise _unavailable("the broker link is closed")
        key_principal = self._pool_key(principal)
        attempts = 0
        last: LookupFailure | None = None
        for url in await self._candidates():
            if self._in_flight.get(url, 0) >= self.settings.max_in_flight_per_broker:
                last = LookupFailure(
                    FailureKind.TOO_MANY_REQUESTS,
                    "Too many requests waiting on the brokers; retry later",
                )
                continue
            attempts += 1
            try:
                connection = await self._connection(url, key_principal)
            except LookupFailure as failure:
                if failure.kind is not FailureKind.BROKER_UNAVAILABLE:
                    raise  # the pool is full: no broker's fault
                self._failed(url, failure)
                last = failure
                if attempts >= CONNECT_ATTEMPTS:
                    break
                continue
            if needs_no_creation_flag and not connection.supports_no_creation:
                raise _unavailable(
                    "the broker cannot answer partitioned metadata without creating the topic "
                    "(supports_get_partitioned_metadata_without_auto_creation); retry later"
                )
            return await self._counted(url, connection, build)
        if last is not None:
            raise last
        raise LookupFailure(FailureKind.NO_BROKER, "No broker was available")

    async def lookup(
        self, topic: str, broker_id: str | None, *, principal: Principal = ANONYMOUS
    ) -> BrokerLookup | BrokerRefusal:
        """LOOKUP `topic` as a Pulsar client would: non-authoritative, at `broker_id`'s internal
        URL (the load-manager leader; None or unknown: the next broker in turn), following a
        Redirect once, so that the broker the load manager picks takes the bundle (the gateway
        itself never hands a bundle out). Returns the last answer, or the broker's refusal.
        The lookup names the internal listener where the broker advertises it, so a
        Redirect points at an address the link can reach."""
        if self._closed:
            raise _unavailable("the broker link is closed")
        registry = await self._registry()
        broker = registry.brokers.get(broker_id) if broker_id is not None else None
        url = self._url_of(broker) if broker is not None else None
        if url is None:
            candidates = await self._candidates()
            if not candidates:
                raise LookupFailure(FailureKind.NO_BROKER, "No broker was available")
            url = candidates[0]
        internal = self.settings.internal_listener
        listener = internal if broker is None or internal in broker.advertised_listeners else None

        def ask(authoritative: bool) -> Callable[[int], bytes]:
            return lambda request_id: codec.lookup(topic, request_id, authoritative, listener)

        first = lookup_of(await self._request_at(url, ask(False), principal))
        if not isinstance(first, BrokerLookup) or first.connect:
            return first
        tls = self.settings.tls
        target = (first.broker_url_tls if tls else first.broker_url) or (
            first.broker_url if tls else first.broker_url_tls
        )
        if not target:
            return first
        return lookup_of(await self._request_at(target, ask(first.authoritative), principal))

    async def _request_at(
        self, url: str, build: Callable[[int], bytes], principal: Principal
    ) -> BaseCommand:
        """One request to the broker at `url` (no other broker is tried), with the link's
        bounds: the in-flight limit, the request timeout, a failed broker marked."""
        key_principal = self._pool_key(principal)
        if self._in_flight.get(url, 0) >= self.settings.max_in_flight_per_broker:
            raise LookupFailure(
                FailureKind.TOO_MANY_REQUESTS,
                "Too many requests waiting on the brokers; retry later",
            )
        try:
            connection = await self._connection(url, key_principal)
        except LookupFailure as failure:
            if failure.kind is FailureKind.BROKER_UNAVAILABLE:
                self._failed(url, failure)
            raise
        return await self._counted(url, connection, build)

    def _pool_key(self, principal: Principal) -> Principal:
        """Who a pooled connection is for: the client's role, and its credentials only where
        they are forwarded (connections differ by what they send the broker).

        A client that proved no role is not sent as the gateway itself: where the gateway
        authenticates to the brokers (its token), the broker would see the gateway's role
        with no original principal, and either refuse it (Pulsar's brokers refuse a proxy
        role acting for nobody) or grant the stranger the gateway's rights. Such a request
        goes as `anonymousUserRole`, or is refused when that is not set."""
        settings = self.settings
        if principal.role is None and settings.token is not None:
            if settings.anonymous_role is None:
                raise LookupFailure(
                    FailureKind.NOT_AUTHORIZED,
                    "this request is forwarded to a broker, which needs the client's role: "
                    "authenticate to the gateway",
                )
            return Principal(settings.anonymous_role)
        return principal if settings.forward_credentials else Principal(principal.role)

    async def _counted(
        self, url: str, connection: _BrokerConnection, build: Callable[[int], bytes]
    ) -> BaseCommand:
        """The request on `connection`, counted against `url`'s in-flight limit while it runs;
        a broker that fails it is marked failed."""
        self._in_flight[url] = self._in_flight.get(url, 0) + 1
        try:
            return await connection.request(build, self.settings.request_timeout)
        except LookupFailure as failure:
            self._failed(url, failure)
            raise
        finally:
            left = self._in_flight[url] - 1
            if left:
                self._in_flight[url] = left
            else:
                del self._in_flight[url]

    async def close(self) -> None:
        self._closed = True
        for task in list(self._opening.values()):
            task.cancel()
        for connection in [*self._pool.values(), *self._own]:
            connection.close()
        self._pool.clear()
        self._own.clear()

    @property
    def connection_count(self) -> int:
        return len(self._pool)

    def broker_failed(self, url: str) -> bool:
        """Whether `url` is being skipped after a failure."""
        return self._failed_until.get(url, 0.0) > time.monotonic()

    async def _candidates(self) -> list[str]:
        """The brokers' URLs, starting at the next in turn; those that failed recently last."""
        urls = self._live_urls(await self._registry())
        if not urls:
            return []
        start = next(self._turn) % len(urls)
        ordered = urls[start:] + urls[:start]
        now = time.monotonic()
        healthy = [url for url in ordered if self._failed_until.get(url, 0.0) <= now]
        return healthy + [url for url in ordered if url not in healthy]

    async def _registry(self) -> BrokerRegistry:
        source = self.service.source
        for _ in range(8):
            try:
                return source.view.broker_registry()
            except NodeNotLoaded as missing:
                await source.fetch(missing.path)
        raise _unavailable("the broker registrations kept changing while they were read")

    def _live_urls(self, registry: BrokerRegistry) -> list[str]:
        """The live brokers' URLs for the link (sorted; a registration without one left out)."""
        return sorted({url for data in registry.brokers.values() if (url := self._url_of(data))})

    def _url_of(self, broker: BrokerData) -> str | None:
        tls = self.settings.tls
        listener = broker.advertised_listeners.get(self.settings.internal_listener or "")
        if listener is not None:
            url = listener.broker_service_url_tls if tls else listener.broker_service_url
            if url:
                return url
        return broker.pulsar_service_url_tls if tls else broker.pulsar_service_url

    def _failed(self, url: str, failure: LookupFailure) -> None:
        """Skip `url` for a while; the log (once per cooldown) has what the client was not
        told: the failure's detail."""
        if not self.broker_failed(url):
            log.warning("broker %s skipped for %.0fs: %s (%s)", url,
                        self.settings.failure_cooldown, failure.message,
                        failure.detail or "-")  # fmt: skip
        self._failed_until[url] = time.monotonic() + self.settings.failure_cooldown

    async def _connection(self, url: str, principal: Principal) -> _BrokerConnection:
        key = (url, principal)
        connection = self._pool.get(key)
        if connection is not None and connection.usable:
            self._pool.move_to_end(key)
            return connection
        if connection is not None:
            del self._pool[key]
        opening = self._opening.get(key)
        if opening is None:
            self._make_room()
            opening = asyncio.ensure_future(self._open(url, principal))
            self._opening[key] = opening
            opening.add_done_callback(lambda task: self._opened(key, task))
        return await asyncio.shield(opening)

    def _opened(self, key: tuple[str, Principal], task: asyncio.Task[_BrokerConnection]) -> None:
        self._opening.pop(key, None)
        if not task.cancelled():
            task.exception()  # retrieved here too: every waiter may have gone away

    def _has_room(self) -> bool:
        return len(self._pool) + len(self._opening) < self.settings.max_connections

    def _make_room(self) -> None:
        limit = self.settings.max_connections
        if self._has_room():
            return
        for key, connection in self._pool.items():  # least recently used first
            if not connection.busy:
                del self._pool[key]
                connection.close()
                return
        raise LookupFailure(
            FailureKind.TOO_MANY_REQUESTS,
            f"all {limit} connections to the brokers are busy; retry later",
        )

    async def _open(self, url: str, principal: Principal) -> _BrokerConnection:
        connection = await self._dial(url, principal)
        self._pool[(url, principal)] = connection
        return connection

    async def _dial(self, url: str, principal: Principal) -> _BrokerConnection:
        """A new connection to `url` for `principal`, CONNECTED (pooled by the caller, or not)."""
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
        if host is None or port is None:
            raise _unavailable(
                "a broker's registration is unusable; retry later", f"{url}: no host and port"
            )
        token = None
        if self.settings.token is not None:
            try:
                token = await asyncio.to_thread(_token_bytes, self.settings.token)
            except OSError as exc:
                raise _unavailable(
                    "the gateway cannot authenticate to the brokers; retry later",
                    f"cannot read the broker client token: {exc.strerror}",
                ) from None
        connection = _BrokerConnection(url, token, self.settings)
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(
                loop.create_connection(
                    lambda: connection,
                    host,
                    port,
                    ssl=self._ssl if parts.scheme == "pulsar+ssl" else None,
                    server_hostname=host if parts.scheme == "pulsar+ssl" else None,
                ),
                self.settings.connect_timeout,
            )
            connection.send_connect(principal, self.settings.forward_credentials)
            await asyncio.wait_for(connection.connected, self.settings.connect_timeout)
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            connection.close()
            reason = "timed out" if isinstance(exc, TimeoutError) else str(exc) or repr(exc)
            raise _unavailable(
                "cannot reach the broker; retry later", f"cannot connect to {url}: {reason}"
            ) from None
        except BaseException:
            connection.close()
            raise
        if self._closed:  # (closed while it was being opened)
            connection.close()
            raise _unavailable("the broker link is closed")
        return connection


class _Refused(Exception):
    """A broker refused a fan-out's request: the other requests are cancelled."""


class _BrokerConnection(asyncio.Protocol):
    """One connection to one broker, for one client identity. Requests are pipelined; answers
    are matched by request id."""

    def __init__(self, url: str, token: bytes | None, settings: LinkSettings) -> None:
        self.url = url
        self._token = token
        self._settings = settings
        self._decoder = FrameDecoder()
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, asyncio.Future[BaseCommand]] = {}
        self._ids = itertools.count(1)
        self._closed = False
        self.connected: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.supports_no_creation = False

    @property
    def usable(self) -> bool:
        return not self._closed and self.connected.done() and not self.connected.exception()

    @property
    def busy(self) -> bool:
        return bool(self._pending)

    def send_connect(self, principal: Principal, forward_credentials: bool) -> None:
        self._write(
            codec.connect(
                _version(),
                PROTOCOL_VERSION,
                auth_method_name=TOKEN_METHOD if self._token is not None else None,
                auth_data=self._token,
                feature_flags=FeatureFlags(
                    supports_get_partitioned_metadata_without_auto_creation=True
                ),
                original_principal=principal.role,
                original_auth_data=principal.auth_data if forward_credentials else None,
                original_auth_method=principal.auth_method if forward_credentials else None,
            )
        )

    async def request(self, build: Callable[[int], bytes], timeout: float) -> BaseCommand:
        if not self.usable:
            raise _unavailable("the connection to the broker is closed; retry", self.url)
        request_id = next(self._ids)
        answer: asyncio.Future[BaseCommand] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = answer
        try:
            self._write(build(request_id))
            return await asyncio.wait_for(answer, timeout)
        except TimeoutError:
            raise _unavailable(
                f"the broker did not answer within {timeout:g}s; retry", self.url
            ) from None
        finally:
            self._pending.pop(request_id, None)

    def close(self) -> None:
        self._closed = True
        if self._transport is not None:
            self._transport.abort()
        self._fail_all("the connection was closed")

    # -- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            self._decoder.feed(data)
            while (command := self._decoder.next_command()) is not None:
                if isinstance(command, BaseCommand):
                    self._received(command)
        except RemoteProtocolError as exc:
            log.warning("closing the connection to broker %s: %s", self.url, exc)
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._fail_all("the broker closed the connection")

    # -- commands --------------------------------------------------------------------------------

    def _received(self, command: BaseCommand) -> None:
        kind = command.type
        if kind == BaseCommand.CONNECTED:
            flags = command.connected.feature_flags
            self.supports_no_creation = (
                flags.supports_get_partitioned_metadata_without_auto_creation
            )
            if not self.connected.done():
                self.connected.set_result(None)
        elif kind == BaseCommand.PING:
            self._write(codec.pong())
        elif kind == BaseCommand.AUTH_CHALLENGE:
            # The broker re-checks credentials (its authenticationRefreshCheckSeconds): answer
            # with the token as configured now.
            token = self._token
            if self._settings.token is not None:
                with contextlib.suppress(OSError):
                    token = _token_bytes(self._settings.token)
            self._write(
                codec.auth_response(_version(), PROTOCOL_VERSION, TOKEN_METHOD, token or b"")
            )
        elif kind == BaseCommand.ERROR and not self.connected.done():
            self.connected.set_exception(
                _unavailable(
                    "the broker refused the gateway's connection; retry later",
                    f"{self.url}: {printable(command.error.message)}",
                )
            )
            self.close()
        else:
            request_id = codec.request_id_of(command)
            if request_id is None:
                return
            if request_id == codec.NO_REQUEST and kind == BaseCommand.ERROR:
                self.close()
                return
            answer = self._pending.get(request_id)
            if answer is not None and not answer.done():
                answer.set_result(command)

    def _write(self, frame: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(frame)

    def _fail_all(self, reason: str) -> None:
        if not self.connected.done():
            self.connected.set_exception(_lost(self.url, reason))
        # Nobody may wait on `connected` any more: keep asyncio from logging it as unretrieved.
        if self.connected.done() and not self.connected.cancelled():
            self.connected.exception()
        pending, self._pending = self._pending, {}
        for answer in pending.values():
            if not answer.done():
                answer.set_exception(_lost(self.url, reason))
