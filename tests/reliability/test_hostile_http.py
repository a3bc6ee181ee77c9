"""Hostile HTTP clients against a whole gateway (issue 13, item 6): descriptors exhausted by an
accept storm, and a socket filled with silent connections. Bounded in count and time; the
figures measured are printed (pytest -s)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import resource
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import aiohttp
import pytest

from pulsar_lookup_gateway.http_api.server import HttpServer
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper
from pulsar_lookup_gateway.metadata_store.synthetic import cluster
from tests.neighbours import refusals
from tests.processes import DEMO, EXE, LISTENING
from tests.reliability.harness import gateway_on, http_url

SOFT_LIMIT, HARD_LIMIT = 48, 96  # the gateway's descriptors: soft raised to hard at start
STORM = 300  # connections opened against it, several times what it can accept
STORM_SECONDS = 3.5  # asyncio retries a failed accept every second: a few rounds of failures


def _low_file_limit() -> None:  # runs in the child, before exec
    resource.setrlimit(resource.RLIMIT_NOFILE, (SOFT_LIMIT, HARD_LIMIT))


def _wait_for_sockets(log: Path, process: subprocess.Popen[bytes], count: int) -> dict[str, int]:
    """scheme -> port once `count` sockets logged that they listen (bounded)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        found = LISTENING.findall(log.read_text(errors="replace"))
        if len(found) >= count:
            return {url.split("://")[0]: int(url.rsplit(":", 1)[1]) for url, _, _ in found}
        time.sleep(0.05)
    raise AssertionError(f"the gateway did not start:\n{log.read_text(errors='replace')}")


def _health(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
        return int(response.status)


def test_an_accept_storm_with_descriptors_exhausted_logs_a_few_lines(tmp_path: Path) -> None:
    """Before: asyncio logged a traceback for every failed accept, up to the backlog (1024)
    per retry and socket (the probe saw 188k tracebacks, 83 MB, in 8 s)."""
    conf = tmp_path / "storm.conf"
    conf.write_text(
        f"metadataStoreUrl=file:{DEMO}\n"
        "advertisedListeners=internal:pulsar://127.0.0.1:6650\n"
        "bindAddresses=internal:pulsar://127.0.0.1:0,internal:http://127.0.0.1:0\n"
        "brokerServicePort=\nwebServicePort=\n"
        # neither cap nor deadline may free descriptors during the storm: the test closes them
        "maxHttpServerConnections=0\nbrokerMaxConnections=0\n"
        "connectionHandshakeTimeoutSeconds=120\n"
    )
    log = tmp_path / "gateway.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [EXE, "run", "--config", str(conf)],
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_low_file_limit,
        )
    clients: list[socket.socket] = []
    try:
        ports = _wait_for_sockets(log, process, 2)
        started_lines = len(log.read_text(errors="replace").splitlines())
        for n in range(STORM):  # the kernel completes them into the backlog either way
            port = ports["http"] if n % 3 else ports["pulsar"]
            clients.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        time.sleep(STORM_SECONDS)
        storm_log = log.read_text(errors="replace").splitlines()[started_lines:]
        for client in clients:
            client.close()
        clients.clear()
        recovered_at = time.monotonic()
        status = 0
        while time.monotonic() - recovered_at < 30:
            with contextlib.suppress(OSError):
                status = _health(ports["http"])
                break
            time.sleep(0.2)
        recovery = time.monotonic() - recovered_at
    finally:
        for client in clients:
            client.close()
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    text = log.read_text(errors="replace")
    accept_lines = [line for line in storm_log if "cannot accept connections" in line]
    failures = re.search(r"(\d+) accepts failed for want of resources", text)
    print(
        f"\naccept storm: RLIMIT_NOFILE {SOFT_LIMIT}/{HARD_LIMIT}, {STORM} connections, "
        f"{STORM_SECONDS}s: {failures and failures.group(1)} failed accepts, "
        f"{len(storm_log)} log lines ({sum(map(len, storm_log))} bytes), "
        f"{len(accept_lines)} about them; /health {status} {recovery:.2f}s after "
        f"the clients closed; {len(text.splitlines())} log lines in all"
    )
    assert re.search(rf"open files limit \(RLIMIT_NOFILE\): {HARD_LIMIT}\b", text), text
    assert 1 <= len(accept_lines) <= 2, "\n".join(storm_log)  # it ran out, and said so once
    assert "Too many open files" in accept_lines[0]
    assert "Traceback" not in text  # not during the storm, nor at stop
    assert failures is not None and int(failures.group(1)) >= 1
    assert len(storm_log) < 20, "\n".join(storm_log)
    assert status == 200
    assert code == 0, text


@pytest.mark.zookeeper
async def test_silent_connections_lock_clients_out_for_one_deadline_at_most(
    zookeeper: EmbeddedZooKeeper,
) -> None:
    """The socket's cap filled with connections that never send a request: newcomers are
    refused at once, and served again once the handshake deadline closed the silent ones."""
    cap, flood, deadline = 50, 200, 1.0
    extra = f"maxHttpServerConnections={cap}\nconnectionHandshakeTimeoutSeconds={deadline}\n"
    async with (
        gateway_on(zookeeper, cluster(owned={"0x00000000_0x40000000": 1}), extra) as gateway,
        aiohttp.ClientSession() as session,
    ):
        server = next(s for _, s in gateway.servers if isinstance(s, HttpServer))
        port = gateway.port_of("internal", "http")
        started = time.monotonic()
        silent = [await asyncio.open_connection("127.0.0.1", port) for _ in range(flood)]
        held = server.connection_count
        served_after = None
        attempts = 0
        while time.monotonic() - started < deadline + 10:
            attempts += 1
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(http_url(gateway, "/health")) as response:
                    if response.status == 200:
                        served_after = time.monotonic() - started
                        break
            await asyncio.sleep(0.05)
        for _ in range(400):  # every silent one goes at its deadline (bounded wait)
            if server.timed_out_connections >= cap:
                break
            await asyncio.sleep(0.05)
        for _, writer in silent:
            writer.close()
        refused, timed_out = server.refused_connections, server.timed_out_connections
        registry = gateway.service.metrics.registry
        counted = {
            reason: refusals(registry, "internal", reason)
            for reason in ("max-connections", "request-head-timeout")
        }
    print(
        f"\nsilent flood: cap {cap}, {flood} connections: {held} held, {refused} refused at "
        f"accept, {timed_out} closed at the {deadline}s deadline; a client was served "
        f"{served_after and round(served_after, 2)}s after the flood began ({attempts} attempts)"
    )
    assert held == cap
    # Every silent connection is refused at accept or closed at its deadline. How many of each
    # depends on the machine's pace: one the kernel queued while the cap was full and the
    # gateway accepted after the first deadlines freed room is closed at its own deadline.
    assert cap <= timed_out <= flood
    assert refused + timed_out >= flood
    assert served_after is not None
    # the same refusals, as /metrics shows them
    assert counted == {"max-connections": refused, "request-head-timeout": timed_out}
