"""`pulsar-lookup-gateway run --config F`: the gateway, until a signal stops it (`--workers N`:
N processes sharing the ports, under a supervisor)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pulsar_lookup_gateway.console.exit_codes import EXIT_FAILED, EXIT_USAGE
from pulsar_lookup_gateway.gateway.check_config_command import STRICT_HELP
from pulsar_lookup_gateway.gateway.logs import ACCESS_LOG_HELP
from pulsar_lookup_gateway.gateway.startup import load_or_report, serve_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, type=Path, help="broker.conf-style file")
    parser.add_argument(
        "--workers", type=int, default=1, help="gateway processes sharing the ports (SO_REUSEPORT)"
    )
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    # A worker's supervisor: its pid and the read end of its lifeline pipe (gateway.workers).
    parser.add_argument("--supervisor-pid", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--supervisor-fd", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--access-log", action="store_true", help=ACCESS_LOG_HELP)
    parser.add_argument(
        "--strict", action="store_true", help=f"as check-config --strict: {STRICT_HELP}"
    )
    parser.set_defaults(handler=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    from pulsar_lookup_gateway.gateway.workers import WorkersError, follow_supervisor, supervise

    # A worker's first act, so that it never outlives its supervisor, even while it starts.
    supervised = args.worker is not None and args.supervisor_pid is not None
    if supervised and not follow_supervisor(args.supervisor_pid, args.supervisor_fd):
        return EXIT_FAILED
    # --strict: what check-config --strict calls an error stops the start (exit 2), printed alike.
    loaded = load_or_report(args.config, strict=args.strict)
    if loaded is None:
        return EXIT_USAGE
    if args.worker is not None:  # one of `--workers N`'s processes
        return serve_config(loaded.config, reuse_port=True, access_log=args.access_log)
    if args.workers == 1:
        return serve_config(loaded.config, access_log=args.access_log)
    # The workers log as this process does.
    worker_args = ["--log-level", args.log_level, "--log-format", args.log_format]
    if args.access_log:
        worker_args.append("--access-log")
    if args.strict:  # (a worker started again reads the file again)
        worker_args.append("--strict")
    try:
        return supervise(args.config, loaded.config, args.workers, worker_args)
    except WorkersError as exc:
        print(f"run: {exc}", file=sys.stderr)
        return EXIT_USAGE
