"""resolve-zones: its arguments, and the job (input checks, snapshot, Spark, outputs).

Importing this module is cheap (no pyspark, pyarrow or matplotlib): `resolve-zones --help` and
argument errors answer without Spark, and `run` loads Spark only when the job runs. `main` is the
entry point for `spark-submit ... zones/cli.py ...`.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from pulsar_lookup_gateway.console.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from pulsar_lookup_gateway.lookup.protocol_data import PROTOCOL_NAME_RULE, is_protocol_name
from pulsar_lookup_gateway.lookup.resolve import ResolvePolicy
from pulsar_lookup_gateway.metadata_store.snapshot import SnapshotError, read_nodes
from pulsar_lookup_gateway.metadata_store.url import parse_metadata_url
from pulsar_lookup_gateway.zones.class_archive import (
    CACHE_FOLDER,
    ClassArchive,
    ClassArchiveError,
)
from pulsar_lookup_gateway.zones.inputs import check_outputs, check_topics, local_path
from pulsar_lookup_gateway.zones.pairs import (
    SummaryRow,
    Zone,
    ZonesError,
    format_summary,
    listener_gaps,
    read_zones,
    write_summary_csv,
)

if TYPE_CHECKING:
    from pulsar_lookup_gateway.zones.answer_table import AnswerTable

TOPICS_FORMATS = ("auto", "parquet", "csv", "text")
DEFAULT_MASTER = "local[*]"
#: What the job loads once its inputs are checked (the "spark" extra).
SPARK_MODULES = ("pyspark", "pyarrow", "matplotlib")

DESCRIPTION = """\
Resolve every (topic, zone) pair on Spark with the gateway's own resolve(): the driver takes one
metadata snapshot (ZooKeeper or a snapshot file), broadcasts it, and the executors answer each
pair as the gateway would answer a lookup that names the zone's listener.

Writes <out>/answers/ (Parquet, partitioned by zone), <out>/summary.csv (topics per zone and
broker) and <out>/share.png (topic share per broker per zone), and prints the summary.
"""

RETIRED_DEFAULT_BUNDLES = (
    "a namespace whose policies hold no bundle data has one bundle, as on Pulsar's brokers"
)
RETIRED_UNOWNED_REDIRECT = (
    "a bundle nobody owns always gets a non-authoritative redirect (the leader, else a broker "
    "chosen by the bundle's hash)"
)


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
        "--cluster-name",
        metavar="NAME",
        help="the local cluster (the gateway's clusterName): namespaces it does not serve are "
        "answered as the gateway answers them, redirected to a peer cluster or failed "
        "(default: no geo-replication checks)",
    )
    # Retired: accepted so that existing scripts still run, and reported as ignored.
    parser.add_argument("--default-bundles", metavar="N", help=argparse.SUPPRESS)
    parser.add_argument("--unowned-redirect", help=argparse.SUPPRESS)
    parser.add_argument(
        "--partitions",
        type=_positive,
        metavar="N",
        help="Spark partitions of the topic list (default: the input's, at least twice the "
        "default parallelism)",
    )
    archive = parser.add_mutually_exclusive_group()
    archive.add_argument(
        "--class-archive",
        metavar="PATH",
        help="a local master's JVM class-data archive: the first run that names it records it "
        "(that run is slower), later runs map Spark's classes from it and start sooner "
        f"(default: one in ~/.cache/{CACHE_FOLDER}/ or $XDG_CACHE_HOME/{CACHE_FOLDER}/, per "
        "Java and Spark installation)",
    )
    archive.add_argument(
        "--no-class-archive",
        action="store_true",
        help="a local master's driver JVM neither maps nor records a class-data archive",
    )
    parser.add_argument(
        "--protocol",
        metavar="NAME",
        help="a protocol handler (kafka, mqtt, grpc, ...): add an 'endpoints' column, the "
        "owner's endpoints of it for the zone's listener, as the gateway's protocol route "
        "answers (a comma list; empty where the bundle is unowned or the owner has none)",
    )


def build_parser(prog: str, *, master_default: str | None) -> argparse.ArgumentParser:
    """A stand-alone parser, for `spark-submit zones/cli.py ...`."""
    parser = argparse.ArgumentParser(
        prog=prog, description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(parser, master_default=master_default)
    return parser


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number")
    return value


def detect_topics_format(path: str) -> str:
    """parquet, csv or text, from the name, or from the files inside a local directory."""
    lowered = path.lower().rstrip("/")
    if lowered.endswith((".parquet", ".pq")):
        return "parquet"
    if lowered.endswith((".csv", ".csv.gz", ".csv.bz2")):
        return "csv"
    local = local_path(path)
    if local is not None and local.is_dir():
        names = [
            p.name.lower()
            for p in local.rglob("*")
            if p.is_file() and not p.name.startswith((".", "_"))
        ]
        if any(n.endswith((".parquet", ".pq")) for n in names):
            return "parquet"
        if any(n.endswith(".csv") or ".csv." in n for n in names):
            return "csv"
    return "text"


def _fail(message: str, code: int) -> int:
    print(f"resolve-zones: {message}", file=sys.stderr)
    return code


def show_progress(stream: TextIO | None, env: Mapping[str, str] | None = None) -> bool:
    """Whether Spark draws its console progress bar (`spark.ui.showConsoleProgress`) on the
    driver's stderr: on a terminal, unless TERM=dumb; never into a pipe, a file or a log."""
    if stream is None:
        return False
    try:
        tty = stream.isatty()
    except (ValueError, OSError):  # closed, or detached
        return False
    return tty and (os.environ if env is None else env).get("TERM", "") != "dumb"


