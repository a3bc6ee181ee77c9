"""BrokerLookupForwarder: a lookup the metadata cannot answer with Connect, asked of the brokers
over the broker link, as Pulsar's proxy asks (its LookupProxyHandler).

The LOOKUP names the listener the gateway chose (``advertised_listener_name``; none for the
internal listener, whose URLs are the brokers' defaults), carries the client's lookup properties
(PIP-368) and starts non-authoritative at the broker the metadata named: the modular load
manager's leader (it assigns unowned bundles), or under the extensible load manager a live
broker (any of them assigns, or knows the owner). A Redirect is followed by the gateway itself,
with the redirect's ``authoritative`` flag, at most `MAX_HOPS` times and within `deadline`: the
redirect names the target at the chosen listener's address, which the gateway may not reach, so
the target is found among the registrations by any of its URLs and asked at its internal URL.
The broker that answers Connect owns the bundle: the client gets its URLs for the chosen
listener (its web URLs from its registration, for HTTP).

A broker that cannot be reached or does not answer in time gives the client ServiceNotReady
(HTTP 503), which it retries; a broker's refusal is passed on with its code and message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Sequence

from pulsar_lookup_gateway.brokers.answers import BrokerLookup, BrokerRefusal, lookup_of
from pulsar_lookup_gateway.brokers.failures import link_closed, unavailable
from pulsar_lookup_gateway.brokers.identity import sent_principal
from pulsar_lookup_gateway.brokers.link import BrokerLink
from pulsar_lookup_gateway.brokers.settings import FORWARD_TIMEOUT
from pulsar_lookup_gateway.listeners.auth import ANONYMOUS, Principal
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure
from pulsar_lookup_gateway.lookup.model import BrokerData
from pulsar_lookup_gateway.lookup.resolve import (
    BrokerUrls,
    LookupAnswer,
    ResponseKind,
    broker_urls,
    listener_missing,
)
from pulsar_lookup_gateway.lookup.untrusted import printable
from pulsar_lookup_gateway.lookup.view import BrokerRegistry

__all__ = ["MAX_HOPS", "BrokerLookupForwarder"]

#: Redirects followed for one lookup (leader -> assigned broker is one; a bundle moving while
#: it is looked up may add one or two).
MAX_HOPS = 5

#: Pulsar's ServerError numbers a broker's refusal keeps its kind by (others: ServiceNotReady).
_REFUSALS = {
    1: FailureKind.OWNER_INACTIVE,  # MetadataError (retriable: a bundle being unloaded)
    4: FailureKind.NOT_AUTHORIZED,  # AuthorizationError
    11: FailureKind.TOPIC_NOT_FOUND,  # TopicNotFound
    14: FailureKind.TOO_MANY_REQUESTS,  # TooManyRequests
}


class BrokerLookupForwarder:
    """serving.forwarded_lookups.LookupForwarder over a BrokerLink."""

    def __init__(
        self, link: BrokerLink, *, max_hops: int = MAX_HOPS, deadline: float = FORWARD_TIMEOUT
    ) -> None:
        self._link = link
        self._max_hops = max_hops
        self._deadline = deadline

    async def owner(
        self,
        answer: LookupAnswer,
        properties: Sequence[tuple[str, str]],
        principal: Hashable,
    ) -> LookupAnswer:
        if self._link.closed:
            raise link_closed()
        sent = sent_principal(
            self._link.settings, principal if isinstance(principal, Principal) else ANONYMOUS
        )
        try:
            async with asyncio.timeout(self._deadline):  # (cheaper than wait_for: no task)
                return await self._follow(answer, tuple(properties), sent)
        except TimeoutError:
            raise unavailable(
                "the brokers did not answer the lookup in time; retry",
                f"{answer.topic.full}: no Connect within {self._deadline:g}s",
            ) from None

    async def _follow(
        self, answer: LookupAnswer, properties: tuple[tuple[str, str], ...], sent: Principal
    ) -> LookupAnswer:
        addresses = self._link.addresses
        registry = await addresses.registry()
        choice = answer.listener
        # (unset for the internal listener: a broker answers it with its default URLs)
        listener = None if choice.internal or not choice.uses_listener_urls else choice.name
        topic = answer.topic.full
        broker_id = answer.broker_id
        start = registry.brokers.get(broker_id) if broker_id is not None else None
        url = addresses.url_of(start) if start is not None else None
        if url is None:
            candidates = await addresses.in_turn()
            if not candidates:
                raise LookupFailure(FailureKind.NO_BROKER, "No broker was available")
            url = candidates[0]
            broker_id = _broker_at(registry, url)

        def ask(authoritative: bool) -> Callable[[int], bytes]:
            return lambda request_id: codec.lookup(
                topic, request_id, authoritative, listener, properties
            )

        authoritative = False
        for _ in range(self._max_hops + 1):
            reply = lookup_of(await self._link.dispatch.to(url, ask(authoritative), sent))
            if isinstance(reply, BrokerRefusal):
                raise _refused(reply)
            if reply.connect:
                return _connected(answer, reply, broker_id, registry)
            target = reply.broker_url or reply.broker_url_tls
            if not target:
                raise unavailable("a broker redirected the lookup to no address; retry")
            registry = await addresses.registry()
            broker_id = _broker_at(registry, target)
            found = registry.brokers.get(broker_id) if broker_id is not None else None
            url = (addresses.url_of(found) if found is not None else None) or target
            authoritative = reply.authoritative
        raise unavailable(
            f"the brokers redirected the lookup more than {self._max_hops} times; retry"
        )


def _broker_at(registry: BrokerRegistry, url: str) -> str | None:
    """The registered broker that advertises `url` (any listener's, or its defaults)."""
    found = registry.by_url.get(url)
    if found is not None:
        return found
    for broker_id, data in registry.brokers.items():
        if url in _urls_of(data):
            return broker_id
    return None


def _urls_of(data: BrokerData) -> set[str | None]:
    urls = {data.pulsar_service_url, data.pulsar_service_url_tls}
    for listener in data.advertised_listeners.values():
        urls.add(listener.broker_service_url)
        urls.add(listener.broker_service_url_tls)
    return urls


def _connected(
    answer: LookupAnswer, reply: BrokerLookup, owner: str | None, registry: BrokerRegistry
) -> LookupAnswer:
    """The client's Connect: the owner's binary URLs as it answered them for the listener, its
    web URLs for the listener from its registration."""
    data = registry.brokers.get(owner) if owner is not None else None
    registered = broker_urls(data, answer.listener) if data is not None else None
    if data is not None and registered is None:
        raise listener_missing(answer.listener.name)
    service, service_tls = reply.broker_url, reply.broker_url_tls
    if registered is not None and not service and not service_tls:
        service, service_tls = registered.service_url, registered.service_url_tls
    urls = BrokerUrls(
        service,
        service_tls,
        registered.http_url if registered is not None else None,
        registered.http_url_tls if registered is not None else None,
    )
    return LookupAnswer(
        answer.topic,
        answer.bundle,
        ResponseKind.CONNECT,
        True,
        owner,
        urls,
        answer.listener,
        forwarded=True,
    )


def _refused(reply: BrokerRefusal) -> LookupFailure:
    kind = _REFUSALS.get(reply.code, FailureKind.BROKER_UNAVAILABLE)
    return LookupFailure(kind, printable(reply.reason))
