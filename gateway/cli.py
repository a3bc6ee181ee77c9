"""The `pulsar-lookup-gateway` command line.

Only the chosen command's module is imported: the others (the servers, ZooKeeper's client,
Spark's job) would cost every start a second. `--help` lists the commands from COMMANDS alone.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from pulsar_lookup_gateway.console.exit_codes import EXIT_FAILED, EXIT_USAGE
from pulsar_lookup_gateway.gateway.logs import (
    FORMATS,
    LEVEL_ENV,
    LEVELS,
    resolve_level,
    setup_logging,
)

PROG = "pulsar-lookup-gateway"
#: Every command: the module (under pulsar_lookup_gateway.gateway) whose add_arguments() adds
#: its arguments and handler, imported only when the command is chosen; and its one-line help.
COMMANDS: dict[str, tuple[str, str]] = {
    "check-config": ("check_config_command", "validate a config and print its socket table"),
    "lookup": ("lookup_command", "resolve one topic against cluster metadata"),
    "run": ("run_command", "run the gateway"),
    "standalone": (
        "standalone",
        "start a ZooKeeper with a demo cluster and a gateway in front of it",
    ),
    "seed": ("seed_command", "write a snapshot into ZooKeeper in Pulsar's layout"),
    "dump": ("dump_command", "write the znodes the gateway reads as a snapshot"),
    "certs": ("certs_command", "write a development CA, server and client certificates"),
    "resolve-zones": ("zones_command", "resolve every topic for every network zone on Spark"),
    "watch": (
        "watch_command",
        "print where topics live, and every change, as JSON lines (ownership watch)",
    ),
    "explain": (
        "explain_command",
        "show why a client gets the answer it gets for a topic (each routing step)",
    ),
    "demo": (
        "demo_command",
        "move, unload or stop a broker's bundles in the demo's ZooKeeper",
    ),
}
SERVING = frozenset({"run", "standalone"})  # the commands that log at INFO by default


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(chosen_command(argv))
    args = parser.parse_args(argv)
    default_level = "INFO" if args.command in SERVING else "WARNING"
    try:
        args.log_level = resolve_level(args.log_level, os.environ, default_level)
    except ValueError as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    setup_logging(
        level=args.log_level,
        log_format=args.log_format,
        worker=getattr(args, "worker", None),
        access_log=getattr(args, "access_log", False),
    )
    if args.command not in SERVING and logging.getLogger().level >= logging.WARNING:
        # A one-shot command says in one line that ZooKeeper cannot be reached: kazoo's
        # per-retry warnings would only repeat it.
        logging.getLogger("kazoo.client").setLevel(logging.ERROR)
    try:
        code: int = args.handler(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into `head` and the like: not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    return code


def chosen_command(argv: Sequence[str]) -> str | None:
    """The command `argv` names: its first word that is not an option (the top level's
    options, --help and --version, take no value). None when there is none, or it is no
    command (argparse then says so)."""
    word = next((arg for arg in argv if not arg.startswith("-")), None)
    return word if word in COMMANDS else None


def build_parser(chosen: str | None = None) -> argparse.ArgumentParser:
    """Every command with its help; the arguments of `chosen` only (its module imported)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Answer Apache Pulsar topic lookups per network listener (PIP-95).",
    )
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text)
        if name == chosen:
            # (__import__, not importlib.import_module: `python -X importtime` lists it)
            imported = __import__(f"{__package__}.{module}", fromlist=["add_arguments"])
            imported.add_arguments(command)
            _add_log_options(command)
    return parser


class _Version(argparse.Action):
    """`--version`: the installed distribution's, read only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(
            option_strings,
            dest,
            nargs=0,
            default=argparse.SUPPRESS,
            help="show program's version number and exit",
        )

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any, **_kwargs: Any) -> None:
        from pulsar_lookup_gateway.gateway.version import gateway_version

        print(f"{parser.prog} {gateway_version()}")  # (on stdout, as argparse's own)
        parser.exit()


def _add_log_options(command: argparse.ArgumentParser) -> None:
    logs = command.add_argument_group("logging")
    logs.add_argument(
        "--log-level",
        type=str.upper,
        choices=LEVELS,
        default=None,
        help=f"default: ${LEVEL_ENV}, else INFO for run and standalone, WARNING for the others",
    )
    logs.add_argument(
        "--log-format",
        choices=FORMATS,
        default="text",
        help="text (default) or json: one object per line (ts, level, logger, message)",
    )


if __name__ == "__main__":
    sys.exit(main())
