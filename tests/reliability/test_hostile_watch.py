"""Hostile ownership-watch clients against a gateway in a child process (its memory and loop are
its own): requests whose work is out of proportion to their size, clients that never read.

Before the fixes, one 1 MB subscribe of 340,000 empty names had every name answered (a task
scheduled per name past the 1,024 unsent answers): the loop stalled ~26 s and the gateway's
peak grew ~1.5 GB."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from pulsar_lookup_gateway.metadata_store.synthetic import cluster
from tests.integration.serving.test_ownership_watch import (
    FIRST,
    IN_FIRST,
    Watcher,
    watching,
)
from tests.reliability.child_gateway import MIB, ChildGateway

# The peak may grow this much for the whole attack (measured: a few MiB; before: ~1.5 GB).
GROWTH_BOUND = 64 * MIB


class WatchGateway(ChildGateway):
    """A child gateway with one HTTP socket (the watch's) serving a file snapshot."""

    LISTENERS = (
        "advertisedListeners=external:pulsar://127.0.0.2:6650,external:http://127.0.0.2:8080\n"
        "bindAddresses=external:http://127.0.0.1:0\n"
    )
    SOCKET = ("http", "external")

    def metric(self, name: str, labels: str = "") -> float:
        url = f"http://127.0.0.1:{self.port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        wanted = name + (f"{{{labels}}}" if labels else "")
        for line in text.splitlines():
            if line.startswith(wanted + " "):
                return float(line.split()[-1])
        return 0.0


def subscribe_frame(names: list[str]) -> str:
    return json.dumps({"type": "subscribe", "topics": names}, separators=(",", ":"))


async def served(port: int) -> None:
    """Another client subscribes and is answered."""
    async with watching(port) as bystander:
        await bystander.subscribe(IN_FIRST)
        assert (await bystander.next())["type"] == "owner"


async def errors_until_quiet(watcher: Watcher, topic: str) -> list[dict[str, Any]]:
    """The stream's messages up to the answer about `topic` (subscribed after them)."""
    await watcher.subscribe(topic)
    seen = []
    while (message := await watcher.next()).get("topic") != topic:
        seen.append(message)
    assert message["type"] == "owner"
    return seen


@pytest.mark.timeout(120)
async def test_a_subscribe_of_many_invalid_names_costs_little(tmp_path: Path) -> None:
    with WatchGateway(tmp_path, cluster(brokers=2, owned={FIRST: 1})) as gateway:
        port = gateway.port
        await served(port)  # (warm: the first lookup reads the snapshot)
        gateway.reset_peak()
        before = gateway.peak()
        async with watching(port) as over, watching(port) as invalid, watching(port) as long:
            # 1.02 MB: more names than a stream may watch, refused before any name is read
            await over.ws.send_str(subscribe_frame([""] * 340_000))
            # 10,000 invalid names (as many as a stream may watch): 16 told, then a count
            await invalid.ws.send_str(subscribe_frame([""] * 10_000))
            # ~1 MB of invalid names of ~100 characters (no topic part)
            names = [f"persistent://{'x' * 90}/{n}" for n in range(9_000)]
            await long.ws.send_str(subscribe_frame(names))
            await served(port)  # while the attack's frames are read

            code, seen = await over.closed()
            assert (code, [m["code"] for m in seen]) == (4008, ["limit_exceeded"])
            errors = await errors_until_quiet(invalid, IN_FIRST)
            assert len(errors) == 17
            assert {(m["type"], m["code"], m["topic"]) for m in errors} == {
                ("error", "invalid_topic", "")
            }
            assert "and 9983 more invalid names" in errors[-1]["message"]
            errors = await errors_until_quiet(long, IN_FIRST)
            assert len(errors) == 17
            assert max(len(m["topic"]) + len(m["message"]) for m in errors) < 1_200
        assert gateway.peak() - before < GROWTH_BOUND
        assert (
            gateway.metric(
                "pulsar_lookup_gateway_watch_streams_closed_total", 'reason="limit_exceeded"'
            )
            == 1
        )
        await served(port)
