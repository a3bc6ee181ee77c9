"""HTTP lookups per second and p99 latency: the gateway's lookup route against a baseline aiohttp
handler that returns the same body without doing anything, measured in the same run.

    .venv/bin/python -m bench.http_lookup [--duration 5] [--connections 32] [--rounds 5]
                                          [--generator auto|wrk|aiohttp]
                                          [--loop auto|asyncio|uvloop] [--no-write]
                                          [--writes PER_SECOND] [--topics N]

Each server runs alone in a child process (one event loop, like the gateway). The gateway
parses the topic, chooses the listener, resolves the owner from a FileSource snapshot (its memo
of warm answers, as served), records metrics and builds LookupData, behind its own HttpServer
(connection cap, head deadline, client location, error answers). The baseline returns the same
pre-encoded bytes: by default (--baseline plain) from a plain aiohttp application (AppRunner,
TCPSite), what a user would write; with --baseline server from behind the same HttpServer, which
hides what the wrapper costs. The load generator is `wrk` (Debian package)
when it is installed, else an aiohttp client with many keep-alive connections in a separate
process. Every run is bounded by --duration after a short warm-up. The two servers are measured
in turn, --rounds times, the order swapped every round (a shared machine's load drifts); the
figures are the medians and the ratios those of each round.

What each round reports, and which figure to trust: "server CPU" is the server child's
user+system CPU time (read from /proc/<pid>/stat by the parent) per request over the measured
window; "busy" is that CPU time over the window's wall time (1.0: the server had a core to
itself all along); "waiting" is the time it was ready to run but had no CPU
(/proc/<pid>/schedstat: other processes had the cores; busy + waiting near 1.0 means the load
generator kept it supplied, so that was not the bottleneck); "load CPU" is the load generator's
own CPU per request (its rusage). On a quiet machine the server is busy ~1.0 and requests/s is
the figure; when other processes share the cores, requests/s measures how much CPU the server
and the load generator were left, which moves by a factor of two from one window to the next,
while CPU per request stays close to the server's own cost: the CPU ratio (baseline's CPU per
request over the gateway's) is then the figure.
Both servers run on the same event loop: uvloop where it is importable (--loop auto), else
asyncio's. Results go to BENCHMARKS.md under "## HTTP lookups".

With --writes N the gateway's child makes N metadata writes a second that change nothing of
the measured answer (a broker's load report, another bundle's owner), as a live cluster does:
what a memo that forgets only what a write changes is worth. With --topics N (wrk only) the load
asks N distinct topics of the namespace in turn (a Lua script), as many clients do.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib.util
import json
import multiprocessing
import os
import re
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

from aiohttp import ClientSession, ClientTimeout, TCPConnector, web

from bench.common import write_section
from pulsar_lookup_gateway.http_api.app import build_app
from pulsar_lookup_gateway.http_api.server import HttpServer
from pulsar_lookup_gateway.http_api.settings import HttpSettings
from pulsar_lookup_gateway.listeners.endpoints.addresses import Endpoint, Scheme
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.metadata_store.file import FileSource
from pulsar_lookup_gateway.metadata_store.synthetic import (
    broker_id,
    broker_node,
    cluster,
    ownership_node,
    topic_in_range,
)
from pulsar_lookup_gateway.serving.service import LookupService

OWNED = {
    "0x00000000_0x40000000": 1,
    "0x40000000_0x80000000": 2,
    "0x80000000_0xc0000000": 3,
    "0xc0000000_0xffffffff": 1,
}
TOPIC = topic_in_range(0x40000000, 0x80000000).rsplit("/", 1)[1]
PATH = f"/lookup/v2/topic/persistent/public/default/{TOPIC}"
LISTENER = "external"
OTHER_BUNDLE = "0x80000000_0xc0000000"  # not the measured topic's bundle
SECTION = "## HTTP lookups"
BUSY_ENOUGH = 0.9  # below this share of a core, requests/s measures the machine's load


# -- the servers, each in a child process ------------------------------------------------------


def _spec() -> SocketSpec:
    return SocketSpec(Endpoint(Scheme.HTTP, "127.0.0.1", 0), LISTENER, "bench socket")


async def _gateway(snapshot: Path) -> tuple[HttpServer, FileSource]:
    source = FileSource(snapshot, poll_interval=3600)
    await source.start()
    service = LookupService(source, internal_listener="internal")
    app = build_app(service, HttpSettings(LISTENER))
    return HttpServer(_spec(), app), source


async def _baseline(body: bytes) -> HttpServer:
    async def fixed(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_get("/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}", fixed)
    return HttpServer(_spec(), app)


class _Plain:
    """A plain aiohttp application answering the fixed body (web.AppRunner, web.TCPSite): what
    a user would write, with none of HttpServer's guards (connection cap, head deadline,
    client location, error answers)."""

    def __init__(self, body: bytes) -> None:
        async def fixed(request: web.Request) -> web.Response:
            return web.Response(body=body, content_type="application/json")

        self.app = web.Application()
        self.app.router.add_get("/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}", fixed)
        self._runner = web.AppRunner(self.app, handle_signals=False, access_log=None)
        self.port = 0

    async def start(self) -> None:
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.base_events.Server)
        self.port = server.sockets[0].getsockname()[1]

    async def stop(self, timeout: float) -> None:
        await self._runner.cleanup()


def loop_factory(loop: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop the servers run on ("uvloop": not a dependency; None: asyncio's)."""
    if loop != "uvloop":
        return None
    import uvloop

    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def resolve_loop(loop: str) -> str:
    """ "auto": uvloop where it is importable, else asyncio."""
    if loop != "auto":
        return loop
    return "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"


