"""The REST topic list's bounds (real sockets; broker test peers as the bundles' owners): the
non-persistent topics are asked of the owners of the namespace's bundles only, a few at a
time per list and over all lists, within one deadline, through the pool without closing
another request's connection, with the failure cooldown and maxConcurrentLookupRequest; the
persistent part comes from the topic lister's cache."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from pulsar_lookup_gateway.brokers.link import BrokerLink, LinkSettings
from pulsar_lookup_gateway.http_api.app import build_app
from pulsar_lookup_gateway.http_api.server import HttpServer
from pulsar_lookup_gateway.http_api.settings import HttpSettings
from pulsar_lookup_gateway.listeners.endpoints.addresses import Endpoint, Scheme
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.lookup.auto_creation import AutoCreationSettings
from pulsar_lookup_gateway.lookup.bundles import NamespaceBundles
from pulsar_lookup_gateway.lookup.topic_list import TopicLister, topics_in_steps
from pulsar_lookup_gateway.metadata_store.file import FileSource
from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
from pulsar_lookup_gateway.metadata_store.synthetic import broker_node, cluster
from pulsar_lookup_gateway.serving.service import LookupService
from tests.broker_peer import BrokerPeer
from tests.integration.http_api.listing_gateway import HOST, http_get

LISTED = "GET_TOPICS_OF_NAMESPACE"
WAIT = 10.0
SETTLE = 0.3  # how long a request that is not held back takes at most to reach a peer


def topics_path(namespace: str, mode: str = "NON_PERSISTENT") -> str:
    return f"/admin/v2/namespaces/{namespace}/topics?mode={mode}"


def owned_cluster(owners: dict[str, list[BrokerPeer]]) -> dict[str, Any]:
    """Namespaces (name -> its owners, one bundle each), every owner a registered broker at
    its peer, and a persistent topic in each namespace."""
    nodes = cluster(brokers=0, owned={}, leader=None)
    number = 0
    for namespace, peers in owners.items():
        bundles = NamespaceBundles.equal(len(peers))
        boundaries = [f"0x{b:08x}" for b in bundles.boundaries]
        nodes[f"/admin/policies/{namespace}"] = {
            "bundles": {"boundaries": boundaries, "numBundles": len(peers)}
        }
        nodes[f"/managed-ledgers/{namespace}/persistent/kept"] = {}
        for peer, bundle in zip(peers, bundles.ranges, strict=True):
            number += 1
            node = broker_node(number)
            node["advertisedListeners"]["internal"]["brokerServiceUrl"] = peer.url
            nodes[f"/loadbalance/brokers/b{number}:8080"] = node
            owner = {"nativeUrl": peer.url, "brokerId": f"b{number}:8080"}
            nodes[f"/namespace/{namespace}/{bundle.name}"] = owner
            peer.topics[namespace] = [f"non-persistent://{namespace}/np-{peer.name}"]
    return nodes


@contextlib.asynccontextmanager
async def gateway(
    tmp_path: Path, nodes: dict[str, Any], settings: LinkSettings, *, max_concurrent: int = 100
) -> AsyncIterator[tuple[HttpServer, BrokerLink]]:
    path = tmp_path / "cluster.json"
    write_snapshot(path, nodes)
    source = FileSource(path, poll_interval=60)
    await source.start()
    service = LookupService(source, internal_listener="internal", max_concurrent=max_concurrent)
    service.configure_topics(AutoCreationSettings(), TopicLister())
    link = BrokerLink(service, settings)
    app = build_app(service, HttpSettings(None), broker_link=link)
    http = HttpServer(SocketSpec(Endpoint(Scheme.HTTP, HOST, 0), None, "http"), app)
    await http.start()
    try:
        yield http, link
    finally:
        await http.stop(5)
        await link.close()
        await source.close()


@contextlib.asynccontextmanager
async def peers(count: int, *, silent: bool = False) -> AsyncIterator[list[BrokerPeer]]:
    async with contextlib.AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(BrokerPeer(name=f"p{n}", silent=silent))
            for n in range(count)
        ]


def asked(group: list[BrokerPeer]) -> int:
    """Topic lists the peers of `group` were asked for (a silent peer records no namespace)."""
    return sum(peer.types_seen().count(LISTED) for peer in group)


async def asked_within(group: list[BrokerPeer], count: int, timeout: float) -> bool:
    """Whether the peers of `group` were asked for `count` lists in all within `timeout`
    (polled: a peer's own wait_for wakes on that peer's requests only)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while asked(group) < count:
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(0.01)
    return True


