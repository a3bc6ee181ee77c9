"""Issue 42: a namespace of 50,000 topics is listed as a broker lists it: a pattern matching 10
of them answers those 10 (filtered), where filtering stopped at 5 ms of CPU and answered all
50,000 unfiltered; and neither its first list nor the filtering holds the event loop: other
work gets turns all along (a bystander's lookups are answered meanwhile)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from pulsar_lookup_gateway.lookup.selection import ChoiceSource, ListenerChoice
from pulsar_lookup_gateway.lookup.topic_list import topics_hash
from pulsar_lookup_gateway.metadata_store.file import FileSource
from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
from pulsar_lookup_gateway.metadata_store.synthetic import cluster
from pulsar_lookup_gateway.serving.service import LookupService

TOPICS = 50_000
BIG = "big/many"
LEDGERS = f"/managed-ledgers/{BIG}/persistent"
EXTERNAL = ListenerChoice("external", ChoiceSource.SOCKET)


def nodes() -> dict[str, Any]:
    out = cluster(owned={"0x00000000_0x40000000": 1})
    out[f"/admin/policies/{BIG}"] = {}
    for n in range(TOPICS):
        out[f"{LEDGERS}/topic-{n:05d}"] = {}
    for n in range(10):
        out[f"{LEDGERS}/wanted-{n}"] = {}
    return out


async def test_a_big_namespace_is_filtered_without_holding_the_loop(tmp_path: Path) -> None:
    snapshot = tmp_path / "cluster.json"
    write_snapshot(snapshot, nodes())
    source = FileSource(snapshot, poll_interval=3600)
    await source.start()
    service = LookupService(source)
    bystander = "persistent://public/default/t0"
    await service.lookup(bystander, EXTERNAL, "test")  # cached from here on
    answered = 0
    done = asyncio.Event()

    async def bystand() -> None:
        nonlocal answered
        while not done.is_set():
            await service.lookup(bystander, EXTERNAL, "test")
            answered += 1
            await asyncio.sleep(0)

    try:
        running = asyncio.create_task(bystand())
        # The first listing of the namespace, with a pattern: the list is made, then matched.
        listing = await service.namespaces.topics_of_namespace(BIG, pattern=f"{BIG}/wanted-.*")
        during_first = answered
        again = await service.namespaces.topics_of_namespace(BIG, pattern=f"{BIG}/topic-0000.*")
        done.set()
        await running
        wanted = tuple(f"persistent://{BIG}/wanted-{n}" for n in range(10))
        assert (listing.filtered, listing.topics, listing.refused) == (True, wanted, None)
        assert listing.topics_hash == topics_hash(wanted)
        assert again.filtered and len(again.topics) == 10
        # The bystander was answered all along (a loop held for the whole listing would give
        # it one turn at most).
        assert during_first > 50
        assert answered > during_first
        # Without a pattern: the whole list, from the kept one.
        whole = await service.namespaces.topics_of_namespace(BIG)
        assert len(whole.topics) == TOPICS + 10 and not whole.filtered
    finally:
        done.set()
        await source.close()
