"""The `pulsar-lookup-gateway` command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from listeners.config import ConfigError, GatewayConfig, LoadedConfig, load_config
from lookup.errors import LookupFailure
from lookup.metadata_url import parse_metadata_url
from lookup.resolve import LookupAnswer, ResolvePolicy, resolve, resolve_partitions
from lookup.selection import choose_listener
from lookup.snapshot import SnapshotError, read_snapshot
from lookup.topics import TopicName
from lookup.view import ClusterView

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except KeyboardInterrupt:
        return 130
    return code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pulsar-lookup-gateway",
        description="Answer Apache Pulsar topic lookups per network listener (PIP-95).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    check = sub.add_parser("check-config", help="validate a config and print its socket table")
    check.add_argument("--config", required=True, type=Path, help="broker.conf-style file")
    check.set_defaults(handler=cmd_check_config)

    lookup = sub.add_parser("lookup", help="resolve one topic against cluster metadata")
    lookup.add_argument("topic", help="full or short topic name")
    lookup.add_argument("--listener", help="advertised listener name (default: internal)")
    lookup.add_argument("--metadata", required=True, help="zk:host:port[/chroot] or file:PATH")
    lookup.add_argument("--config", type=Path, help="gateway config (bundle defaults, redirects)")
    lookup.set_defaults(handler=cmd_lookup)
    return parser


def _load(path: Path) -> LoadedConfig | None:
    try:
        loaded = load_config(path, os.environ)
    except ConfigError as exc:
        print(f"{path}: {len(exc.problems)} problem(s):", file=sys.stderr)
        for problem in exc.problems:
            print(f"  - {problem}", file=sys.stderr)
        return None
    for warning in loaded.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return loaded


def cmd_check_config(args: argparse.Namespace) -> int:
    loaded = _load(args.config)
    if loaded is None:
        return EXIT_USAGE
    print(describe_config(loaded.config))
    return EXIT_OK


def describe_config(config: GatewayConfig) -> str:
    lines = [f"metadata store     {config.metadata_store_url}"]
    lines.append(f"internal listener  {config.internal_listener_name or '-'}")
    lines.append("advertised listeners:")
    for listener in config.advertised_listeners:
        urls = " ".join(e.url for e in listener.endpoints)
        lines.append(f"  {listener.name:<16} {urls}")
    if not config.advertised_listeners:
        lines.append("  (none: every lookup answers with the brokers' default URLs)")
    lines.append("sockets:")
    rows = [("ADDRESS", "SCHEME", "LISTENER", "TLS", "FROM")]
    for spec in config.sockets():
        rows.append(
            (
                spec.endpoint.address,
                spec.endpoint.scheme.value,
                spec.listener or "-",
                "yes" if spec.tls else "no",
                spec.origin,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        lines.append("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    if len(rows) == 1:
        lines.append("  (none: the gateway would listen nowhere)")
    return "\n".join(line.rstrip() for line in lines)


def cmd_lookup(args: argparse.Namespace) -> int:
    policy = ResolvePolicy()
    internal: str | None = None
    if args.config is not None:
        loaded = _load(args.config)
        if loaded is None:
            return EXIT_USAGE
        policy = loaded.config.resolve_policy()
        internal = loaded.config.internal_listener_name
    try:
        view = open_view(args.metadata)
    except (ValueError, SnapshotError) as exc:
        print(f"--metadata: {exc}", file=sys.stderr)
        return EXIT_USAGE
    choice = choose_listener(explicit=args.listener, internal_listener=internal)
    result: dict[str, Any] = {"topic": args.topic}
    try:
        topic = TopicName.parse(args.topic)
        result["topic"] = topic.full
        answer = resolve(topic, choice, view, policy)
        result.update(answer_json(answer))
        result["partitions"] = resolve_partitions(topic, view)
    except LookupFailure as exc:
        result.update(response="failed", error=exc.code.name, message=exc.message)
        print(json.dumps(result, indent=2))
        return EXIT_FAILED
    print(json.dumps(result, indent=2))
    return EXIT_OK


def open_view(metadata: str) -> ClusterView:
    url = parse_metadata_url(metadata)
    if url.kind == "file":
        return ClusterView.from_snapshot(read_snapshot(url.path))
    raise ValueError("zk: metadata is not supported by this command yet")


def answer_json(answer: LookupAnswer) -> dict[str, Any]:
    return {
        "topic": answer.topic.full,
        "bundle": answer.bundle.name,
        "response": answer.response.value,
        "authoritative": answer.authoritative,
        "brokerId": answer.broker_id,
        "brokerServiceUrl": answer.urls.service_url,
        "brokerServiceUrlTls": answer.urls.service_url_tls,
        "httpUrl": answer.urls.http_url,
        "httpUrlTls": answer.urls.http_url_tls,
        "listener": answer.listener.name,
        "listenerChosenBy": answer.listener.source.value,
    }


if __name__ == "__main__":
    sys.exit(main())
