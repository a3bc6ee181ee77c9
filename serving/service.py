"""LookupService: the async shell around resolve() that both front ends (binary, HTTP) call.

It reads through the metadata source's view, fetches nodes the view lacks (NodeNotLoaded) and
retries, bounds the lookups in flight (maxConcurrentLookupRequest) and records metrics.

Authorization (``authorizationEnabled``): given an `authorizer`, every request that carries a
role (the front end authenticated the client) is checked against the cluster's permissions
first; a request without a role comes from a socket that requires no authentication and is
not checked.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Hashable, Iterator, Sequence
from typing import Any, TypeVar

from pulsar_lookup_gateway.lookup.authorization import LookupAuthorizer
from pulsar_lookup_gateway.lookup.auto_creation import (
    AutoCreationSettings,
    Decision,
    decide_partitions,
    lookup_allowed,
    topic_not_found,
)
from pulsar_lookup_gateway.lookup.bundles import BundleRange
from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure, NodeNotLoaded
from pulsar_lookup_gateway.lookup.protocol_data import ProtocolAnswer, resolve_protocol
from pulsar_lookup_gateway.lookup.resolve import (
    LookupAnswer,
    ResolvePolicy,
    ResponseKind,
    namespace_bundle,
    reads_table_view,
    resolve,
    resolve_partitions,
)
from pulsar_lookup_gateway.lookup.selection import NO_ROUTES, ClientRoutes, ListenerChoice
from pulsar_lookup_gateway.lookup.source import MetadataSource
from pulsar_lookup_gateway.lookup.topic_list import TopicLister
from pulsar_lookup_gateway.lookup.topics import (
    NamespaceName,
    TopicName,
)
from pulsar_lookup_gateway.lookup.untrusted import printable
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.serving.admission import Admission
from pulsar_lookup_gateway.serving.forwarded_lookups import ForwardedLookups
from pulsar_lookup_gateway.serving.log_throttle import FirstSeen
from pulsar_lookup_gateway.serving.memo import NAMESPACE_WIDE, AnswerMemo, place_of
from pulsar_lookup_gateway.serving.metrics import LookupMetrics, LookupTally
from pulsar_lookup_gateway.serving.namespace_queries import NamespaceQueries
from pulsar_lookup_gateway.serving.refusals import TOPIC_IN_LOG, Refusals, lookup_line

log = logging.getLogger(__name__)

T = TypeVar("T")
# One lookup reads a handful of nodes; more fetches than this means the data keeps changing
# under us (or a bug), and the client is better served by an error it can retry.
MAX_FETCHES_PER_LOOKUP = 64
UNDECLARED = "undeclared"  # metric label for a listener name the config does not declare
MAX_PROTOCOL_DATA_LOGGED = 1024  # unreadable protocol data strings remembered as logged
#: What a kept LookupAnswer holds besides its name's bytes (its parsed name, bundle and URL
#: tuples; tracemalloc of 20,000 answers to 40-byte names: ~590 bytes each with the dict slot).
ANSWER_BYTES = 400


class LookupService:
    def __init__(
        self,
        source: MetadataSource,
        *,
        policy: ResolvePolicy | None = None,
        internal_listener: str | None = None,
        max_concurrent: int = 50_000,
        metrics: LookupMetrics | None = None,
        declared_listeners: Collection[str] | None = None,
        authorizer: LookupAuthorizer | None = None,
        routes: ClientRoutes = NO_ROUTES,
        memo: AnswerMemo | None = None,
    ) -> None:
        """`routes`: the listeners that TLS server names and client networks choose; `memo`:
        the process's answer memo (None: one of the service's own), which this service's
        answers and the front ends' (binary, HTTP) are kept in."""
        self.source = source
        self.routes = routes
        self.authorizer = authorizer  # None: authorization is off
        self.policy = policy or ResolvePolicy()
        self.internal_listener = internal_listener
        self.metrics = metrics or LookupMetrics()
        self.admission = Admission(max_concurrent, self.metrics, log)
        self.metrics.watch_source(lambda: self.source.status())
        # Read at scrape time (or once a second with --workers): two locked updates per lookup
        # cost more than the lookup itself.
        self.metrics.live(self.metrics.pending, lambda: float(self.admission.pending))
        self.metrics.max_concurrent.set(max_concurrent)
        # Listener names come from clients: label only declared ones, so metrics stay bounded.
        self.declared_listeners = (
            frozenset(declared_listeners) if declared_listeners is not None else None
        )
        self.memo = memo if memo is not None else AnswerMemo()
        # (topic, choice) -> answer, and (role, topic) -> True where authorized
        self._answers: dict[tuple[str, ListenerChoice], LookupAnswer] = self.memo.table(
            ("service", "answers")
        )
        self._allowed: dict[tuple[str, str], bool] = self.memo.table(("service", "allowed"))
        self._unreadable_data = FirstSeen(MAX_PROTOCOL_DATA_LOGGED)  # protocol data logged
        # Refused lookups, counted and logged on this logger: the service's own failures, and
        # the routing decisions' refusals (listeners.routing) before the service was asked.
        self.refusals = Refusals(self.metrics, self._labels, log)
        # A namespace's topics (binary and REST lists), read through this service.
        self.namespaces = NamespaceQueries(self)
        # Where a redirect within the cluster is turned into the owner's Connect by asking a
        # broker (gateway/ wires it over the broker link); None: the redirect is answered.
        self.forwarded: ForwardedLookups | None = None

    @property
    def logs_each_answer(self) -> bool:
        """Whether every answered lookup is logged (DEBUG): a front end that answers warm
        lookups itself must then leave them to lookup(), which writes the line."""
        return log.isEnabledFor(logging.DEBUG)

    async def lookup(
        self,
        topic: str | TopicName,
        choice: ListenerChoice,
        protocol: str,
        *,
        role: str | None = None,
        client: object = None,
        properties: Sequence[tuple[str, str]] = (),
        principal: Hashable = None,
        forward: bool = True,
        keep: bool = True,
        before_forward: Callable[[], Awaitable[None]] | None = None,
    ) -> LookupAnswer:
        """The answer for `topic` on the chosen listener. `role`: the authenticated client's
        role, checked when authorization is on (None: the socket needs no authentication).
        `client`: who asks, for the log line (its str() is made only when a line is written:
        every refused lookup at INFO, every answered one at DEBUG). `properties` (the
        client's lookup properties, PIP-368) and `principal` (who the broker is told asks)
        go with a lookup forwarded to a broker (`forwarded`); `forward=False`: the metadata's
        own answer (the ownership watch reports what the metadata shows); `keep=False`: the
        answer is not kept in the memo (the ownership watch keeps its topics' states itself,
        and a kept answer would hold each watched name twice more); `before_forward`: checks
        that must pass before a broker is asked (it may take the bundle)."""
        labels = self._labels(choice, protocol)
        started = time.perf_counter()
        admission = self.admission
        admission.admit(labels)
        admission.pending += 1
        try:
            if role is not None and self.authorizer is not None:
                await self.authorize(topic, role)
            key = (topic if isinstance(topic, str) else topic.full, choice)
            self.memo.follow(self.source.view)
            answer = self._answers.get(key)
            if answer is None:
                name = topic if isinstance(topic, TopicName) else TopicName.parse(topic)
                policy = self.policy
                answer = await self.read(lambda view: resolve(name, choice, view, policy))
                place = (answer.topic.namespace_name, answer.bundle.lower)
                if keep:
                    held = ANSWER_BYTES + 2 * len(key[0])  # (its parsed name: the name's parts)
                    self._keep(self._answers, key, answer, place, held)
            if forward and answer.needs_broker and self.forwarded is not None:
                if before_forward is not None:
                    await before_forward()
                answer = await self.forwarded.answer(
                    answer,
                    watched=self._watches_ownership(),
                    properties=properties,
                    principal=principal,
                    client=client,
                )
        except LookupFailure as exc:
            self.refusals.refuse(protocol, client, choice, topic, exc)
            raise
        finally:
            admission.pending -= 1
        self.metrics.tally(labels).answered(
            time.perf_counter() - started, answer.response is ResponseKind.CONNECT
        )
        if log.isEnabledFor(logging.DEBUG):
            outcome = answer.response.name.lower()
            line = lookup_line(protocol, client, choice, topic, outcome, str(answer.broker_id))
            log.debug(*line)
        return answer

    def _watches_ownership(self) -> bool:
        """Whether a bundle's new owner shows in a node the gateway watches: not under the
        extensible load manager with its system-topic table view."""
        view = self.source.view
        try:
            return not view.broker_registry().extensible or reads_table_view(view, self.policy)
        except (LookupFailure, NodeNotLoaded):
            return False

    def _labels(self, choice: ListenerChoice, protocol: str) -> tuple[str, str, str]:
        return (self._label(choice.name), choice.source.value, protocol)

    def tally_for(self, choice: ListenerChoice, protocol: str) -> LookupTally:
        """Where a lookup answered for `choice` over `protocol` is counted (for a front end
        that answers a repeated lookup itself, as lookup() would have)."""
        return self.metrics.tally(self._labels(choice, protocol))

    def _keep(
        self,
        table: dict[Any, Any],
        key: Any,
        value: Any,
        place: tuple[NamespaceName, int],
        value_bytes: int = 0,
    ) -> None:
        """Keep what `read` just read from the current view (no await since: its last read is
        synchronous) in the memo, filed under `place` (its namespace, and its bundle's lower
        bound or NAMESPACE_WIDE); the client chose the bytes of the key's strings;
        `value_bytes`: what the value holds of its own."""
        size = sum(len(part) for part in key if isinstance(part, str)) + value_bytes
        self.memo.follow(self.source.view)
        self.memo.remember(None, table, key, value, place_of(str(place[0]), place[1]), size)

    @property
    def answers_kept(self) -> int:
        """How many of the service's own answers the memo holds."""
        return len(self._answers)

    @property
    def cached_bytes(self) -> int:
        """What the process's answer memo holds (every front end's answers with the service's)."""
        return self.memo.bytes_held

    def _label(self, listener: str | None) -> str:
        if listener is None:
            return ""
        if self.declared_listeners is not None and listener not in self.declared_listeners:
            return UNDECLARED
        return listener

    async def authorize(self, topic: str | TopicName, role: str) -> None:
        """Raise LookupFailure(NOT_AUTHORIZED) unless `role` may look up `topic` (no-op when
        authorization is off). Reads the permissions through the view, fetching what it lacks."""
        authorizer = self.authorizer
        if authorizer is None:
            return
        full = topic if isinstance(topic, str) else topic.full
        self.memo.follow(self.source.view)
        if (role, full) in self._allowed:
            return
        name = topic if isinstance(topic, TopicName) else TopicName.parse(topic)
        await self.read(lambda view: authorizer.check(role, name, view))
        # (the view the check just read: its policies and its tenant's)
        self._keep(self._allowed, (role, full), True, (name.namespace_name, NAMESPACE_WIDE))

    async def partitions(self, topic: str | TopicName, *, role: str | None = None) -> int:
        # A partition's own name has no partitioned-topic node, so it answers 0, as in Pulsar.
        policy = self.policy
        return await self._guarded(
            topic, role, lambda name, view: resolve_partitions(name, view, policy)
        )

    async def bundle(self, topic: str | TopicName, *, role: str | None = None) -> BundleRange:
        return await self._guarded(topic, role, namespace_bundle)

    async def _guarded(
        self,
        topic: str | TopicName,
        role: str | None,
        read: Callable[[TopicName, ClusterView], T],
    ) -> T:
        """Partition-metadata and bundle requests: counted against maxConcurrentLookupRequest
        and authorized like lookups."""
        with self.admitted():
            name = topic if isinstance(topic, TopicName) else TopicName.parse(topic)
            if role is not None:
                await self.authorize(name, role)
            return await self.read(lambda view: read(name, view))

    @contextlib.contextmanager
    def admitted(self) -> Iterator[None]:
        """A request that is not a lookup, counted against maxConcurrentLookupRequest while it
        runs (TOO_MANY_REQUESTS when there is no room)."""
        admission = self.admission
        admission.admit(None)
        admission.pending += 1
        try:
            yield
        finally:
            admission.pending -= 1

    async def read(self, read: Callable[[ClusterView], T]) -> T:
        """Run a pure read; fetch whatever node it lacks and run it again."""
        for _ in range(MAX_FETCHES_PER_LOOKUP):
            try:
                return read(self.source.view)
            except NodeNotLoaded as missing:
                await self.source.fetch(missing.path)
        raise LookupFailure(
            FailureKind.METADATA_UNAVAILABLE, "metadata kept changing while it was read; retry"
        )

    # -- partitioned metadata and auto-creation ------------------------------------------
    # The rules are in lookup.auto_creation; the front ends forward to a broker what these
    # answer with AskBroker.

    #: Pulsar's allowAutoTopicCreation* / defaultNumPartitions keys (the gateway sets them).
    auto_creation: AutoCreationSettings = AutoCreationSettings()

    def configure_topics(self, auto_creation: AutoCreationSettings, lister: TopicLister) -> None:
        self.auto_creation = auto_creation
        self.namespaces.lister = lister

    async def partition_metadata(
        self, topic: str | TopicName, *, client_creation: bool, role: str | None = None
    ) -> Decision:
        """PARTITIONED_METADATA as the broker decides it: a count, TopicNotFound, or AskBroker."""
        settings, policy = self.auto_creation, self.policy
        return await self._guarded(
            topic,
            role,
            lambda name, view: decide_partitions(
                name, view, settings, client_creation=client_creation, policy=policy
            ),
        )

    async def check_lookup_allowed(self, topic: TopicName) -> None:
        """An HTTP lookup of a persistent topic that neither exists nor may be created fails
        with TOPIC_NOT_FOUND (404), as the broker's web service answers."""
        settings = self.auto_creation
        if not await self.read(lambda view: lookup_allowed(topic, view, settings)):
            raise topic_not_found(topic)

    # -- protocol handlers (lookup.protocol_data) ---------------------------------------------

    async def protocol_lookup(
        self, topic: TopicName, choice: ListenerChoice, protocol: str, *, role: str | None = None
    ) -> ProtocolAnswer:
        """The owner's `protocol` endpoints for the chosen listener, authorized like a lookup
        (an unowned bundle answers `owned=False`). Data the gateway cannot read is logged once
        per broker, protocol and data string (and passed through raw in the answer)."""
        declared, policy = self.declared_listeners or (), self.policy
        answer = await self._guarded(
            topic,
            role,
            lambda name, view: resolve_protocol(name, choice, protocol, view, policy, declared),
        )
        if answer.unparsed and answer.data is not None:
            key = (str(answer.broker_id), answer.protocol, answer.data)
            if self._unreadable_data.first(key):
                log.warning(
                    "broker %s advertises %s data the gateway cannot read as endpoints; "
                    "passed through raw: %s",
                    answer.broker_id,
                    printable(answer.protocol),
                    printable(", ".join(answer.unparsed), TOPIC_IN_LOG),
                )
        return answer
