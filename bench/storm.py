"""A lookup storm: many clients asking for *distinct* topics at once (a broker restart, a rolling
upgrade), against the framing-only floor measured in the same run.

    .venv/bin/python -m bench.storm [--topics 200000] [--namespaces 100] [--bundles 100]
                                    [--connections 64] [--depth 16] [--duration 5]
                                    [--profile storm.pstats] [--growth]

**storm**: the gateway (one process, one event loop) on a snapshot of `--namespaces` x
`--bundles` bundles, all owned by 20 brokers; the load asks for `--topics` distinct topics,
spread over the namespaces, each connection starting at its own place in the list, far from
the others (connection c at topic c x topics / connections), so that a topic comes round again
only after the whole list has gone by: its answer is no longer warm anywhere. **warm**: the same
gateway with 2,000 topics asked again and again (the memo answers them). **floor**: an asyncio
server that splits frames and answers each with one pre-encoded LOOKUP_RESPONSE (no decoding,
no lookup): the wire's floor. `--growth` runs the storm at 1 k, 10 k and 100 k bundles instead,
to show what the cluster's size costs (throughput, server CPU and resident memory).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from bench.binary_lookup import Result, _measure, _profile_summary
from bench.common import cluster_snapshot
from pulsar_lookup_gateway.listeners.protocol import codec

#: Request ids cycle: answers then repeat byte for byte, which keeps the load generator's own
#: cost per answer low (it knows an answer it has seen).
REQUEST_IDS = 1024
WARM_TOPICS = 2000


def requests_for(topics: list[str]) -> list[bytes]:
    return [codec.lookup(topic, i % REQUEST_IDS + 1) for i, topic in enumerate(topics)]


async def _run_storm(args: argparse.Namespace, bundles: int, kinds: list[str]) -> dict[str, Result]:
    results: dict[str, Result] = {}
    with tempfile.TemporaryDirectory() as tmp:
        snapshot = Path(tmp) / "cluster.json"
        namespaces = max(1, args.namespaces)
        topics = cluster_snapshot(
            snapshot,
            namespaces=namespaces,
            bundles_per_namespace=max(1, bundles // namespaces),
            topics=args.topics,
        )
        for kind in kinds:
            asked = topics if kind == "storm" else topics[:WARM_TOPICS]
            server = "baseline" if kind == "floor" else "gateway"
            profile = args.profile if kind == "storm" else None
            result = await _measure(server, snapshot, requests_for(asked), args, profile)
            results[kind] = result
    return results


def _row(name: str, r: Result, floor: Result, load: str) -> str:
    return (
        f"| {name} | {load} | {r.lookups_per_second:,.0f} | "
        f"**{r.lookups_per_second / floor.lookups_per_second:.3f}** | {r.p50_ms:.2f} | "
        f"{r.p99_ms:.2f} | {r.cpu_us_per_lookup:.2f} | {r.server_rss_mib[0]:.0f} | {r.failed} |"
    )


HEADER = (
    "| run | bundles | lookups/s | / floor | p50 ms | p99 ms | server CPU us/lookup "
    "| server RSS MiB | failed |\n|---|---|---|---|---|---|---|---|---|"
)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.storm", description=__doc__)
    parser.add_argument("--topics", type=int, default=200_000, help="distinct topics asked")
    parser.add_argument("--namespaces", type=int, default=100)
    parser.add_argument("--bundles", type=int, default=10_000, help="bundles in all")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--depth", type=int, default=16, help="lookups in flight per connection")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds measured per server")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--profile", metavar="FILE", help="cProfile the storm's gateway into FILE")
    parser.add_argument("--growth", action="store_true", help="storm at 1k, 10k, 100k bundles")
    parser.add_argument(
        "--loop", choices=("asyncio", "uvloop"), default="asyncio", help="the servers' event loop"
    )
    args = parser.parse_args(argv)
    print(HEADER)
    failed = 0
    sizes = (1_000, 10_000, 100_000) if args.growth else (args.bundles,)
    for size in sizes:
        kinds = ["storm", "floor"] if args.growth else ["storm", "warm", "floor"]
        results = asyncio.run(_run_storm(args, size, kinds))
        floor = results["floor"]
        load = f"{size:,}"
        for name, result in results.items():
            print(_row(name, result, floor, load), flush=True)
            failed += result.failed
    if failed:
        print(f"\n{failed} lookups failed")
    if args.profile:
        print(f"\nstorm gateway profile ({args.profile}), by own time:\n")
        print(_profile_summary(args.profile, 40))
    return 1 if failed else 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