def run(args: argparse.Namespace) -> int:
    """The job, for the arguments of `add_arguments`. Every input is checked before Spark
    starts: one line on stderr and exit 2 for a bad one; exit 1 for a ZooKeeper that does not
    answer within 5 s (as `seed`, `dump` and `lookup` do)."""
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    missing = [name for name in SPARK_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        return _fail(
            f"needs {', '.join(missing)} (the 'spark' extra): "
            "pip install -e '.[spark]' in the checkout, or `make install`",
            EXIT_FAILED,
        )
    try:
        zones = read_zones(args.zones)
    except ZonesError as exc:
        return _fail(f"--zones: {exc}", EXIT_USAGE)
    try:
        url = parse_metadata_url(args.metadata)
    except ValueError as exc:
        return _fail(f"--metadata: {exc}", EXIT_USAGE)
    topics_format = args.topics_format
    if topics_format == "auto":
        topics_format = detect_topics_format(args.topics)
    out = Path(args.out)
    answers = args.answers or str(out / "answers")
    try:
        check_topics(args.topics, topics_format)
    except ZonesError as exc:
        return _fail(f"--topics: {exc}", EXIT_USAGE)
    try:
        check_outputs(out, answers)
    except ZonesError as exc:
        return _fail(str(exc), EXIT_USAGE)
    for option, why in (
        ("default_bundles", RETIRED_DEFAULT_BUNDLES),
        ("unowned_redirect", RETIRED_UNOWNED_REDIRECT),
    ):
        if getattr(args, option) is not None:
            print(f"warning: --{option.replace('_', '-')} is ignored: {why}", flush=True)
    policy = ResolvePolicy(cluster_name=args.cluster_name)
    protocol = getattr(args, "protocol", None)
    if protocol is not None and not is_protocol_name(protocol):
        return _fail(f"--protocol: {protocol!r}: use {PROTOCOL_NAME_RULE}", EXIT_USAGE)

    archive = None
    if args.class_archive is not None:
        # (under spark-submit the driver JVM is running already, whatever --master says)
        under_submit = "PYSPARK_GATEWAY_PORT" in os.environ
        if args.master is None or not args.master.startswith("local") or under_submit:
            print(
                "warning: --class-archive is for a local master; under spark-submit pass "
                "-XX:SharedArchiveFile in --driver-java-options",
                flush=True,
            )
        else:
            try:
                archive = ClassArchive.at(args.class_archive)
            except ClassArchiveError as exc:
                return _fail(f"--class-archive: {exc}", EXIT_USAGE)

    started = time.perf_counter()
    try:
        nodes = read_nodes(url)
    except SnapshotError as exc:
        return _fail(f"--metadata: {exc}", EXIT_USAGE)
    except Exception as exc:  # ZooKeeperUnreachable, and kazoo's errors (no common base)
        return _fail(f"--metadata: cannot read {url}: {exc}", EXIT_FAILED)
    print(f"snapshot: {len(nodes)} znodes from {url}; {len(zones)} zone(s)", flush=True)
    for warning in listener_gaps(nodes, zones):
        print(f"warning: {warning}", flush=True)

    # Spark, Arrow and matplotlib load here, once the inputs are known to be good; matplotlib
    # (a second) and the answer table (zones.answer_table) in the background while Spark's
    # JVM starts (the main thread waits for it).
    background = ThreadPoolExecutor(1, thread_name_prefix="resolve-zones-prepare")
    answer_table = background.submit(_answer_table, nodes, zones, policy, protocol)
    chart_module = background.submit(importlib.import_module, "pulsar_lookup_gateway.zones.chart")
    background.shutdown(wait=False)
    from pyspark.errors import AnalysisException

    from pulsar_lookup_gateway.zones.executors import ExecutorPythonError
    from pulsar_lookup_gateway.zones.spark import plan_zones, read_topics, session

    started_session = session(
        args.master,
        progress=show_progress(sys.stderr),
        class_archive=archive,
        default_archive=not getattr(args, "no_class_archive", False),
        on_archive=_announce_recording,
    )
    spark, owned, archive = started_session.spark, started_session.owned, started_session.archive
    if started_session.note:
        print(f"class archive: none ({started_session.note})", flush=True)
    try:
        try:
            topics = read_topics(spark, args.topics, topics_format)
        except AnalysisException as exc:
            rows: list[SummaryRow] | int = _fail(
                f"--topics: {args.topics} ({topics_format}): {exc}", EXIT_USAGE
            )
        except ZonesError as exc:
            rows = _fail(f"--topics: {exc}", EXIT_USAGE)
        else:
            # The answer table (zones.answer_table) plus Spark's engine; the summary from
            # Spark aggregations of the same pass, not from the written answers.
            try:
                plan = plan_zones(
                    spark,
                    nodes,
                    topics,
                    zones,
                    policy,
                    partitions=args.partitions,
                    protocol=protocol,
                    table=answer_table.result(),
                )
            except ExecutorPythonError as exc:
                rows = _fail(str(exc), EXIT_FAILED)
            else:
                try:
                    plan.write(answers)
                    rows = plan.summary()
                finally:
                    plan.release()
    except BaseException:
        if owned:
            _stop(spark, archive)
        raise
    # Spark stops (a recording JVM writes its archive as it exits) while the outputs are written.
    stopper = ThreadPoolExecutor(1, thread_name_prefix="resolve-zones-stop")
    stopping = stopper.submit(_stop, spark, archive) if owned else None
    stopper.shutdown(wait=False)
    try:
        if isinstance(rows, int):
            return rows
        summary_path, chart_path = out / "summary.csv", out / "share.png"
        write_summary_csv(rows, summary_path)
        chart_module.result().plot_share(rows, zones, chart_path)
    finally:
        if stopping is not None:
            stopping.result()
    elapsed = time.perf_counter() - started
    pairs = sum(row.topics for row in rows)
    print(format_summary(rows))
    print(f"resolved {pairs} (topic, zone) pairs in {elapsed:.1f} s -> {answers}")
    print(f"summary: {summary_path}")
    print(f"chart:   {chart_path}")
    return EXIT_OK


#: What recording the class archive costs the run that does it, said as it starts (measured on
#: a 2-core machine, docs/commands/resolve-zones.md: 1,000 topics took 42 s recording, 14 s
#: with the archive, 21 s without one; minutes when the machine is busy).
RECORDING_COST = "this run takes some 20-30 s longer, more on a busy machine"


def _announce_recording(archive: ClassArchive) -> None:
    """Says, before the JVM starts, that this run records the class archive: what, what it
    costs, where it is kept and how to skip it (later runs only say `used`)."""
    if archive.records:
        print(
            f"class archive: recording the driver JVM's classes into {archive.path} (about "
            f"190 MB, written as the JVM exits; {RECORDING_COST}, once per Java and Spark "
            "installation; later runs map it and start sooner; --no-class-archive skips it)",
            flush=True,
        )


def _stop(spark: Any, archive: ClassArchive | None) -> None:
    """Stops the session this job started, and says what became of its class archive."""
    from pulsar_lookup_gateway.zones.spark import stop_session

    if archive is not None and archive.records:
        print("class archive: the JVM is writing it as it exits...", flush=True)
    started = time.perf_counter()
    recorded = stop_session(spark, archive)
    if archive is not None:
        state = "recorded" if recorded else "not recorded" if archive.records else "used"
        took = f" (stopping and writing it took {time.perf_counter() - started:.0f} s)"
        print(f"class archive: {state} {archive.path}{took if recorded else ''}", flush=True)


def _answer_table(
    nodes: dict[str, Any], zones: list[Zone], policy: ResolvePolicy, protocol: str | None
) -> AnswerTable:
    from pulsar_lookup_gateway.lookup.view import ClusterView
    from pulsar_lookup_gateway.zones.answer_table import build_table

    return build_table(nodes, ClusterView.from_snapshot(nodes), zones, policy, protocol)


def main(argv: Sequence[str] | None = None) -> int:
    """`spark-submit [--py-files ...] zones/cli.py --metadata ... --topics ... ...`"""
    args = build_parser("resolve-zones", master_default=None).parse_args(argv)
    return run(args)


if __name__ == "__main__":
    # spark-submit runs this file as a script, with its own folder first on sys.path, where the
    # files beside it would shadow top-level modules of the same names: take it off. The
    # functions Spark ships to the executors live in pulsar_lookup_gateway.zones.spark.
    _here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if str(Path(p or ".").resolve()) != _here]
    sys.exit(main())
