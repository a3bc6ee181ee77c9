"""`pulsar-lookup-gateway seed --metadata zk:... --snapshot F`: a snapshot written into
ZooKeeper in Pulsar's layout (`--replace`: what it no longer has deleted)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pulsar_lookup_gateway.console.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from pulsar_lookup_gateway.metadata_store.admin import ZooKeeperUnreachable, seed_url
from pulsar_lookup_gateway.metadata_store.ownership_moves import replace_url
from pulsar_lookup_gateway.metadata_store.snapshot import SnapshotError, read_snapshot
from pulsar_lookup_gateway.metadata_store.url import MetadataUrl, parse_metadata_url


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metadata", required=True, help="zk:host:port[/chroot]")
    parser.add_argument("--snapshot", required=True, type=Path)
    parser.add_argument(
        "--replace",
        action="store_true",
        help="also delete what the gateway reads (brokers, ownership, policies, topics) that "
        "the snapshot no longer has: a bundle left out is unloaded, a broker left out stopped",
    )
    parser.set_defaults(handler=cmd_seed)


def zk_url(text: str) -> MetadataUrl | None:
    try:
        url = parse_metadata_url(text)
    except ValueError as exc:
        print(f"--metadata: {exc}", file=sys.stderr)
        return None
    if url.kind != "zk":
        print("--metadata: seed and dump need a zk: URL", file=sys.stderr)
        return None
    return url


def cmd_seed(args: argparse.Namespace) -> int:
    url = zk_url(args.metadata)
    if url is None:
        return EXIT_USAGE
    try:
        nodes = read_snapshot(args.snapshot)
    except SnapshotError as exc:
        print(f"--snapshot: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        count = seed_url(url, nodes)
        deleted = replace_url(url, nodes) if args.replace else None
    except ZooKeeperUnreachable as exc:
        print(f"seed: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"wrote {count} znodes from {args.snapshot} to {url}")
    if deleted is not None:
        print(f"deleted {len(deleted)} znodes the snapshot does not have")
        for path in deleted:
            print(f"  {path}")
    return EXIT_OK