async def test_a_list_with_more_owners_than_the_pool_has_connections(tmp_path: Path) -> None:
    """Five owners, a pool of two: the list is whole (an owner beyond the pool's room gets a
    connection of the list's own, closed once answered), and the connection another request
    left in the pool is not closed to make room (its broker sees no second connection)."""
    async with peers(5) as owners, BrokerPeer(name="kept") as kept:
        nodes = owned_cluster({"public/default": owners, "public/other": [kept]})
        settings = LinkSettings(internal_listener="internal", max_connections=2)
        async with gateway(tmp_path, nodes, settings) as (http, link):
            before = await http_get(http, topics_path("public/other"))
            listed = await http_get(http, topics_path("public/default"))
            again = await http_get(http, topics_path("public/default", "ALL"))
            after = await http_get(http, topics_path("public/other"))
            pooled = link.connection_count
    expected = sorted(f"non-persistent://public/default/np-{peer.name}" for peer in owners)
    assert listed == (200, expected)
    assert again == (200, ["persistent://public/default/kept", *expected])
    assert before == after == (200, ["non-persistent://public/other/np-kept"])
    assert kept.connections == 1
    assert pooled <= 2
    assert [len(peer.topics_seen(LISTED)) for peer in owners] == [2] * 5


async def test_a_list_asks_a_few_owners_at_a_time_and_respects_the_cooldown(
    tmp_path: Path,
) -> None:
    """Four owners that never answer, two asked at a time: the list fails at its deadline
    having asked two; those two are in their failure cooldown, so the next list fails at once
    without asking anyone (no connect, no request)."""
    async with peers(4, silent=True) as owners:
        nodes = owned_cluster({"public/default": owners})
        settings = LinkSettings(internal_listener="internal", request_timeout=0.5, fan_out=2)
        async with gateway(tmp_path, nodes, settings) as (http, link):
            first = await http_get(http, topics_path("public/default"))
            asked_first = asked(owners)
            failed = [peer for peer in owners if link.broker_failed(peer.url)]
            second = await http_get(http, topics_path("public/default"))
    assert first[0] == 503 and second[0] == 503
    assert asked_first == 2 and len(failed) == 2
    assert "failed recently" in second[1]["reason"]
    assert asked(owners) == 2
    assert sum(peer.connections for peer in owners) == 2


async def test_all_lists_together_ask_at_most_fan_out_total_brokers_at_once(
    tmp_path: Path,
) -> None:
    """Two lists at once, three silent owners each, at most two asks over all lists: while
    both wait on their owners, two brokers have been asked in all (the rest wait for a place
    until their list's deadline)."""
    async with peers(3, silent=True) as left, peers(3, silent=True) as right:
        everyone = left + right
        nodes = owned_cluster({"public/left": left, "public/right": right})
        settings = LinkSettings(internal_listener="internal", request_timeout=WAIT, fan_out_total=2)
        async with gateway(tmp_path, nodes, settings) as (http, _):
            lists = asyncio.gather(
                http_get(http, topics_path("public/left")),
                http_get(http, topics_path("public/right")),
            )
            two = await asked_within(everyone, 2, WAIT)
            # (a third ask would come at once: nothing else holds it back until the deadline)
            more = await asked_within(everyone, 3, SETTLE)
            for peer in everyone:  # (the lists fail now, not at their deadline)
                await peer.stop()
            answers = await lists
    assert two and not more
    assert [status for status, _ in answers] == [503, 503]