async def _unrelated_writes(source: FileSource, per_second: float) -> None:
    """Metadata writes that change nothing of the measured topic's answer, as a live cluster
    makes them all the time: a broker's load report rewrites its registration, and another
    bundle of the namespace changes owner (alternately)."""
    count = 0
    while True:
        await asyncio.sleep(1 / per_second)
        count += 1
        if count % 2:
            source.view.put_json(
                f"/loadbalance/brokers/{broker_id(2)}", broker_node(2, usage=count % 97 / 100)
            )
        else:
            owner = 3 if count % 4 else 2
            source.view.put_json(f"/namespace/public/default/{OTHER_BUNDLE}", ownership_node(owner))


def _serve(
    kind: str, snapshot: str, body: bytes, conn: Connection, loop_name: str, writes: float = 0
) -> None:
    """Child process: serve until the parent says stop. `writes`: unrelated metadata writes per
    second while it serves (the gateway only)."""

    async def run() -> None:
        source: FileSource | None = None
        writer: asyncio.Task[None] | None = None
        server: HttpServer | _Plain
        if kind == "gateway":
            server, source = await _gateway(Path(snapshot))
            if writes > 0:
                writer = asyncio.create_task(_unrelated_writes(source, writes))
        elif kind == "plain":
            server = _Plain(body)
        else:
            server = await _baseline(body)
        await server.start()
        conn.send(server.port)
        loop = asyncio.get_running_loop()
        while await loop.run_in_executor(None, conn.recv) != "stop":
            pass
        if writer is not None:
            writer.cancel()
        await server.stop(5)
        if source is not None:
            await source.close()

    with asyncio.Runner(loop_factory=loop_factory(loop_name)) as runner:
        runner.run(run())


