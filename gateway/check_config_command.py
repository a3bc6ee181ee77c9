"""`pulsar-lookup-gateway check-config --config F`: every problem of a config, and of this host
for it, in one run; the socket table it would open."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pulsar_lookup_gateway.console.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from pulsar_lookup_gateway.console.table import format_table
from pulsar_lookup_gateway.gateway.startup import (
    host_problems,
    report_config_error,
    report_host_problems,
)
from pulsar_lookup_gateway.listeners.config.model import ConfigError, GatewayConfig, load_config

#: `--strict`'s help (run has the option too, with the same meaning).
STRICT_HELP = (
    "every key the gateway does not use is an error, not a warning (for CI); a key one edit "
    "from a gateway key is an error either way"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, type=Path, help="broker.conf-style file")
    parser.add_argument(
        "--no-host-checks",
        action="store_true",
        help="validate the config only: do not read TLS, key or snapshot files nor bind the "
        "sockets (for a config meant for another host)",
    )
    parser.add_argument("--strict", action="store_true", help=STRICT_HELP)
    parser.set_defaults(handler=cmd_check_config)


def cmd_check_config(args: argparse.Namespace) -> int:
    """Every problem in one run: those of the config, then those of this host, checked on what
    validated of the config (but for the checks its problems make moot)."""
    try:
        loaded = load_config(args.config, os.environ, strict=args.strict)
    except ConfigError as exc:
        report_config_error(args.config, exc)
        if not args.no_host_checks and exc.partial is not None:
            problems = host_problems(exc.partial, exc.keys)
            if problems:
                report_host_problems(args.config, problems)
        return EXIT_USAGE
    for warning in loaded.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(describe_config(loaded.config))
    if args.no_host_checks:
        return EXIT_OK
    problems = host_problems(loaded.config)
    if problems:
        report_host_problems(args.config, problems)
        return EXIT_FAILED
    return EXIT_OK


def describe_config(config: GatewayConfig) -> str:
    lines = [f"metadata store     {config.metadata_store_url}"]
    lines.append(f"internal listener  {config.internal_listener_name or '-'}")
    lines.append(f"ownership table    {config.describe_table_view()}")
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
    lines += format_table(rows, indent="  ")
    if len(rows) == 1:
        lines.append("  (none: the gateway would listen nowhere)")
    lines += _describe_client_routes(config)
    return "\n".join(line.rstrip() for line in lines)


def _describe_client_routes(config: GatewayConfig) -> list[str]:
    """Where a client is (sniHostnames, clientCidrs, proxyProtocol per listener, and
    trustedProxyCidrs); nothing when none of it is set."""
    routed = [
        (name, own)
        for name, own in sorted(config.listener_settings.items())
        if own.sni_hostnames or own.client_cidrs or own.proxy_protocol
    ]
    if not routed and not config.trusted_proxy_cidrs:
        return []
    lines = ["listener selection by client (after listenerName and X-Pulsar-ListenerName):"]
    if routed:
        rows = [("LISTENER", "SNI NAMES", "CLIENT CIDRS", "PROXY PROTOCOL")]
        for name, own in routed:
            rows.append(
                (
                    name,
                    ",".join(own.sni_hostnames or ()) or "-",
                    ",".join(own.client_cidrs or ()) or "-",
                    "yes" if own.proxy_protocol else "no",
                )
            )
        lines += format_table(rows, indent="  ")
    trusted = " ".join(config.trusted_proxy_cidrs) or "(none: PROXY and forwarded headers ignored)"
    lines.append(f"trusted proxies    {trusted}")
    return lines
