"""resolve-zones against its floor, in the same run: the plainest PySpark job that does what
resolve-zones must do at least, run alternately with it on the same input.

    .venv/bin/python -m bench.zones_floor [--topics 1000000] [--pairs 5] [--master local[2]]
                                          [--no-class-archive] [--events] [--no-write]

The input is bench.zones's: 1 M topics (one Parquet file) over 10 namespaces x 64 bundles of a
20-broker cluster, 3 zones, the metadata seeded into a real ZooKeeper (an embedded one,
started here) that resolve-zones reads with `--metadata zk:...`.

- resolve-zones: the command as a user runs it (`python -m pulsar_lookup_gateway resolve-zones
  ... --master local[2]`): the snapshot read from ZooKeeper, the answers written as Parquet
  partitioned by zone, the summary, its CSV and chart; the default class archive in a cache
  folder of its own (`--no-class-archive`: none).
- the floor: a child process that starts the same session (`zones.spark.local_session`: the same
  master, Spark settings and driver JVM options; a class archive of its own, or none with
  `--no-class-archive`), reads the same topics file, cross-joins the zones read from the same
  zones file, computes each answer column from the topic with Spark built-ins only (the CRC-32
  of the name picks a bundle and a broker) and writes the same number of rows, with the same
  columns, as Parquet partitioned by zone.

Each is timed from its process's start to its exit. A first run of each records its class
archive and is not counted; then `--pairs` pairs run, each pair's order alternating, and the
figure is the median of the per-pair ratios resolve-zones / floor, with their spread. Results go
to BENCHMARKS.md under "## resolve-zones against its floor (Spark)".
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import write_section
from bench.zones import ZONES, event_log, snapshot, submit_args, write_topics, write_zones

SECTION = "## resolve-zones against its floor (Spark)"
COMMAND = "python -m bench.zones_floor"


# -- the floor job (in a child process) ----------------------------------------------------------


def floor_job(work: Path, master: str, archive_path: str | None, out: Path) -> None:
    """The floor: start the JVM, read the topics, cross-join the zones, a value per row from
    built-ins, write the rows partitioned by zone; stop the JVM."""
    from pyspark.sql import functions as F

    from pulsar_lookup_gateway.zones.class_archive import ClassArchive, start_mapping
    from pulsar_lookup_gateway.zones.spark import local_session, stop_session

    archive = ClassArchive.at(archive_path) if archive_path else None
    given = {"spark.ui.showConsoleProgress": "false"}
    spark, archive, _ = start_mapping(
        archive, lambda a: local_session(master, given, app_name="floor", class_archive=a)
    )
    try:
        topics = spark.read.parquet(str(work / "topics.parquet")).select("topic")
        zones = spark.read.schema("zone STRING, listener STRING, tls STRING").csv(
            str(work / "zones.csv"), header=True
        )
        pairs = topics.crossJoin(F.broadcast(zones))
        # The value per row: the CRC-32 of the name picks one of 640 bundles and 20 brokers, so
        # that the columns hold as many distinct values as resolve-zones' (Parquet's encoding
        # costs depend on it); concatenations only.
        crc = F.crc32(F.col("topic"))
        broker = F.concat(F.lit("broker-"), (crc % 20).cast("string"))
        host = F.concat(broker, F.lit(".example.com"))
        answers = pairs.select(
            "topic",
            F.lit(None).cast("int").alias("partition"),
            "zone",
            "listener",
            F.concat(F.lit("0x"), (crc % 640).cast("string")).alias("bundle"),
            F.lit("connect").alias("response"),
            F.concat(broker, F.lit(":8080")).alias("broker_id"),
            F.concat(F.lit("pulsar://"), host, F.lit(":6650")).alias("service_url"),
            F.concat(F.lit("pulsar+ssl://"), host, F.lit(":6651")).alias("service_url_tls"),
            F.lit(True).alias("authoritative"),
            F.lit(None).cast("string").alias("error"),
        )
        answers.write.mode("overwrite").partitionBy("zone").parquet(str(out))
    finally:
        stop_session(spark, archive)


# -- the runs ------------------------------------------------------------------------------------


@dataclass
class Run:
    kind: str  # resolve-zones | floor
    wall_s: float
    cpu_s: float  # the process tree's, as far as its processes were reaped
    said: str  # what the run printed about its class archive


def _timed(argv: list[str], env: dict[str, str], kind: str) -> Run:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        code = subprocess.run(argv, env=env, stdout=out, stderr=err, timeout=1200).returncode
        wall = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if code != 0:
        raise RuntimeError(f"{kind} exited with {code}: {stdout[-1000:]} {stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    said = " | ".join(line for line in stdout.splitlines() if line.startswith("class archive"))
    return Run(kind, wall, cpu, said)


def _env(work: Path, events: bool) -> dict[str, str]:
    env = dict(os.environ)
    for key in ("PYSPARK_SUBMIT_ARGS", "SPARK_CONF_DIR"):
        env.pop(key, None)
    if events:
        env["PYSPARK_SUBMIT_ARGS"] = submit_args(event_log(work / "events"))
    return env


def resolve_zones_run(
    work: Path, metadata: str, master: str, archive: bool, env: dict[str, str]
) -> Run:
    argv = [
        sys.executable, "-m", "pulsar_lookup_gateway", "resolve-zones",
        "--metadata", metadata,
        "--topics", str(work / "topics.parquet"),
        "--zones", str(work / "zones.csv"),
        "--out", str(work / "out-resolve-zones"),
        "--master", master,
        *([] if archive else ["--no-class-archive"]),
    ]  # fmt: skip
    return _timed(argv, {**env, "XDG_CACHE_HOME": str(work / "cache")}, "resolve-zones")


def floor_run(work: Path, master: str, archive: bool, env: dict[str, str]) -> Run:
    argv = [
        sys.executable, "-m", "bench.zones_floor", "--floor-job", str(work),
        "--master", master,
        *(["--floor-archive", str(work / "floor.jsa")] if archive else []),
    ]  # fmt: skip
    return _timed(argv, env, "floor")


def _rows(path: Path) -> int:
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    return int(pq.ParquetDataset(path).read(columns=["response"]).num_rows)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=1_000_000)
    parser.add_argument("--pairs", type=int, default=5, help="alternating pairs counted")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--no-class-archive", action="store_true")
    parser.add_argument("--events", action="store_true", help="Spark event logs (both)")
    parser.add_argument("--no-write", action="store_true", help="do not update BENCHMARKS.md")
    parser.add_argument("--out", type=Path, default=Path("BENCHMARKS.md"))
    parser.add_argument("--floor-job", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--floor-archive", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.floor_job is not None:
        floor_job(args.floor_job, args.master, args.floor_archive, args.floor_job / "out-floor")
        return

    from pulsar_lookup_gateway.metadata_store.admin import seed_url
    from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper
    from pulsar_lookup_gateway.metadata_store.url import parse_metadata_url

    archive = not args.no_class_archive
    with tempfile.TemporaryDirectory(prefix="bench-zones-floor-") as temp:
        work = Path(temp)
        write_topics(work / "topics.parquet", args.topics)
        write_zones(work / "zones.csv")
        (work / "cache").mkdir()
        env = _env(work, args.events)
        (work / "zk").mkdir()
        with EmbeddedZooKeeper(data_dir=work / "zk") as zookeeper:
            metadata = f"zk:{zookeeper.connect_string}/bench"
            seed_url(parse_metadata_url(metadata), snapshot())
            print(f"{args.topics} topics x {len(ZONES)} zones, metadata {metadata}", flush=True)
            first = [
                resolve_zones_run(work, metadata, args.master, archive, env),
                floor_run(work, args.master, archive, env),
            ]
            for run in first:
                print(f"first {run.kind}: {run.wall_s:.1f} s ({run.said or 'no archive'})")
            want = args.topics * len(ZONES)
            for path in ("out-resolve-zones/answers", "out-floor"):
                rows = _rows(work / path)
                assert rows == want, (path, rows, want)
            pairs: list[tuple[Run, Run]] = []
            for i in range(args.pairs):
                if i % 2 == 0:
                    ours = resolve_zones_run(work, metadata, args.master, archive, env)
                    floor = floor_run(work, args.master, archive, env)
                else:
                    floor = floor_run(work, args.master, archive, env)
                    ours = resolve_zones_run(work, metadata, args.master, archive, env)
                pairs.append((ours, floor))
                print(
                    f"pair {i + 1}: resolve-zones {ours.wall_s:.1f} s (CPU {ours.cpu_s:.1f} s), "
                    f"floor {floor.wall_s:.1f} s (CPU {floor.cpu_s:.1f} s), "
                    f"ratio {ours.wall_s / floor.wall_s:.2f}",
                    flush=True,
                )
        if args.events:
            kept = Path(tempfile.mkdtemp(prefix="zones-floor-events-"))
            for log in (work / "events").iterdir():
                log.rename(kept / log.name)
            print(f"event logs: {kept}")
    lines = report(args, first, pairs)
    print("\n".join(lines))
    if not args.no_write:
        write_section(args.out, SECTION, lines)


def report(args: argparse.Namespace, first: list[Run], pairs: list[tuple[Run, Run]]) -> list[str]:
    ratios = sorted(ours.wall_s / floor.wall_s for ours, floor in pairs)
    cpu = sorted(ours.cpu_s / floor.cpu_s for ours, floor in pairs)
    ours_s = statistics.median(ours.wall_s for ours, _ in pairs)
    floor_s = statistics.median(floor.wall_s for _, floor in pairs)
    archive = (
        "each with a class archive of its own" if not args.no_class_archive else "no class archive"
    )
    flags = "" if not args.no_class_archive else " --no-class-archive"
    return [
        SECTION,
        "",
        f"`{COMMAND} --topics {args.topics} --pairs {args.pairs}{flags}` "
        f"({platform.machine()}, {os.cpu_count()} cores, shared with other work; "
        f"{args.master}, {archive}; metadata read from a real ZooKeeper):",
        "",
        f"- resolve-zones / floor: median **{statistics.median(ratios):.2f}x** over {len(pairs)} "
        f"alternating pairs (spread {ratios[0]:.2f}-{ratios[-1]:.2f}x)",
        f"- CPU of the process trees, resolve-zones / floor: median {statistics.median(cpu):.2f}x "
        f"(spread {cpu[0]:.2f}-{cpu[-1]:.2f}x)",
        f"- medians: resolve-zones {ours_s:.1f} s, floor {floor_s:.1f} s "
        f"({args.topics * len(ZONES):,} (topic, zone) pairs written)",
        f"- first runs (recording the class archive): resolve-zones {first[0].wall_s:.1f} s, "
        f"floor {first[1].wall_s:.1f} s",
        "",
    ]


if __name__ == "__main__":
    main(sys.argv[1:])
