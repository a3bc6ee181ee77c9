"""The two answers of an HTTP lookup, made by the full path and by the memo alike (byte for
byte): Pulsar's LookupData (200), or a 307 to the owner's web URL for the chosen listener."""

from __future__ import annotations

import functools
import json
import random
from urllib.parse import quote, urlencode

from aiohttp import web

from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure
from pulsar_lookup_gateway.lookup.resolve import BrokerUrls, LookupAnswer
from pulsar_lookup_gateway.lookup.selection import ChoiceSource
from pulsar_lookup_gateway.lookup.service_urls import service_hosts
from pulsar_lookup_gateway.lookup.untrusted import printable

# Encoding LookupData is a good part of a lookup's cost: cached (a cluster has few distinct
# answers), bounded.
BODY_CACHE_SIZE = 4_096
# (aiohttp copies ready headers faster than it builds the Content-Type; a dict copies fastest.)
_JSON_HEADERS = {"Content-Type": "application/json; charset=utf-8"}  # never changed


def lookup_data(urls: BrokerUrls) -> dict[str, str]:
    """Pulsar's LookupData: all six keys, always strings (the C++ client needs the keys)."""
    broker_url = urls.service_url or ""
    return {
        "brokerUrl": broker_url,
        "brokerUrlTls": urls.service_url_tls or "",
        "httpUrl": urls.http_url or "",
        "httpUrlTls": urls.http_url_tls or "",
        "nativeUrl": broker_url,
        "brokerUrlSsl": "",
    }


def connect_response(body: bytes) -> web.Response:
    return web.Response(body=body, headers=_JSON_HEADERS)


def redirect_response(location: str) -> web.Response:
    return web.Response(status=307, headers={"Location": location})


@functools.lru_cache(maxsize=BODY_CACHE_SIZE)
def lookup_body(urls: BrokerUrls) -> bytes:
    # A cluster has few distinct answers (brokers x listeners): encode each once.
    return json.dumps(lookup_data(urls)).encode()


def redirect_location(answer: LookupAnswer, *, secure: bool) -> str:
    """Where a 307 sends the client: the target's lookup route, with `authoritative` and the
    chosen listener in the query (headers do not survive a redirect). A request that came over
    TLS goes to the target's https URL only: when the target has none but a plain one, the
    lookup fails as NO_TLS_REDIRECT (412, as Pulsar answers), never downgrading the client to
    http://. A plain request goes to the http URL only: with none but an https one, 412 as
    master answers ("Redirected cluster's service url is not configured.").

    `answer.urls` are the chosen listener's only; when the target has no web URL for it, the
    lookup fails as NO_BROKER (503, retriable: the target, or the listener's web URLs, may
    change), naming neither the target nor its other addresses."""
    urls = answer.urls
    base = urls.http_url_tls if secure else urls.http_url
    if not secure and not base and urls.http_url_tls:
        # As master answers a plain lookup whose target has only an https URL: 412, never
        # an upgrade the client did not ask for.
        raise LookupFailure(
            FailureKind.NO_TLS_REDIRECT, "Redirected cluster's service url is not configured."
        )
    if secure and not base and urls.http_url:
        listener = answer.listener.name or "internal"
        raise LookupFailure(
            FailureKind.NO_TLS_REDIRECT,
            f"the broker for this lookup has no https URL on listener '{printable(listener)}'; "
            "an https lookup is not redirected to http",
        )
    if not base:
        listener = answer.listener.name or "internal"
        raise LookupFailure(
            FailureKind.NO_BROKER,
            f"no broker can take this lookup over HTTP on listener '{printable(listener)}' "
            "now; retry later",
        )
    if answer.peer_cluster is not None:
        # A cluster's serviceUrl may list several hosts: one of them, chosen at random as
        # PulsarWebResource.getRedirectionUrl's PulsarServiceNameResolver chooses it.
        base = random.choice(service_hosts(base))
    topic = answer.topic
    path = (
        f"/lookup/v2/topic/{topic.domain.value}/{quote(topic.tenant, safe='')}/"
        f"{quote(topic.namespace, safe='')}/{quote(topic.local_name, safe='')}"
    )
    query = {"authoritative": "true" if answer.authoritative else "false"}
    if answer.listener.source is not ChoiceSource.INTERNAL and answer.listener.name:
        query["listenerName"] = answer.listener.name
    return f"{base.rstrip('/')}{path}?{urlencode(query)}"
