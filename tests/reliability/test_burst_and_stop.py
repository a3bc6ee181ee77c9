"""A burst above maxConcurrentLookupRequest, and SIGTERM under load.

Lookups stay in flight while ZooKeeper is frozen (SIGSTOP): the namespace they need appeared
after the gateway read every namespace ahead and has never been read, so each one waits for the
same ZooKeeper read. The fictional brokers listen nowhere (tests.unreachable_brokers): a lookup
the gateway forwards to one is refused at once, whatever the machine has at 10.0.0.x.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import (
    BaseCommand,
    CommandLookupTopicResponse,
    ServerError,
)
from pulsar_lookup_gateway.metadata_store.admin import connected, seed
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper
from pulsar_lookup_gateway.metadata_store.synthetic import cluster
from tests.broker_peer import RawClient
from tests.processes import Running
from tests.reliability.harness import binary_port, gateway_on, http_url
from tests.unreachable_brokers import unreachable

pytestmark = pytest.mark.zookeeper

MAX_IN_FLIGHT = 50
COLD = "persistent://acme/cold/t"  # its namespace is only read when a lookup needs it


def cold_nodes() -> dict[str, object]:
    return dict(cluster(namespace="acme/cold", owned={"0x00000000_0x40000000": 2}))


@pytest.fixture
def frozen_zk() -> Iterator[EmbeddedZooKeeper]:
    with EmbeddedZooKeeper() as server:
        yield server


async def read_replies(client: RawClient, count: int, timeout: float) -> list[BaseCommand]:
    replies: list[BaseCommand] = []
    while len(replies) < count:
        command = await client.receive(timeout)
        assert isinstance(command, BaseCommand), f"connection ended after {len(replies)}"
        if command.type == BaseCommand.LOOKUP_RESPONSE:
            replies.append(command)
    return replies


async def test_a_burst_above_the_limit_is_refused_and_every_accepted_lookup_answered(
    frozen_zk: EmbeddedZooKeeper, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pulsar_lookup_gateway.serving.service")
    extra = f"maxConcurrentLookupRequest={MAX_IN_FLIGHT}\n"
    base = cluster(owned={"0x00000000_0x40000000": 1})
    async with gateway_on(frozen_zk, base, extra) as gateway, aiohttp.ClientSession() as http:
        # The cold namespace appears after the gateway read every namespace ahead (on start),
        # so its lookups wait for ZooKeeper.
        with connected(frozen_zk.connect_string) as admin:
            seed(admin, cold_nodes())
        await asyncio.sleep(0.5)  # (the gateway hears the new tenant; it reads nothing of it)
        # Admission alone: an unowned bundle's lookup answers Redirect here, not forwarded to
        # these fictional brokers (issue 40), so what is admitted is answered without one.
        gateway.service.forwarded = None
        port = binary_port(gateway)
        clients = [await RawClient.open("127.0.0.1", port) for _ in range(8)]
        for client in clients:
            await client.handshake()
        frozen_zk.pause()
        try:
            per_client = 50  # 400 binary lookups, pipelined, plus 100 HTTP lookups
            for n, client in enumerate(clients):
                client.send(
                    b"".join(
                        codec.lookup(f"{COLD}-{n}-{i}", request_id=i + 1) for i in range(per_client)
                    )
                )
            url = http_url(gateway, "/lookup/v2/topic/persistent/acme/cold/h")

            async def http_lookup() -> int:
                async with http.get(url, allow_redirects=False) as response:
                    await response.read()
                    return response.status

            http_calls = [asyncio.create_task(http_lookup()) for _ in range(100)]
            await asyncio.sleep(0.5)  # everything above the limit is refused by now
            assert gateway.service.admission.pending == MAX_IN_FLIGHT
            async with http.get(http_url(gateway, "/metrics")) as metrics:
                exposition = await metrics.text()
            assert f"pulsar_broker_lookup_pending_requests {MAX_IN_FLIGHT}.0" in exposition
            # Partition metadata counts against the same limit, as in Pulsar.
            partitions = http_url(gateway, "/admin/v2/persistent/acme/cold/h/partitions")
            async with http.get(partitions) as partitions_refused:
                assert partitions_refused.status == 503
        finally:
            frozen_zk.resume()
        outcomes: Counter[str] = Counter()
        for client in clients:
            for reply in await read_replies(client, per_client, timeout=15):
                body = reply.lookupTopicResponse
                failed = body.response == CommandLookupTopicResponse.Failed
                outcomes[ServerError.Name(body.error) if failed else "answered"] += 1
            await client.close()
        for status in await asyncio.gather(*http_calls):
            outcomes[f"HTTP {status}"] += 1

    assert sum(outcomes.values()) == 500  # every lookup got an answer
    admitted = outcomes["answered"] + outcomes["HTTP 200"] + outcomes["HTTP 307"]
    refused = outcomes["TooManyRequests"] + outcomes["HTTP 503"]
    assert admitted == MAX_IN_FLIGHT, outcomes
    assert refused == 500 - MAX_IN_FLIGHT, outcomes
    # the refusals are logged, but a burst of them is one line (with a count) per interval
    overload_lines = [r for r in caplog.records if "maxConcurrentLookupRequest" in r.getMessage()]
    assert 1 <= len(overload_lines) <= 2, [r.getMessage() for r in overload_lines]
    print(f"\nburst: {dict(outcomes)}")


def test_sigterm_under_load_answers_in_flight_refuses_new_and_exits_0(
    frozen_zk: EmbeddedZooKeeper, tmp_path: Path
) -> None:
    with connected(frozen_zk.connect_string) as admin:
        seed(admin, unreachable(cluster(owned={"0x00000000_0x40000000": 1})))
    conf = tmp_path / "g.conf"
    conf.write_text(
        f"metadataStoreUrl=zk:{frozen_zk.connect_string}\n"
        "advertisedListeners=internal:pulsar://127.0.0.1:6650\n"
        "bindAddresses=internal:pulsar://127.0.0.1:0\n"
        "brokerServicePort=\nwebServicePort=\n"
    )
    gateway = Running("run", "--config", str(conf), sockets=1)
    port = int(gateway.urls[("pulsar", "internal")].rsplit(":", 1)[1])

    async def scenario() -> tuple[list[BaseCommand], bool]:
        client = await RawClient.open("127.0.0.1", port)
        await client.handshake()
        # The cold namespace appears after the gateway read every namespace ahead (on start),
        # so the lookups below wait for ZooKeeper (read ahead, they were answered at once).
        with connected(frozen_zk.connect_string) as admin:
            seed(admin, unreachable(cold_nodes()))
        await asyncio.sleep(0.5)  # (the gateway hears the new tenant; it reads nothing of it)
        frozen_zk.pause()
        try:
            client.send(b"".join(codec.lookup(f"{COLD}-{i}", i + 1) for i in range(20)))
            await asyncio.sleep(0.3)  # all 20 are in flight, waiting for ZooKeeper
            gateway.process.send_signal(signal.SIGTERM)
            refused = await refused_soon(port)
        finally:
            frozen_zk.resume()
        replies = await read_replies(client, 20, timeout=15)
        await client.close()
        return replies, refused

    replies, refused = asyncio.run(scenario())
    started = time.monotonic()
    code = gateway.process.wait(timeout=30)
    exit_seconds = time.monotonic() - started
    assert refused, "the gateway still accepted connections after SIGTERM"
    # Every in-flight lookup was answered after the stop began: Connect, or for an unowned
    # bundle the broker link's own answer (forwarded to a fictional broker, issue 40, where
    # nothing listens: it fails as an unreachable broker does), never dropped nor failed by the
    # stop.
    kinds = {r.lookupTopicResponse.response for r in replies}
    assert CommandLookupTopicResponse.Connect in kinds
    for reply in replies:
        body = reply.lookupTopicResponse
        if body.response == CommandLookupTopicResponse.Failed:
            assert body.error == ServerError.ServiceNotReady, body
            assert "broker" in body.message, body
    assert code == 0
    print(f"\nSIGTERM under load: 20 in-flight lookups answered; exited 0 in {exit_seconds:.2f}s")


async def refused_soon(port: int) -> bool:
    for _ in range(100):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                pass
        except ConnectionRefusedError:
            return True
        await asyncio.sleep(0.05)
    return False