async def test_lists_are_counted_against_max_concurrent_lookups(tmp_path: Path) -> None:
    """maxConcurrentLookupRequest: a list waiting on its owner holds a place (a lookup made
    meanwhile is refused), and a persistent list is refused when there is none."""
    async with BrokerPeer(name="slow", silent=True) as slow:
        nodes = owned_cluster({"public/default": [slow]})
        settings = LinkSettings(internal_listener="internal")
        async with gateway(tmp_path / "one", nodes, settings, max_concurrent=1) as (http, _):
            listing = asyncio.ensure_future(http_get(http, topics_path("public/default")))
            assert await slow.wait_for(lambda peer: asked([peer]) > 0, WAIT)
            lookup = await http_get(http, "/lookup/v2/topic/persistent/public/default/kept")
            await slow.stop()  # (the list fails now, not at its deadline)
            listed = await listing
        async with gateway(tmp_path / "none", nodes, settings, max_concurrent=0) as (http, _):
            persistent = await http_get(http, topics_path("public/default", "PERSISTENT"))
    assert listed[0] == 503
    assert lookup[0] == 503 and "Too many concurrent lookups" in lookup[1]["reason"]
    assert persistent[0] == 503 and "Too many concurrent lookups" in persistent[1]["reason"]


@contextlib.contextmanager
def calls_of(function: Any) -> Iterator[list[int]]:
    """Counts the calls of `function` made in this thread meanwhile (the gateway's loop is the
    test's): a profile hook, which changes nothing of what runs."""
    code = function.__code__
    count = [0]

    def profile(frame: FrameType, event: str, _: Any) -> None:
        if event == "call" and frame.f_code is code:
            count[0] += 1

    sys.setprofile(profile)
    try:
        yield count
    finally:
        sys.setprofile(None)


async def test_the_persistent_list_is_built_once_and_only_when_asked(tmp_path: Path) -> None:
    """The persistent part comes from the topic lister's cache (rebuilt only when the
    namespace's children change), kept apart with and without system topics, and is not
    built at all for mode NON_PERSISTENT."""
    async with BrokerPeer(name="owner") as owner:
        nodes = owned_cluster({"public/default": [owner]})
        nodes["/managed-ledgers/public/default/persistent/__change_events"] = {}
        settings = LinkSettings(internal_listener="internal")
        async with gateway(tmp_path, nodes, settings) as (http, _):
            with calls_of(topics_in_steps) as non_persistent:
                np = await http_get(http, topics_path("public/default"))
            with calls_of(topics_in_steps) as repeated:
                plain = [await http_get(http, topics_path("public/default", "ALL")) for _ in "12"]
            with calls_of(topics_in_steps) as with_system:
                system = [
                    await http_get(
                        http, topics_path("public/default", "ALL") + "&includeSystemTopic=true"
                    )
                    for _ in "12"
                ]
                system += [
                    await http_get(
                        http,
                        topics_path("public/default", "PERSISTENT") + "&includeSystemTopic=true",
                    )
                ]
    assert np == (200, ["non-persistent://public/default/np-owner"])
    assert (
        plain[0]
        == plain[1]
        == (
            200,
            ["persistent://public/default/kept", "non-persistent://public/default/np-owner"],
        )
    )
    with_change_events = [
        "persistent://public/default/__change_events",
        "persistent://public/default/kept",
    ]
    assert (
        system[0]
        == system[1]
        == (
            200,
            [*with_change_events, "non-persistent://public/default/np-owner"],
        )
    )
    assert system[2] == (200, with_change_events)
    assert (non_persistent[0], repeated[0], with_system[0]) == (0, 1, 1)
