"""`pulsar-lookup-gateway dump --metadata zk:... --out F`: the znodes the gateway reads, written
as a snapshot (what `seed` and `file:` metadata read)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pulsar_lookup_gateway.console.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from pulsar_lookup_gateway.gateway.seed_command import zk_url
from pulsar_lookup_gateway.metadata_store.admin import ZooKeeperUnreachable, dump_url
from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metadata", required=True, help="zk:host:port[/chroot]")
    parser.add_argument("--out", required=True, type=Path)
    parser.set_defaults(handler=cmd_dump)


def cmd_dump(args: argparse.Namespace) -> int:
    url = zk_url(args.metadata)
    if url is None:
        return EXIT_USAGE
    try:
        nodes = dump_url(url)
    except ZooKeeperUnreachable as exc:
        print(f"dump: {exc}", file=sys.stderr)
        return EXIT_FAILED
    write_snapshot(args.out, nodes)
    print(f"wrote {len(nodes)} znodes from {url} to {args.out}")
    return EXIT_OK