@dataclass
class Result:
    name: str
    requests_per_s: float
    p99_ms: float
    cpu_us_per_request: float
    requests: int
    errors: int
    busy: float = 0.0  # the server's CPU seconds over the window's wall seconds
    load_cpu_us_per_request: float = 0.0  # the load generator's
    waiting: float = 0.0  # seconds the server was ready to run but had no CPU, over wall seconds


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu(pid: int) -> float:
    """A process's user+system CPU seconds so far, from outside it (/proc/<pid>/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()  # (the command name may hold spaces)
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime


def run_queue_wait(pid: int) -> float:
    """Seconds a process has been ready to run but waited for a CPU (/proc/<pid>/schedstat);
    0 where the kernel does not keep it."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def children_cpu() -> float:
    """CPU seconds of this process's waited-for children (the load generator, once it ends)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _topics_script(count: int) -> Path:
    """A wrk script that asks `count` distinct topics of the namespace in turn (spread over
    its bundles by their hash, as real topic names are)."""
    paths = ", ".join(f'"/lookup/v2/topic/persistent/public/default/t{n}"' for n in range(count))
    script = Path(tempfile.mkdtemp()) / "topics.lua"
    script.write_text(
        f"local paths = {{{paths}}}\n"
        "local requests, i = nil, 0\n"
        "request = function()\n"
        "  if requests == nil then\n"  # (made once: formatting each request costs wrk more)
        "    requests = {}\n"
        '    for n, path in ipairs(paths) do requests[n] = wrk.format("GET", path) end\n'
        "  end\n"
        "  i = i % #requests + 1\n"
        "  return requests[i]\n"
        "end\n"
    )
    return script


# -- load generators ---------------------------------------------------------------------------

_WRK_RPS = re.compile(r"Requests/sec:\s+([\d.]+)")
_WRK_P99 = re.compile(r"^\s*99%\s+([\d.]+)(us|ms|s)\s*$", re.M)
_WRK_TOTAL = re.compile(r"(\d+) requests in")
_WRK_ERRORS = re.compile(r"Non-2xx or 3xx responses:\s+(\d+)|Socket errors:.*?(\d+)")


async def _wrk(
    url: str, duration: float, connections: int, script: str | None = None
) -> tuple[float, float, int, int]:
    command = [
        "wrk", "-t1", f"-c{connections}", f"-d{max(1, round(duration))}s", "--latency", url,
    ]  # fmt: skip
    if script is not None:
        command[1:1] = ["-s", script]
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    output, _ = await asyncio.wait_for(process.communicate(), duration + 30)
    text = output.decode()
    rps, p99, total = _WRK_RPS.search(text), _WRK_P99.search(text), _WRK_TOTAL.search(text)
    if process.returncode != 0 or rps is None or p99 is None or total is None:
        raise RuntimeError(f"wrk failed ({process.returncode}):\n{text}")
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[p99.group(2)]
    errors = sum(int(a or b) for a, b in _WRK_ERRORS.findall(text))
    return float(rps.group(1)), float(p99.group(1)) * scale, int(total.group(1)), errors


def _client_process(url: str, duration: float, connections: int) -> tuple[float, float, int, int]:
    """In a separate process: `connections` keep-alive connections, one request in flight each."""

    async def run() -> tuple[float, float, int, int]:
        latencies: list[float] = []
        errors = 0
        connector = TCPConnector(limit=connections)
        async with ClientSession(connector=connector, timeout=ClientTimeout(total=10)) as session:
            deadline = time.perf_counter() + duration

            async def worker() -> None:
                nonlocal errors
                while (started := time.perf_counter()) < deadline:
                    async with session.get(url) as response:
                        await response.read()
                        if response.status != 200:
                            errors += 1
                    latencies.append(time.perf_counter() - started)

            started = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(connections)))
            elapsed = time.perf_counter() - started
        p99 = statistics.quantiles(latencies, n=100)[98] * 1000 if len(latencies) > 1 else 0.0
        return len(latencies) / elapsed, p99, len(latencies), errors

    return asyncio.run(run())


async def _aiohttp_load(
    url: str, duration: float, connections: int
) -> tuple[float, float, int, int]:
    loop = asyncio.get_running_loop()
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        return await asyncio.wait_for(
            loop.run_in_executor(pool, _client_process, url, duration, connections), duration + 60
        )


# -- one measurement ---------------------------------------------------------------------------


async def measure(
    kind: str, name: str, snapshot: Path, body: bytes, args: argparse.Namespace
) -> Result:
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(
        target=_serve, args=(kind, str(snapshot), body, child, args.loop, args.writes)
    )
    process.start()
    loop = asyncio.get_running_loop()
    try:
        if not await loop.run_in_executor(None, parent.poll, 30):
            raise RuntimeError(f"{name}: the server did not start")
        port = parent.recv()
        url = f"http://127.0.0.1:{port}{PATH}"
        load: Callable[[str, float, int], Awaitable[tuple[float, float, int, int]]]
        if args.topics > 1:  # (main() requires wrk for it)
            load = functools.partial(_wrk, script=args.script)
        else:
            load = _wrk if args.generator == "wrk" else _aiohttp_load
        await load(url, args.warmup, args.connections)
        assert process.pid is not None
        cpu_before, load_before = process_cpu(process.pid), children_cpu()
        wait_before, started = run_queue_wait(process.pid), time.monotonic()
        rps, p99, total, errors = await load(url, args.duration, args.connections)
        wall = time.monotonic() - started
        cpu = process_cpu(process.pid) - cpu_before
        waited = run_queue_wait(process.pid) - wait_before
        load_cpu = children_cpu() - load_before
    finally:
        parent.send("stop")
        await loop.run_in_executor(None, process.join, 30)
        if process.is_alive():
            process.kill()
    per_request = 1e6 / max(total, 1)
    return Result(
        name,
        rps,
        p99,
        cpu * per_request,
        total,
        errors,
        cpu / wall,
        load_cpu * per_request,
        waited / wall,
    )


async def run(args: argparse.Namespace) -> tuple[list[Result], list[Result], str]:
    """(baseline, gateway) results of every round."""
    baselines: list[Result] = []
    gateways: list[Result] = []
    with tempfile.TemporaryDirectory() as directory:
        snapshot = Path(directory) / "snapshot.json"
        snapshot.write_text(json.dumps(cluster(3, OWNED)))
        body = await _reference_body(snapshot)
        for round_ in range(args.rounds):
            baseline = (
                ("plain", "plain aiohttp app, fixed body")
                if args.baseline == "plain"
                else ("baseline", "aiohttp fixed-body handler behind HttpServer")
            )
            kinds = [baseline, ("gateway", f"gateway GET {PATH}")]
            for kind, name in kinds if round_ % 2 == 0 else kinds[::-1]:
                result = await measure(kind, name, snapshot, body, args)
                (gateways if kind == "gateway" else baselines).append(result)
                print(f"round {round_ + 1}: {result.name}: {result.requests_per_s:,.0f}/s, "
                      f"{result.cpu_us_per_request:.1f} us CPU/request, busy {result.busy:.2f}, "
                      f"waiting {result.waiting:.2f}, "
                      f"load {result.load_cpu_us_per_request:.1f} us/request",
                      flush=True)  # fmt: skip
    generator = (
        f"wrk -t1 -c{args.connections} -d{max(1, round(args.duration))}s --latency"
        if args.generator == "wrk"
        else f"aiohttp client, {args.connections} keep-alive connections, separate process"
    )
    return baselines, gateways, generator


async def _reference_body(snapshot: Path) -> bytes:
    """The gateway's own answer for PATH, so the baseline sends the very same bytes."""
    server, source = await _gateway(snapshot)
    await server.start()
    try:
        url = f"http://127.0.0.1:{server.port}{PATH}"
        async with ClientSession() as session, session.get(url) as response:
            assert response.status == 200, await response.text()
            return await response.read()
    finally:
        await server.stop(5)
        await source.close()


