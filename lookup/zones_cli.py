"""The `resolve-zones` subcommand: its arguments and a handler that loads Spark only when run.

Importing this module is cheap (no pyspark, pyarrow or matplotlib): the gateway's command line
registers the subcommand at every start.
"""

from __future__ import annotations

import argparse
from typing import Any

from lookup.bundles import DEFAULT_NUM_BUNDLES
from lookup.resolve import UnownedBundleRedirect

TOPICS_FORMATS = ("auto", "parquet", "csv", "text")
DEFAULT_MASTER = "local[*]"

DESCRIPTION = """\
Resolve every (topic, zone) pair on Spark with the gateway's own resolve(): the driver takes one
metadata snapshot (ZooKeeper or a snapshot file), broadcasts it, and the executors answer each
pair as the gateway would answer a lookup that names the zone's listener.

Writes <out>/answers/ (Parquet, partitioned by zone), <out>/summary.csv (topics per zone and
broker) and <out>/share.png (topic share per broker per zone), and prints the summary.
"""


def add_arguments(parser: argparse.ArgumentParser, *, master_default: str | None) -> None:
    parser.add_argument(
        "--metadata", required=True, help="zk:host:port[,host:port][/chroot] or file:SNAPSHOT"
    )
    parser.add_argument(
        "--topics",
        required=True,
        help="topics: Parquet or CSV with a 'topic' column, or text with one topic per line",
    )
    parser.add_argument(
        "--topics-format",
        choices=TOPICS_FORMATS,
        default="auto",
        help="default: from the file name (.parquet, .csv, anything else is text), or from the "
        "files inside a directory",
    )
    parser.add_argument(
        "--zones", required=True, help="CSV of zone,listener[,tls] (a header line is optional)"
    )
    parser.add_argument(
        "--out", required=True, help="output directory (summary.csv, share.png, answers/)"
    )
    parser.add_argument(
        "--answers",
        help="where the Parquet answers go, any Hadoop path (default: <out>/answers)",
    )
    parser.add_argument(
        "--master",
        default=master_default,
        help=f"Spark master (default: {master_default or 'from spark-submit'})",
    )
    parser.add_argument(
        "--default-bundles",
        type=_positive,
        default=DEFAULT_NUM_BUNDLES,
        metavar="N",
        help="bundles of a namespace whose policies name none "
        f"(defaultNumberOfNamespaceBundles, default {DEFAULT_NUM_BUNDLES})",
    )
    parser.add_argument(
        "--unowned-redirect",
        choices=[r.value for r in UnownedBundleRedirect],
        default=UnownedBundleRedirect.LEADER.value,
        help="where a lookup of a bundle nobody owns is sent (default: leader, as Pulsar does)",
    )
    parser.add_argument(
        "--partitions",
        type=_positive,
        metavar="N",
        help="Spark partitions of the topic list (default: the input's, at least twice the "
        "default parallelism)",
    )


def register(subparsers: Any) -> None:
    """Add `resolve-zones` to the gateway's command line (`subparsers` of argparse)."""
    parser = subparsers.add_parser(
        "resolve-zones",
        help="resolve every topic for every network zone on Spark",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser, master_default=DEFAULT_MASTER)
    parser.set_defaults(handler=_handle)


def build_parser(prog: str, *, master_default: str | None) -> argparse.ArgumentParser:
    """A stand-alone parser, for `spark-submit lookup/zones.py ...`."""
    parser = argparse.ArgumentParser(
        prog=prog, description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(parser, master_default=master_default)
    return parser


def _handle(args: argparse.Namespace) -> int:
    from lookup.zones import run  # pyspark, pyarrow and matplotlib load here, not at start-up

    return run(args)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number")
    return value
