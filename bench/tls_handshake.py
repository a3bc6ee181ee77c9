"""The price of TLS on a NEW connection: TCP connect + TLS handshake + first lookup, against the
same first lookup over plaintext, measured in the same run.

    .venv/bin/python -m bench.tls_handshake [--duration 3] [--concurrency 8]

Every "connection" is a fresh TCP connection, a full TLS handshake (no session resumption; the
client verifies the certificate chain and the address), then for the binary protocol CONNECT /
CONNECTED and one LOOKUP / LOOKUP_RESPONSE, for HTTP one `GET /lookup/v2/topic/...` with
`Connection: close`; then the connection is closed. `--concurrency` such connections are in
flight at any time.

The servers are the gateway's own: BinaryServer and HttpServer on one LookupService over a
FileSource snapshot, TLS contexts from tls.reload.ListenerTls (as the gateway builds them, with
development certificates from tls.devcerts, ECDSA P-256 and RSA 2048), all in one child process
(one event loop). The load generator runs in this process. "server CPU" is the child's
user+system CPU time per connection over the measured window; it does not depend on how fast the
load generator is. Each TLS row's ratio is against the plaintext row of the same protocol.

A second table times the handshake alone, in this process over memory BIOs (no sockets, no
event loop): the server side's CPU per full handshake with the gateway's context (its
``sni_callback`` moves each handshake to the newest context) and with a plain context loaded
straight from the files. It shows how much of the per-connection cost is OpenSSL's own work.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import multiprocessing
import ssl
import struct
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bench.common import cluster_snapshot, cpu_seconds, measured_window, percentile, receive
from pulsar_lookup_gateway.http_api.app import build_app
from pulsar_lookup_gateway.http_api.server import HttpServer
from pulsar_lookup_gateway.http_api.settings import HttpSettings
from pulsar_lookup_gateway.listeners.binary import BinaryServer, BinarySettings
from pulsar_lookup_gateway.listeners.endpoints.addresses import Endpoint, Scheme
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import BaseCommand, LookupType
from pulsar_lookup_gateway.metadata_store.file import FileSource
from pulsar_lookup_gateway.serving.service import LookupService
from pulsar_lookup_gateway.tls.devcerts import write_dev_certs
from pulsar_lookup_gateway.tls.material import PemFiles
from pulsar_lookup_gateway.tls.reload import ListenerTls
from pulsar_lookup_gateway.tls.settings import TlsSettings

HOST = "127.0.0.1"
LISTENER = "external"
_HEADER = struct.Struct(">I")


@dataclass(frozen=True)
class Target:
    name: str
    server: str  # which server in the child: pulsar, pulsar+ssl-ec, pulsar+ssl-rsa, http, https-ec
    tls_version: ssl.TLSVersion | None  # None: plaintext
    baseline: str | None  # the row this one is compared with

    @property
    def binary(self) -> bool:
        return self.server.startswith("pulsar")


TARGETS = (
    Target("pulsar:// (plaintext)", "pulsar", None, None),
    Target("pulsar+ssl:// ECDSA P-256, TLS 1.3", "pulsar+ssl-ec", ssl.TLSVersion.TLSv1_3, "pulsar"),
    Target("pulsar+ssl:// ECDSA P-256, TLS 1.2", "pulsar+ssl-ec", ssl.TLSVersion.TLSv1_2, "pulsar"),
    Target("pulsar+ssl:// RSA 2048, TLS 1.3", "pulsar+ssl-rsa", ssl.TLSVersion.TLSv1_3, "pulsar"),
    Target("http:// (plaintext)", "http", None, None),
    Target("https:// ECDSA P-256, TLS 1.3", "https-ec", ssl.TLSVersion.TLSv1_3, "http"),
)


# --- the servers (child process) ---------------------------------------------------------------


def _tls(certs: Path) -> ListenerTls:
    settings = TlsSettings(
        certificate_file=str(certs / "server.crt"),
        key_file=str(certs / "server.key"),
        refresh_seconds=0,
    )
    return ListenerTls(LISTENER, settings, PemFiles(certs / "server.crt", certs / "server.key"))


def _serve(snapshot: str, certs: dict[str, str], pipe: Connection) -> None:
    asyncio.run(_serve_async(snapshot, certs, pipe))


async def _serve_async(snapshot: str, certs: dict[str, str], pipe: Connection) -> None:
    logging.basicConfig(level=logging.WARNING)
    loop = asyncio.get_running_loop()
    source = FileSource(snapshot, poll_interval=3600)
    await source.start()
    service = LookupService(source, internal_listener="internal")
    contexts = {kind: _tls(Path(path)).context for kind, path in certs.items()}
    settings = BinarySettings(keep_alive_interval=0, handshake_timeout=30)

    def spec(scheme: Scheme) -> SocketSpec:
        return SocketSpec(Endpoint(scheme, HOST, 0), LISTENER, "bench")

    def app() -> Any:
        return build_app(service, HttpSettings(LISTENER))

    servers: dict[str, BinaryServer | HttpServer] = {
        "pulsar": BinaryServer(spec(Scheme.PULSAR), service, settings),
        "pulsar+ssl-ec": BinaryServer(spec(Scheme.PULSAR_SSL), service, settings, contexts["ec"]),
        "pulsar+ssl-rsa": BinaryServer(spec(Scheme.PULSAR_SSL), service, settings, contexts["rsa"]),
        "http": HttpServer(spec(Scheme.HTTP), app()),
        "https-ec": HttpServer(spec(Scheme.HTTPS), app(), contexts["ec"]),
    }
    for server in servers.values():
        await server.start()
    stop = loop.create_future()
    cpu_at_begin = 0.0

    def on_message() -> None:
        nonlocal cpu_at_begin
        message = pipe.recv()
        if message == "begin":
            cpu_at_begin = cpu_seconds()
        elif message == "end":
            pipe.send(cpu_seconds() - cpu_at_begin)
        elif message == "stop" and not stop.done():
            stop.set_result(None)

    loop.add_reader(pipe.fileno(), on_message)
    pipe.send({name: server.port for name, server in servers.items()})
    await stop
    loop.remove_reader(pipe.fileno())
    for server in servers.values():
        await server.stop(timeout=5)
    await source.close()


# --- the load generator (this process) ---------------------------------------------------------


@dataclass
class Tally:
    recording: bool = False
    done: int = 0
    failed: int = 0

    def __post_init__(self) -> None:
        self.latencies: list[float] = []


async def _binary_once(port: int, context: ssl.SSLContext | None, topic: str) -> bool:
    reader, writer = await asyncio.open_connection(
        HOST, port, ssl=context, server_hostname=HOST if context else None
    )
    try:
        writer.write(codec.connect("bench", 21))
        if (await _frame(reader)).type != BaseCommand.CONNECTED:
            return False
        writer.write(codec.lookup(topic, 1))
        answer = await _frame(reader)
        return bool(answer.lookupTopicResponse.response == LookupType.Connect)
    finally:
        writer.close()


async def _frame(reader: asyncio.StreamReader) -> BaseCommand:
    (size,) = _HEADER.unpack(await reader.readexactly(4))
    body = await reader.readexactly(size)
    (command_size,) = _HEADER.unpack_from(body)
    return BaseCommand.FromString(body[4 : 4 + command_size])


async def _http_once(port: int, context: ssl.SSLContext | None, topic: str) -> bool:
    reader, writer = await asyncio.open_connection(
        HOST, port, ssl=context, server_hostname=HOST if context else None
    )
    try:
        path = "/lookup/v2/topic/" + topic.replace("://", "/")
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\nConnection: close\r\n\r\n".encode()
        )
        response = await reader.read()  # until the server closes
        return response.startswith(b"HTTP/1.1 200")
    finally:
        writer.close()


async def _worker(
    target: Target,
    port: int,
    context: ssl.SSLContext | None,
    topics: list[str],
    offset: int,
    tally: Tally,
    running: asyncio.Event,
) -> None:
    once = _binary_once if target.binary else _http_once
    n = offset
    while running.is_set():
        started = time.perf_counter()
        try:
            ok = await asyncio.wait_for(once(port, context, topics[n % len(topics)]), 30)
        except (OSError, asyncio.IncompleteReadError, ssl.SSLError, TimeoutError):
            ok = False
        n += 1
        if tally.recording:
            if ok:
                tally.done += 1
                tally.latencies.append(time.perf_counter() - started)
            else:
                tally.failed += 1


@dataclass(frozen=True)
class Result:
    target: Target
    per_second: float
    p50_ms: float
    p99_ms: float
    server_cpu_us: float
    client_cpu_us: float
    failed: int


def _client_context(ca: Path, version: ssl.TLSVersion | None) -> ssl.SSLContext | None:
    if version is None:
        return None
    context = ssl.create_default_context(cafile=str(ca))
    context.minimum_version = context.maximum_version = version
    return context


async def _measure(
    target: Target,
    port: int,
    ca: Path,
    topics: list[str],
    parent: Connection,
    args: argparse.Namespace,
) -> Result:
    context = _client_context(ca, target.tls_version)
    tally, running = Tally(), asyncio.Event()
    running.set()
    workers = [
        asyncio.create_task(_worker(target, port, context, topics, i * 97, tally, running))
        for i in range(args.concurrency)
    ]
    await asyncio.sleep(args.warmup)
    elapsed, client_cpu, cpu = await measured_window(parent, tally, args.duration)
    running.clear()
    await asyncio.wait_for(asyncio.gather(*workers), 60)
    count = max(tally.done + tally.failed, 1)
    return Result(
        target,
        tally.done / elapsed,
        percentile(tally.latencies, 0.50) * 1000,
        percentile(tally.latencies, 0.99) * 1000,
        cpu / count * 1e6,
        client_cpu / count * 1e6,
        tally.failed,
    )


async def run(args: argparse.Namespace) -> list[Result]:
    with tempfile.TemporaryDirectory() as tmp:
        snapshot = Path(tmp) / "cluster.json"
        topics = cluster_snapshot(snapshot)
        certs = {kind: Path(tmp) / kind for kind in ("ec", "rsa")}
        cas = {kind: write_dev_certs(path, key_type=kind).ca_cert for kind, path in certs.items()}
        spawn = multiprocessing.get_context("spawn")
        parent, child = spawn.Pipe()
        process = spawn.Process(
            target=_serve,
            args=(str(snapshot), {kind: str(path) for kind, path in certs.items()}, child),
            name="bench-tls-servers",
        )
        process.start()
        loop = asyncio.get_running_loop()
        try:
            ports = await loop.run_in_executor(None, receive, parent, 60.0)
            results = []
            for target in TARGETS:
                ca = cas["rsa" if target.server.endswith("rsa") else "ec"]
                results.append(
                    await _measure(target, ports[target.server], ca, topics, parent, args)
                )
            return results
        finally:
            parent.send("stop")
            await loop.run_in_executor(None, process.join, 30)
            if process.is_alive():
                process.terminate()


def handshake_cpu(certs: Path, context: ssl.SSLContext, rounds: int = 300) -> float:
    """Server-side CPU microseconds per full TLS 1.3 handshake over memory BIOs."""
    client = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    spent = 0.0
    for i in range(rounds + 20):  # the first 20 warm up
        server_in, server_out, client_in, client_out = (ssl.MemoryBIO() for _ in range(4))
        server = context.wrap_bio(server_in, server_out, server_side=True)
        peer = client.wrap_bio(client_in, client_out, server_hostname=HOST)
        server_done = client_done = False
        while not (server_done and client_done):
            with contextlib.suppress(ssl.SSLWantReadError):
                peer.do_handshake()
                client_done = True
            server_in.write(client_out.read())
            started = time.process_time()
            with contextlib.suppress(ssl.SSLWantReadError):
                server.do_handshake()
                server_done = True
            if i >= 20:
                spent += time.process_time() - started
            client_in.write(server_out.read())
    return spent / rounds * 1e6


def handshake_table(directory: Path) -> str:
    rows = [
        "| server key | handshake only, server CPU us: gateway context | plain context |",
        "|---|---|---|",
    ]
    for kind, label in (("ec", "ECDSA P-256"), ("rsa", "RSA 2048")):
        certs = directory / kind
        plain = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        plain.load_cert_chain(certs / "server.crt", certs / "server.key")
        ours = handshake_cpu(certs, _tls(certs).context)
        rows.append(f"| {label} | {ours:.0f} | {handshake_cpu(certs, plain):.0f} |")
    return "\n".join(rows)


def table(results: list[Result], args: argparse.Namespace) -> str:
    rows = [
        f"{args.concurrency} new connections in flight, {args.duration:g} s measured per row",
        "",
        "| connection + first lookup | per second | p50 ms | p99 ms | server CPU us/connection "
        "| load generator CPU us/connection | per-second ratio | server CPU ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    by_server = {r.target.server: r for r in results if r.target.baseline is None}
    for r in results:
        ratios = "| | |"
        base = by_server.get(r.target.baseline or "")
        if base is not None:
            ratios = (
                f"| **{r.per_second / base.per_second:.2f}** "
                f"| **{r.server_cpu_us / base.server_cpu_us:.1f}x** |"
            )
        rows.append(
            f"| {r.target.name} | {r.per_second:,.0f} | {r.p50_ms:.2f} | {r.p99_ms:.2f} "
            f"| {r.server_cpu_us:.0f} | {r.client_cpu_us:.0f} {ratios}"
        )
    return "\n".join(rows)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tls_handshake", description=__doc__)
    parser.add_argument("--concurrency", type=int, default=8, help="connections in flight")
    parser.add_argument("--duration", type=float, default=3.0, help="seconds measured per row")
    parser.add_argument("--warmup", type=float, default=0.5)
    args = parser.parse_args(argv)
    results = asyncio.run(run(args))
    print(table(results, args))
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("ec", "rsa"):
            write_dev_certs(Path(tmp) / kind, key_type=kind)
        print()
        print(handshake_table(Path(tmp)))
    failed = sum(r.failed for r in results)
    if failed:
        print(f"\n{failed} connections failed")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
