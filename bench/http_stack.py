"""What the gateway's HTTP wrapper costs over plain aiohttp, without the kernel's share and
without the noise of a shared machine: the whole server stack in one process, fed through
in-memory transports.

    .venv/bin/python -m bench.http_stack [--chunks 30] [--connections 32] [--requests 150]

Three servers answer the same `GET /lookup/v2/topic/...` with the same bytes (bench.http_lookup
builds them): a plain aiohttp application (AppRunner, TCPSite), the same fixed-body handler
behind the gateway's HttpServer (accept guard, head deadline, client location, request class),
and the gateway's own application (listener choice, memo of warm answers, metrics). Each gets
`--connections` connections made by its listening socket's own protocol factory over an
in-memory transport; a round feeds every connection one request and runs the loop until every
answer is written. aiohttp parses, routes, answers and serializes as on a socket; there is no
system call. Chunks of `--requests` rounds alternate between the servers (order reversed every
chunk) and the CPU time of each (time.process_time) is divided by its requests; the minimum
over chunks is the figure (what the work costs when nothing else interrupts it), the median is
shown beside it.

With sockets (bench.http_lookup) each request also costs the kernel's reads, writes and epoll
(~20 us here, the same for both servers), so a ratio measured here is lower than the one on
sockets: it is the wrapper's share of the Python work only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.http_lookup import OWNED, PATH, _baseline, _gateway, _Plain, _reference_body
from pulsar_lookup_gateway.metadata_store.synthetic import cluster

REQUEST = f"GET {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: bench\r\n\r\n".encode()
KINDS = (
    ("plain", "plain aiohttp app, fixed body"),
    ("server", "fixed body behind the gateway's HttpServer"),
    ("gateway", f"gateway GET {PATH}"),
)


class _MemoryTransport(asyncio.Transport):
    """A connected socket that counts what it is asked to send."""

    def __init__(self, sent: list[int]) -> None:
        super().__init__()
        self._sent = sent
        self._closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 8080)}.get(
            name, default
        )

    def write(self, data: Any) -> None:
        self._sent[0] += 1

    def writelines(self, data: Any) -> None:
        self._sent[0] += 1

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self._closing = True

    def abort(self) -> None:
        self._closing = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass


class _Served:
    """One server's connections over memory transports; a round asks each one request."""

    def __init__(self, factory: Callable[[], asyncio.Protocol], connections: int) -> None:
        self.sent = [0]
        self.protocols = []
        for _ in range(connections):
            protocol = factory()
            protocol.connection_made(_MemoryTransport(self.sent))
            self.protocols.append(protocol)

    async def cpu_per_request(self, rounds: int) -> float:
        """Microseconds of this process's CPU per request over `rounds` rounds."""
        started = time.process_time()
        for _ in range(rounds):
            answered = self.sent[0] + len(self.protocols)
            for protocol in self.protocols:
                protocol.data_received(REQUEST)
            while self.sent[0] < answered:  # (one write per answer: head and body together)
                await asyncio.sleep(0)
        return (time.process_time() - started) / (rounds * len(self.protocols)) * 1e6


async def _serve(kind: str, snapshot: Path, body: bytes, connections: int) -> _Served:
    if kind == "plain":
        plain = _Plain(body)
        await plain.start()
        site = next(iter(plain._runner.sites))
        server = site._server
        assert isinstance(server, asyncio.base_events.Server)
        return _Served(server._protocol_factory, connections)  # type: ignore[attr-defined]
    http = (await _gateway(snapshot))[0] if kind == "gateway" else await _baseline(body)
    await http.start()
    listening = http._listening
    assert isinstance(listening, asyncio.base_events.Server)
    return _Served(listening._protocol_factory, connections)  # type: ignore[attr-defined]


async def measure(args: argparse.Namespace) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as directory:
        snapshot = Path(directory) / "snapshot.json"
        snapshot.write_text(json.dumps(cluster(3, OWNED)))
        body = await _reference_body(snapshot)
        served = {kind: await _serve(kind, snapshot, body, args.connections) for kind, _ in KINDS}
        for each in served.values():  # warm-up: the memo filled, caches made
            await each.cpu_per_request(args.requests)
        figures: dict[str, list[float]] = {kind: [] for kind, _ in KINDS}
        order = [kind for kind, _ in KINDS]
        for chunk in range(args.chunks):
            for kind in order if chunk % 2 == 0 else order[::-1]:
                figures[kind].append(await served[kind].cpu_per_request(args.requests))
        return figures


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.http_stack", description=__doc__)
    parser.add_argument("--chunks", type=int, default=30, help="chunks per server (alternating)")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--requests", type=int, default=150, help="rounds per chunk")
    args = parser.parse_args(argv)
    figures = asyncio.run(measure(args))
    plain = min(figures["plain"])
    print("| server | CPU µs/request: min (median) | over plain aiohttp µs | plain ÷ this |")
    print("|---|---:|---:|---:|")
    for kind, name in KINDS:
        best = min(figures[kind])
        print(
            f"| {name} | {best:.2f} ({statistics.median(figures[kind]):.2f}) | "
            f"{best - plain:+.2f} | {plain / best:.3f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