# -- report ------------------------------------------------------------------------------------


def median(results: list[Result]) -> Result:
    """The median of each figure over rounds."""
    return Result(
        results[0].name,
        statistics.median(r.requests_per_s for r in results),
        statistics.median(r.p99_ms for r in results),
        statistics.median(r.cpu_us_per_request for r in results),
        sum(r.requests for r in results),
        sum(r.errors for r in results),
        statistics.median(r.busy for r in results),
        statistics.median(r.load_cpu_us_per_request for r in results),
        statistics.median(r.waiting for r in results),
    )


def table(baselines: list[Result], gateways: list[Result]) -> list[str]:
    rows = [
        "| server | requests/s | p99 (ms) | server CPU (µs/request) | server busy | "
        "server waiting for a CPU | load CPU (µs/request) | non-2xx |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in (median(baselines), median(gateways)):
        rows.append(
            f"| {r.name} | {r.requests_per_s:,.0f} | {r.p99_ms:.2f} | "
            f"{r.cpu_us_per_request:.1f} | {r.busy:.2f} | {r.waiting:.2f} | "
            f"{r.load_cpu_us_per_request:.1f} | {r.errors} |"
        )
    pairs = [ratios(b, g) for b, g in zip(baselines, gateways, strict=True)]
    ratio = statistics.median(p[0] for p in pairs)
    cpu_ratio = statistics.median(p[1] for p in pairs)
    rows.append(
        f"| **gateway / baseline** | **{ratio:.2f}** | | **{cpu_ratio:.2f}** "
        "(baseline's CPU ÷ gateway's) | | | | |"
    )
    if len(pairs) > 1:
        rows += [
            "",
            "| round | requests/s ratio | CPU ratio | gateway / baseline CPU µs |",
            "|---|---:|---:|---:|",
        ]
        for i, (b, g) in enumerate(zip(baselines, gateways, strict=True)):
            rps, cpu = pairs[i]
            rows.append(
                f"| {i + 1} | {rps:.2f} | {cpu:.2f} | "
                f"{g.cpu_us_per_request:.1f} / {b.cpu_us_per_request:.1f} |"
            )
    return rows


def ratios(baseline: Result, gateway: Result) -> tuple[float, float]:
    """Throughput ratio, and the same judged by server CPU per request (which does not depend
    on whether the load generator kept the server busy)."""
    return (
        gateway.requests_per_s / baseline.requests_per_s,
        baseline.cpu_us_per_request / gateway.cpu_us_per_request,
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.http_lookup", description=__doc__)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds measured per server")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--generator", choices=["auto", "wrk", "aiohttp"], default="auto")
    parser.add_argument(
        "--loop",
        choices=["auto", "asyncio", "uvloop"],
        default="auto",
        help="both servers' event loop (auto: uvloop where importable)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (medians)")
    parser.add_argument(
        "--topics",
        type=int,
        default=1,
        help="distinct topics the load asks for, in turn (more than 1 needs wrk)",
    )
    parser.add_argument(
        "--writes",
        type=float,
        default=0,
        help="unrelated metadata writes per second in the gateway while measured",
    )
    parser.add_argument(
        "--baseline",
        choices=["plain", "server"],
        default="plain",
        help="plain: a plain aiohttp app (AppRunner, TCPSite); server: the fixed-body handler "
        "behind the gateway's own HttpServer (what the wrapper costs is then on both sides)",
    )
    parser.add_argument("--no-write", action="store_true", help="do not update BENCHMARKS.md")
    parser.add_argument("--out", type=Path, default=Path("BENCHMARKS.md"))
    args = parser.parse_args(argv)
    if args.generator == "auto":
        args.generator = "wrk" if shutil.which("wrk") else "aiohttp"
    args.loop = resolve_loop(args.loop)
    args.script = None
    if args.topics > 1:
        if shutil.which("wrk") is None:
            parser.error("--topics needs wrk (the Debian package)")
        args.generator = "wrk"
        args.script = str(_topics_script(args.topics))
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    baselines, gateways, generator = asyncio.run(run(args))
    rows = table(baselines, gateways)
    print("\n".join(rows))
    pairs = [ratios(b, g) for b, g in zip(baselines, gateways, strict=True)]
    print(
        f"\nmedian ratio {statistics.median(p[0] for p in pairs):.2f} requests/s, "
        f"{statistics.median(p[1] for p in pairs):.2f} by server CPU per request over "
        f"{args.rounds} round(s) on {args.loop} (goal: at least 0.90 of the baseline)"
    )
    busy = statistics.median(r.busy for r in [*baselines, *gateways])
    if busy < BUSY_ENOUGH:
        waiting = statistics.median(r.waiting for r in [*baselines, *gateways])
        print(
            f"the servers were busy {busy:.2f} of a core and waited for one {waiting:.2f} of "
            "the time (medians): other processes had the CPU (busy + waiting near 1: the load "
            "generator kept them supplied), so requests/s says more about the machine than "
            "the servers; read the CPU ratio"
        )
    if not args.no_write:
        command = "`.venv/bin/python -m bench.http_lookup" + "".join(
            f" {a}" for a in argv
        ) + "`"  # fmt: skip
        write_section(
            args.out,
            SECTION,
            [
                SECTION,
                "",
                f"Command: {command} (also part of `make bench`). Load: {generator}, on "
                f"127.0.0.1; each server alone in one child process ({os.cpu_count()} cores "
                f"here, event loop: {args.loop}), {args.duration:g} s measured after a "
                f"{args.warmup:g} s warm-up, {args.rounds} round(s) alternating the two "
                "(medians; ratios per round). "
                "Same response bytes for both; the gateway resolves an owned topic for the "
                "socket's listener (from its memo, as served) and records its metrics, the "
                "baseline returns pre-encoded bytes. Server CPU is the child's, read from "
                "/proc; busy is that CPU over the wall time, waiting the time it was ready to run "
                "without a CPU; load CPU is the generator's. "
                f"Python {sys.version.split()[0]}, {time.strftime('%Y-%m-%d')}.",
                "",
                *rows,
                "",
                "Goal: at least 0.9 of the baseline. When the servers are busy well under 1.0 "
                "(other processes on the cores, or the aiohttp client generator instead of "
                "wrk), requests/s measures the CPU left to them, not their cost: read the CPU "
                "ratio then, which depends far less on that load (single rounds still move by "
                "~10%: read medians).",
            ],
            ends=("## ", "### "),  # (its subsections are hand-written notes, kept)
        )
        print(f"wrote {SECTION!r} in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
