"""`python -m bench [NAME ...]` (`make bench`): run the benchmarks, print markdown rows."""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = (
    "zk_cache",
    "binary_lookup",
    "storm",
    "http_lookup",
    "http_handler",
    "http_stack",
    "tls_handshake",
    "zones",
    "zones_floor",
    "workers",
    "client_location",
    "watch",
    "freshness",
    "forwarded_storm",
    "cold_sweep",
    "big_listing",
    "watch_herd",
)


def main(argv: list[str]) -> int:
    names = argv or list(BENCHMARKS)
    for name in names:
        if name not in BENCHMARKS:
            print(f"unknown benchmark {name!r}; choose from {', '.join(BENCHMARKS)}")
            return 2
        module = importlib.import_module(f"bench.{name}")
        print(f"\n## {name}\n", flush=True)
        module.main([])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
