"""Listener names chosen by an attacker (security): control bytes, terminal escapes and 60 KB
names, thousands of times, over binary and HTTP. Each answer and each log line escapes and
cuts the name, and the log of thousands of refused lookups stays a few kilobytes (before: one
line per lookup, 152 MiB for a flood of 60 KB names before names were cut, ~0.5 MB after)."""

from __future__ import annotations

import logging
from pathlib import Path

import aiohttp
import pytest

from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import (
    BaseCommand,
    CommandLookupTopicResponse,
    ServerError,
)
from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
from pulsar_lookup_gateway.metadata_store.synthetic import cluster, topic_in_range
from tests.broker_peer import RawClient
from tests.gateways import config_from, running

TOPIC = topic_in_range(0, 0x40000000)
LOOKUPS = 2_000
HTTP_LOOKUPS = 300
# A name that breaks the rule in every way a log reader cares about.
EVIL = "ext\nernal\r\x1b[31mFAKE lookup Connect: listener=internal\x00" + "A" * 60_000
LOG_BUDGET = 64 * 1024  # bytes of log for all of it


@pytest.fixture
def gateway_text(tmp_path: Path) -> str:
    path = tmp_path / "cluster.json"
    write_snapshot(path, cluster(owned={"0x00000000_0x40000000": 1}))
    return (
        f"metadataStoreUrl=file:{path}\n"
        "advertisedListeners=internal:pulsar://127.0.0.1:6650,internal:http://127.0.0.1:8080\n"
        "bindAddresses=internal:pulsar://127.0.0.1:0,internal:http://127.0.0.1:0\n"
        "brokerServicePort=\nwebServicePort=\n"
    )


def logged_bytes(caplog: pytest.LogCaptureFixture) -> tuple[int, list[str]]:
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("lookup ")]
    return sum(len(line) + 1 for line in lines), lines


async def test_binary_names_are_escaped_cut_and_their_log_throttled(
    gateway_text: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with running(config_from(gateway_text)) as gateway:
        port = gateway.port_of("internal", "pulsar")
        async with await RawClient.open("127.0.0.1", port) as client:
            await client.handshake()
            for start in range(0, LOOKUPS, 100):
                client.send(
                    b"".join(
                        codec.lookup(TOPIC, n, advertised_listener_name=EVIL)
                        for n in range(start, start + 100)
                    )
                )
                for _ in range(100):
                    command = await client.expect(timeout=30)
                    assert command.type == BaseCommand.LOOKUP_RESPONSE
                    answer = command.lookupTopicResponse
                    assert answer.response == CommandLookupTopicResponse.Failed
                    assert answer.error == ServerError.ServiceNotReady  # as a broker says it
                    assert answer.message.isprintable()
                    assert len(answer.message) < 200
                    assert "\\n" in answer.message  # escaped, not dropped
            # the connection still answers a good lookup
            client.send(codec.lookup(TOPIC, LOOKUPS + 1))
            good = (await client.expect()).lookupTopicResponse
            assert good.response == CommandLookupTopicResponse.Connect
    size, lines = logged_bytes(caplog)
    print(f"\n{LOOKUPS} refused binary lookups: {len(lines)} log lines, {size} bytes")
    assert all(line.isprintable() for line in lines)
    assert 1 <= len(lines) <= 21
    assert size < LOG_BUDGET


async def test_http_names_are_escaped_cut_and_their_log_throttled(
    gateway_text: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    name = EVIL[:3000].replace("\x00", "%00").replace("\n", "%0A").replace("\r", "%0D")
    name = name.replace("\x1b", "%1B").replace(" ", "%20")
    async with running(config_from(gateway_text)) as gateway:
        port = gateway.port_of("internal", "http")
        local = TOPIC.rsplit("/", 1)[1]
        url = f"http://127.0.0.1:{port}/lookup/v2/topic/persistent/public/default/{local}"
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            for _ in range(HTTP_LOOKUPS):
                async with session.get(
                    f"{url}?listenerName={name}", headers={}, skip_auto_headers=()
                ) as reply:
                    body = await reply.json()
                    assert reply.status >= 400
                    assert body["reason"].isprintable() and len(body["reason"]) < 200
            async with session.get(url) as reply:
                assert reply.status == 200
    size, lines = logged_bytes(caplog)
    print(f"\n{HTTP_LOOKUPS} refused HTTP lookups: {len(lines)} log lines, {size} bytes")
    assert all(line.isprintable() for line in lines)
    assert 1 <= len(lines) <= 21
    assert size < LOG_BUDGET
