"""A pattern listing of a big namespace against a bystander's cached lookups on the same gateway,
in the same run: what the listing answers (filtered, how many topics), how long it takes, and
the bystander's worst wait while it runs.

    .venv/bin/python -m bench.big_listing [--topics 50000] [--patterns 5] [--rounds 2]
                                          [--before /work/base-42]

The gateway (FileSource snapshot, BinaryServer: the product's parts) runs in a child process;
one namespace holds `--topics` topics, 10 of which a pattern matches. The bystander, on its own
connection, keeps one cached LOOKUP in flight at a time and records each answer's wait (its
**baseline** is the same bystander while nothing else runs, measured first). The lister then
sends, one after the other, the namespace's first listing with a pattern (the list is not built
yet) and `--patterns` more distinct patterns. `--before DIR` alternates rounds of the tree at
DIR (PYTHONPATH) with this tree's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import percentile
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import BaseCommand
from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
from pulsar_lookup_gateway.metadata_store.synthetic import cluster

HOST = "127.0.0.1"
BIG = "big/many"
BYSTANDER = "persistent://public/default/bystander"

SERVER = r"""
import asyncio, json, logging, sys
from pulsar_lookup_gateway.listeners.binary import BinaryServer, BinarySettings
from pulsar_lookup_gateway.listeners.endpoints.addresses import Endpoint, Scheme
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.metadata_store.file import FileSource
from pulsar_lookup_gateway.serving.service import LookupService

async def main():
    logging.basicConfig(level=logging.WARNING)
    source = FileSource(sys.argv[1], poll_interval=3600)
    await source.start()
    spec = SocketSpec(Endpoint(Scheme.PULSAR, "127.0.0.1", 0), "external", "bench")
    server = BinaryServer(spec, LookupService(source, internal_listener="internal"),
                          BinarySettings(keep_alive_interval=0, handshake_timeout=60))
    await server.start()
    print(json.dumps({"port": server.port}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    await server.stop(timeout=5)
    await source.close()

asyncio.run(main())
"""


def nodes(topics: int) -> dict[str, Any]:
    out = cluster(owned={"0x00000000_0x40000000": 1, "0x40000000_0x80000000": 2,
                         "0x80000000_0xc0000000": 3, "0xc0000000_0xffffffff": 1})  # fmt: skip
    out[f"/admin/policies/{BIG}"] = {}
    ledgers = f"/managed-ledgers/{BIG}/persistent"
    for n in range(topics):
        out[f"{ledgers}/topic-{n:06d}"] = {}
    for n in range(10):
        out[f"{ledgers}/wanted-{n}"] = {}
    return out


class Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Conn:
        reader, writer = await asyncio.open_connection(HOST, port, limit=2**26)
        conn = cls(reader, writer)
        writer.write(codec.connect("bench", 21))
        await conn.read()
        return conn

    async def read(self) -> BaseCommand:
        (size,) = struct.unpack(">I", await self.reader.readexactly(4))
        frame = await self.reader.readexactly(size)
        (command_size,) = struct.unpack(">I", frame[:4])
        return BaseCommand.FromString(frame[4 : 4 + command_size])

    async def ask(self, frame: bytes) -> BaseCommand:
        self.writer.write(frame)
        return await self.read()


async def bystand(conn: Conn, stop: asyncio.Event, waits: list[float]) -> None:
    request = 1
    while not stop.is_set():
        started = time.perf_counter()
        await conn.ask(codec.lookup(BYSTANDER, request))
        waits.append(time.perf_counter() - started)
        request += 1


async def one_round(tree: str, snapshot: Path, args: argparse.Namespace) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=tree)
    child = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(snapshot)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=tree, text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        loop = asyncio.get_running_loop()
        port = json.loads(await loop.run_in_executor(None, child.stdout.readline))["port"]
        bystander, lister = await Conn.open(port), await Conn.open(port)
        await bystander.ask(codec.lookup(BYSTANDER, 1))  # cached from here on
        stop, alone = asyncio.Event(), list[float]()
        task = asyncio.create_task(bystand(bystander, stop, alone))
        await asyncio.sleep(1.0)
        stop.set()
        await task
        stop, during = asyncio.Event(), list[float]()
        task = asyncio.create_task(bystand(bystander, stop, during))
        listings = []
        patterns = [f"{BIG}/wanted-.*", *(f"{BIG}/wanted-[0-{n}]" for n in range(args.patterns))]
        for n, pattern in enumerate(patterns):
            started = time.perf_counter()
            frame = codec.get_topics_of_namespace(BIG, n + 1, topics_pattern=pattern)
            answer = (await lister.ask(frame)).getTopicsOfNamespaceResponse
            took = time.perf_counter() - started
            listings.append((pattern, answer.filtered, len(answer.topics), took))
        stop.set()
        await task
        bystander.writer.close()
        lister.writer.close()
        return {"alone": alone, "during": during, "listings": listings}
    finally:
        assert child.stdin is not None
        child.stdin.write("stop\n")
        child.stdin.flush()
        child.wait(30)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.big_listing", description=__doc__)
    parser.add_argument("--topics", type=int, default=50_000)
    parser.add_argument("--patterns", type=int, default=5, help="more distinct patterns")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--before", metavar="DIR", help="alternate with the tree at DIR")
    args = parser.parse_args(argv)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = [("after", here)]
    if args.before:
        trees.insert(0, ("before", os.path.abspath(args.before)))
    print(
        "| tree | listing | filtered | topics | took ms | bystander p50 / p99 / max ms "
        "(alone: p99 / max) |\n|---|---|---|---|---|---|"
    )
    with tempfile.TemporaryDirectory() as tmp:
        snapshot = Path(tmp) / "cluster.json"
        write_snapshot(snapshot, nodes(args.topics))
        for _ in range(args.rounds):
            for label, tree in trees:
                r = asyncio.run(one_round(tree, snapshot, args))
                alone, during = r["alone"], r["during"]
                wait = (
                    f"{percentile(during, 0.5) * 1000:.2f} / {percentile(during, 0.99) * 1000:.1f}"
                    f" / **{max(during) * 1000:.1f}** ({percentile(alone, 0.99) * 1000:.1f} / "
                    f"{max(alone) * 1000:.1f})"
                )
                for n, (pattern, filtered, count, took) in enumerate(r["listings"]):
                    name = "first, " + pattern if n == 0 else pattern
                    print(
                        f"| {label} | `{name}` | {filtered} | {count:,} | {took * 1000:.0f} | "
                        f"{wait if n == 0 else ''} |",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
