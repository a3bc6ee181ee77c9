"""resolve-zones on Spark (local[2]): a generated cluster seeded into a real ZooKeeper, a few
thousand topics (invalid names, partitioned topics, split bundles, unowned and unloading bundles,
a namespace that does not exist) and four zones (one whose listener two of the four brokers lack,
one that needs TLS from a listener without TLS URLs). The job dumps ZooKeeper itself.

Checked: rows and columns, every answer against resolve() called directly, hand-checked edge
cases, the summary CSV against the Parquet, the PNG, and a 1,000-pair sample against the
gateway's live HTTP lookups on the same ZooKeeper data.
"""

from __future__ import annotations

import csv
import json
import random
import struct
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import aiohttp
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from pulsar_lookup_gateway.gateway.cli import main
from pulsar_lookup_gateway.http_api.app import build_app
from pulsar_lookup_gateway.http_api.server import HttpServer
from pulsar_lookup_gateway.http_api.settings import HttpSettings
from pulsar_lookup_gateway.listeners.endpoints.addresses import Endpoint, Scheme
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.lookup.bundles import topic_hash
from pulsar_lookup_gateway.lookup.errors import LookupFailure
from pulsar_lookup_gateway.lookup.resolve import ResolvePolicy, resolve, resolve_partitions
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.metadata_store.admin import seed_url
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper
from pulsar_lookup_gateway.metadata_store.url import parse_metadata_url
from pulsar_lookup_gateway.metadata_store.zookeeper import ZooKeeperSource
from pulsar_lookup_gateway.serving.service import LookupService
from pulsar_lookup_gateway.zones.cli import detect_topics_format
from pulsar_lookup_gateway.zones.pairs import (
    COLUMNS,
    SUMMARY_COLUMNS,
    SummaryRow,
    Zone,
    ZonesError,
    build_summary,
    format_summary,
    parse_zones,
)
from tests.integration.zones.zone_cluster import (
    INVALID,
    NP_PARTITIONED,
    PARTITIONED,
    ZONES,
    cluster_nodes,
)

pytestmark = pytest.mark.filterwarnings(
    "ignore:PySpark does not yet fully support pandas:FutureWarning"
)

ZONES_CSV = (
    "zone,listener,tls\ndc,internal,false\ninternet,external,true\ndmz,dmz\nops,internal,yes\n"
)


def topic_texts() -> list[str | None]:
    texts: list[str | None] = []
    texts += [f"t{i}" for i in range(600)]  # short form
    texts += [f"persistent://public/default/u{i}" for i in range(500)]
    texts += [f"non-persistent://public/default/n{i}" for i in range(100)]
    texts += [f"acme/orders/o{i}" for i in range(1000)]
    texts += [f"persistent://acme/events/e{i}" for i in range(500)]
    texts += [f"persistent://ghost/ns/g{i}" for i in range(50)]
    texts += [f"persistent://acme/orders/{name}" for name in PARTITIONED]
    texts += [f"non-persistent://public/default/{name}" for name in NP_PARTITIONED]
    texts += ["persistent://acme/orders/orders-p5-partition-1"]  # a partition named directly
    texts += INVALID
    random.Random(8).shuffle(texts)
    return texts


def expected_rows(
    texts: list[str | None], zones: list[Zone], policy: ResolvePolicy, nodes: dict[str, Any]
) -> Counter[tuple[Any, ...]]:
    """Every answer computed with resolve() directly, as (column values in COLUMNS order)."""
    view = ClusterView.from_snapshot(nodes)
    rows: Counter[tuple[Any, ...]] = Counter()

    def failed(topic: str | None, partition: int | None, zone: Zone, exc: LookupFailure) -> None:
        error = f"{exc.code.name}: {exc.message}"
        key = (topic, partition, zone.name, zone.listener, "?", "failed")
        rows[(*key, None, None, None, None, error)] += 1

    for text in texts:
        try:
            name = TopicName.parse(text or "")
        except LookupFailure as exc:
            for zone in zones:
                failed(text, None, zone, exc)
            continue
        try:
            count = 0 if name.is_partition else resolve_partitions(name, view)
        except LookupFailure as exc:
            for zone in zones:
                failed(name.full, None, zone, exc)
            continue
        targets = [name.partition(i) for i in range(count)] or [name]
        for target in targets:
            index = target.partition_index if target.partition_index >= 0 else None
            for zone in zones:
                try:
                    a = resolve(target, zone.choice, view, policy)
                except LookupFailure as exc:
                    failed(target.full, index, zone, exc)
                    continue
                url = a.urls.service_url_tls if zone.tls else a.urls.service_url
                rows[
                    (target.full, index, zone.name, zone.listener, a.bundle.name,
                     a.response.value, a.broker_id, url, a.urls.service_url_tls,
                     a.authoritative, None)
                ] += 1  # fmt: skip
    return rows


def expected_count(texts: list[str | None], nodes: dict[str, Any]) -> int:
    """Rows per zone: one per input, a partitioned topic one per partition."""
    view = ClusterView.from_snapshot(nodes)
    total = 0
    for text in texts:
        try:
            name = TopicName.parse(text or "")
            total += max(1, 0 if name.is_partition else resolve_partitions(name, view))
        except LookupFailure:
            total += 1
    return total


def as_row(row: dict[str, Any], *, keep_bundle: bool) -> tuple[Any, ...]:
    values = tuple(row[c] for c in COLUMNS)
    if row["response"] == "failed" and not keep_bundle:
        values = (*values[:4], "?", *values[5:])
    return values


def read_answers(path: Path) -> list[dict[str, Any]]:
    table = pq.read_table(path, partitioning="hive")
    table = table.set_column(
        table.schema.get_field_index("zone"), "zone", table.column("zone").cast(pa.string())
    )
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


def cli(argv: list[str]) -> int:
    """The gateway's `resolve-zones` command."""
    return main(["resolve-zones", *argv])


# -- fixtures: one SparkSession and one job run per module ----------------------------------------


@dataclass
class Run:
    nodes: dict[str, Any]
    texts: list[str | None]
    metadata: str  # zk:host:port/chroot
    out: Path
    rows: list[dict[str, Any]]


@pytest.fixture(scope="module")
def zone_run(
    spark: Any, zookeeper: EmbeddedZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> Run:
    work = tmp_path_factory.mktemp("zones")
    nodes, texts = cluster_nodes(), topic_texts()
    pq.write_table(pa.table({"topic": pa.array(texts, pa.string())}), work / "topics.parquet")
    (work / "zones.csv").write_text(ZONES_CSV)
    chroot = f"/zones-{uuid.uuid4().hex[:12]}"
    metadata = f"zk:{zookeeper.connect_string}{chroot}"
    seed_url(parse_metadata_url(metadata), nodes)
    out = work / "out"
    code = cli(
        [
            "--metadata", metadata,
            "--topics", str(work / "topics.parquet"),
            "--zones", str(work / "zones.csv"),
            "--out", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    return Run(nodes, texts, metadata, out, read_answers(out / "answers"))


# -- pure parts --------------------------------------------------------------------------------


def test_zones_csv_with_header_and_tls_flags() -> None:
    assert parse_zones(ZONES_CSV, "z.csv") == ZONES
    text = "# comment\n\n a , internal \nb,external,TRUE\nc,external,0\n"
    assert parse_zones(text, "z.csv") == [
        Zone("a", "internal"),
        Zone("b", "external", True),
        Zone("c", "external", False),
    ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "no zones"),
        ("zone,listener\n", "no zones"),
        ("a\n", "z.csv:1: expected zone,listener[,tls], got 1 fields"),
        ("a,internal\na,external\n", "z.csv:2: zone 'a' is listed twice"),
        ("a,in ternal\n", "listener 'in ternal'"),
        ("a/b,internal\n", "zone 'a/b'"),
        ("a,internal,maybe\n", "tls 'maybe' is not true or false"),
        ("a,internal,true,x\n", "got 4 fields"),
    ],
)
def test_zones_csv_errors_name_the_line(text: str, problem: str) -> None:
    with pytest.raises(ZonesError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        parse_zones(text, "z.csv")


def test_topics_format_from_name_or_directory(tmp_path: Path) -> None:
    assert detect_topics_format("s3a://bucket/topics.parquet") == "parquet"
    assert detect_topics_format("hdfs:///data/topics.csv") == "csv"
    assert detect_topics_format(str(tmp_path / "topics.txt")) == "text"
    (tmp_path / "pq").mkdir()
    (tmp_path / "pq" / "_SUCCESS").write_text("")
    (tmp_path / "pq" / "part-0.snappy.parquet").write_bytes(b"")
    assert detect_topics_format(str(tmp_path / "pq")) == "parquet"
    assert detect_topics_format(f"file://{tmp_path / 'pq'}") == "parquet"
    (tmp_path / "csv").mkdir()
    (tmp_path / "csv" / "part-0.csv").write_text("topic\n")
    assert detect_topics_format(str(tmp_path / "csv")) == "csv"


def test_summary_groups_failures_per_code_and_sorts() -> None:
    zones = [Zone("z", "l"), Zone("empty", "l")]
    counts = [
        ("z", "b2:8080", "connect", 3, 0),
        ("z", "b1:8080", "connect", 3, 1),
        ("z", "b1:8080", "redirect", 2, 0),
        ("z", "failed:ServiceNotReady", "failed", 2, 0),
    ]
    rows = build_summary(counts, zones)
    assert rows == [
        SummaryRow("z", "l", "b1:8080", 5, 3, 2, 1, 0.5),
        SummaryRow("z", "l", "b2:8080", 3, 3, 0, 0, 0.3),
        SummaryRow("z", "l", "failed:ServiceNotReady", 2, 0, 0, 0, 0.2),
    ]
    table = format_summary(rows).splitlines()
    assert table[0].split() == [c.upper() for c in SUMMARY_COLUMNS]
    assert table[1].split() == ["z", "l", "b1:8080", "5", "3", "2", "1", "50.0%"]
    assert format_summary([]).endswith("(no topics)")


# -- the job on a real ZooKeeper ------------------------------------------------------------------


@pytest.mark.zookeeper
@pytest.mark.timeout(180)  # the module's SparkSession and job start in the first test
@pytest.mark.spark
def test_rows_and_columns(zone_run: Run) -> None:
    table = pq.read_table(zone_run.out / "answers", partitioning="hive")
    assert set(table.column_names) == set(COLUMNS)
    types = {f.name: str(f.type) for f in table.schema if f.name != "zone"}
    assert types["partition"] == "int32"
    assert types["authoritative"] == "bool"
    assert {t for c, t in types.items() if c not in ("partition", "authoritative")} == {"string"}
    dirs = sorted(p.name for p in (zone_run.out / "answers").iterdir() if p.is_dir())
    assert dirs == sorted(f"zone={z.name}" for z in ZONES)
    per_zone = Counter(row["zone"] for row in zone_run.rows)
    expected = expected_count(zone_run.texts, zone_run.nodes)
    assert expected > len(zone_run.texts)  # the partitioned topics expanded
    assert per_zone == {z.name: expected for z in ZONES}
    assert {row["response"] for row in zone_run.rows} == {"connect", "redirect", "failed"}


@pytest.mark.zookeeper
@pytest.mark.spark
def test_every_answer_equals_resolve_called_directly(zone_run: Run) -> None:
    got = Counter(as_row(row, keep_bundle=False) for row in zone_run.rows)
    want = expected_rows(zone_run.texts, ZONES, ResolvePolicy(), zone_run.nodes)
    assert got == want


def _rows(run: Run, topic: str | None) -> dict[str, dict[str, Any]]:
    found = {row["zone"]: row for row in run.rows if row["topic"] == topic}
    assert set(found) == {z.name for z in ZONES}, topic
    return found


def _topic(namespace: str, prefix: str, lower: int, upper: int, count: int) -> str:
    for i in range(count):
        name = f"persistent://{namespace}/{prefix}{i}"
        if lower <= topic_hash(name) < upper:
            return name
    raise AssertionError("no generated topic in that range")  # pragma: no cover


@pytest.mark.zookeeper
@pytest.mark.spark
def test_hand_checked_answers(zone_run: Run) -> None:
    # An unowned bundle: a redirect to the leader (broker 3), not authoritative; broker 3 lacks
    # the dmz listener, so the dmz zone gets an error row for it.
    unowned = _rows(zone_run, _topic("public/default", "u", 0xC0000000, 0xFFFFFFFF, 500))
    assert unowned["dc"]["response"] == "redirect"
    assert (unowned["dc"]["broker_id"], unowned["dc"]["authoritative"]) == ("b3:8080", False)
    assert unowned["dc"]["service_url"] == "pulsar://10.0.0.3:6650"
    assert unowned["internet"]["service_url"] == "pulsar+ssl://b3.example.com:6651"
    assert unowned["dmz"]["response"] == "failed"
    assert unowned["dmz"]["error"] == "ServiceNotReady: the broker do not have dmz listener"
    assert unowned["dmz"]["bundle"] == "0xc0000000_0xffffffff"
    assert unowned["dmz"]["authoritative"] is None
    # ops wants TLS from the internal listener, which has none: answered, but no URL.
    assert unowned["ops"]["response"] == "redirect"
    assert unowned["ops"]["service_url"] is None

    # A split bundle owned by broker 1, which has every listener.
    split = _rows(zone_run, _topic("acme/orders", "o", 0x00000000, 0x20000000, 1000))
    assert {row["bundle"] for row in split.values()} == {"0x00000000_0x20000000"}
    assert split["dmz"]["service_url"] == "pulsar://dmz-b1.example.org:6650"
    assert split["internet"]["service_url"] == "pulsar+ssl://b1.example.com:6651"
    assert split["internet"]["service_url_tls"] == "pulsar+ssl://b1.example.com:6651"
    assert split["dc"]["service_url_tls"] is None
    assert all(r["authoritative"] and r["response"] == "connect" for r in split.values())

    # Owned by broker 4 (listeners from its registration): no dmz listener.
    b4 = _rows(zone_run, _topic("acme/orders", "o", 0x40000000, 0x80000000, 1000))
    assert b4["dc"]["broker_id"] == "b4:8080"
    assert b4["dc"]["service_url"] == "pulsar://10.0.0.4:6650"
    assert b4["dmz"]["error"] == "ServiceNotReady: the broker do not have dmz listener"
    assert b4["dmz"]["bundle"] == "0x40000000_0x80000000"

    # A bundle being unloaded fails in every zone.
    unloading = _rows(zone_run, _topic("acme/orders", "o", 0xA0000000, 0xC0000000, 1000))
    for row in unloading.values():
        assert row["response"] == "failed"
        assert row["error"] == (
            "MetadataError: Namespace bundle acme/orders/0xa0000000_0xc0000000 is being unloaded"
        )

    # No bundle data: one bundle over the whole hash range.
    events = _rows(zone_run, _topic("acme/events", "e", 0x80000000, 0xC0000000, 500))
    assert events["dc"]["broker_id"] == "b4:8080"
    assert events["dc"]["bundle"] == "0x00000000_0xffffffff"

    ghost = _rows(zone_run, "persistent://ghost/ns/g7")
    assert ghost["dc"]["error"] == "TopicNotFound: Namespace not found"
    assert ghost["dc"]["bundle"] is None

    # Partitioned topics expand to their partitions; a partition named directly does not.
    p5 = [r for r in zone_run.rows if r["zone"] == "dc" and "/orders-p5-" in (r["topic"] or "")]
    assert sorted((r["topic"], r["partition"]) for r in p5) == sorted(
        [(f"persistent://acme/orders/orders-p5-partition-{i}", i) for i in range(6)]
        + [("persistent://acme/orders/orders-p5-partition-1", 1)]
    )
    stream = [r for r in zone_run.rows if r["zone"] == "dmz" and "/stream-2-" in (r["topic"] or "")]
    assert sorted(r["partition"] for r in stream) == [0, 1, 2, 3]
    assert all(r["topic"].startswith("non-persistent://") for r in stream)
    assert _rows(zone_run, "persistent://public/default/t3")["dc"]["partition"] is None

    # Invalid names: error rows carrying the text as given; the job went on.
    for text in INVALID:
        for row in _rows(zone_run, text).values():
            assert row["response"] == "failed", text
            assert row["error"].startswith("InvalidTopicName: Invalid topic name "), text
            assert row["partition"] is None and row["bundle"] is None
    assert _rows(zone_run, "persistent://p/cluster/ns/t")["dc"]["error"].endswith(
        "legacy v1 names (tenant/cluster/namespace/topic) are not supported"
    )


@pytest.mark.zookeeper
@pytest.mark.spark
def test_summary_csv_counts_the_answers(zone_run: Run) -> None:
    with (zone_run.out / "summary.csv").open(newline="") as handle:
        reader = csv.DictReader(handle)
        assert tuple(reader.fieldnames or ()) == SUMMARY_COLUMNS
        summary = list(reader)
    by_key = {(r["zone"], r["broker"]): r for r in summary}
    assert len(by_key) == len(summary)
    # Recount from the Parquet rows.
    recount: Counter[tuple[str, str]] = Counter()
    for row in zone_run.rows:
        if row["response"] == "failed":
            broker = "failed:" + row["error"].split(":", 1)[0]
        else:
            broker = row["broker_id"]
        recount[(row["zone"], broker)] += 1
    assert {key: int(r["topics"]) for key, r in by_key.items()} == dict(recount)
    for zone in ZONES:
        rows = [r for r in summary if r["zone"] == zone.name]
        assert {r["listener"] for r in rows} == {zone.listener}
        assert sum(float(r["share"]) for r in rows) == pytest.approx(1.0, abs=1e-4)
        for r in rows:
            answered = int(r["connect"]) + int(r["redirect"])
            failed = r["broker"].startswith("failed:")
            assert answered == (0 if failed else int(r["topics"]))
    dmz_failed = sum(
        1
        for row in zone_run.rows
        if row["zone"] == "dmz" and (row["error"] or "").startswith("ServiceNotReady")
    )
    assert dmz_failed > 0
    assert int(by_key[("dmz", "failed:ServiceNotReady")]["topics"]) == dmz_failed
    assert ("dc", "failed:ServiceNotReady") not in by_key
    assert int(by_key[("dmz", "b1:8080")]["topics"]) > 0
    assert ("dmz", "b4:8080") not in by_key  # it owns bundles, but cannot serve the dmz
    # no_url: ops asks TLS of a listener without TLS URLs; internet's listener has them.
    ops = [r for r in summary if r["zone"] == "ops" and not r["broker"].startswith("failed:")]
    assert ops and all(r["no_url"] == r["topics"] for r in ops)
    assert all(r["no_url"] == "0" for r in summary if r["zone"] == "internet")


@pytest.mark.zookeeper
@pytest.mark.spark
def test_share_chart_is_a_png(zone_run: Run) -> None:
    data = (zone_run.out / "share.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 800 and height >= 300  # four zones, one bar each, and a legend
    assert len(data) > 10_000


def _http_path(topic: str, listener: str) -> str | None:
    """The gateway's lookup route for a topic given as domain://tenant/ns/local, or None when
    the text cannot be put in that route."""
    domain, sep, rest = topic.partition("://")
    parts = rest.split("/")
    if not sep or not domain or len(parts) != 3 or not all(p.strip() for p in parts):
        return None
    segments = "/".join(quote(p, safe="") for p in (domain, *parts))
    return f"/lookup/v2/topic/{segments}?listenerName={listener}"


def _http_bases(nodes: dict[str, Any]) -> dict[tuple[str, str], str]:
    """(listener, base URL a redirect points at) -> broker id, from the snapshot."""
    bases = {}
    for path, node in nodes.items():
        if path.startswith("/loadbalance/brokers/"):
            broker = path.rsplit("/", 1)[1]
            for name, urls in node["advertisedListeners"].items():
                # A listener's own web URLs; only the internal one falls back to the broker's.
                own = [urls.get("brokerHttpUrl"), urls.get("brokerHttpsUrl")]
                fallback = [node.get("webServiceUrl")] if name == "internal" else []
                for url in [*own, *fallback]:
                    if url:
                        bases[(name, url)] = broker
    return bases


@pytest.mark.zookeeper
@pytest.mark.spark
async def test_sample_matches_the_live_gateway_over_http(zone_run: Run) -> None:
    zones = {z.name: z for z in ZONES}
    candidates = [
        (row, path)
        for row in zone_run.rows
        if row["topic"] is not None
        and (path := _http_path(row["topic"], row["listener"])) is not None
    ]
    sample = random.Random(95).sample(candidates, 1000)
    assert {row["response"] for row, _path in sample} == {"connect", "redirect", "failed"}
    assert any((row["error"] or "").startswith("InvalidTopicName") for row, _ in sample)
    bases = _http_bases(zone_run.nodes)

    source = ZooKeeperSource(parse_metadata_url(zone_run.metadata))
    await source.start()
    service = LookupService(source, internal_listener="internal")
    spec = SocketSpec(Endpoint(Scheme.HTTP, "127.0.0.1", 0), None, "test socket")
    server = HttpServer(spec, build_app(service, HttpSettings(None)))
    await server.start()
    mismatches: list[str] = []
    try:
        timeout = aiohttp.ClientTimeout(total=10)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            for row, path in sample:
                async with session.get(server.url + path, allow_redirects=False) as reply:
                    body = await reply.text()
                    location = reply.headers.get("Location")
                    status = reply.status
                problem = _compare(row, zones[row["zone"]], status, body, location, bases)
                if problem:
                    mismatches.append(f"{row['zone']} {row['topic']}: {problem}")
    finally:
        await server.stop(5)
        await source.close()
    assert mismatches == []


def _compare(
    row: dict[str, Any],
    zone: Zone,
    status: int,
    body: str,
    location: str | None,
    bases: dict[tuple[str, str], str],
) -> str | None:
    if status == 200:
        data = json.loads(body)
        plain, tls = data["brokerUrl"] or None, data["brokerUrlTls"] or None
        got: tuple[Any, ...] = ("connect", tls if zone.tls else plain, tls, True)
        want: tuple[Any, ...] = (
            row["response"], row["service_url"], row["service_url_tls"], row["authoritative"]
        )  # fmt: skip
    elif status == 307:
        assert location is not None
        target = urlsplit(location)
        query = parse_qs(target.query)
        if query.get("listenerName") != [zone.listener]:
            return f"redirect names listener {query.get('listenerName')}"
        broker = bases.get((zone.listener, f"{target.scheme}://{target.netloc}"))
        if broker != row["broker_id"]:
            return f"redirect to {location}, the job says {row['broker_id']}"
        # A 307 names the target's HTTP URL (checked above), not its binary service URLs.
        got = ("redirect", query.get("authoritative") == ["true"])
        want = (row["response"], row["authoritative"])
    elif status == 412 and row["response"] == "redirect":
        # This plain HTTP lookup is redirected to a target with no plain web URL for the
        # listener: master's 412 (the job answers the redirect as a binary client gets it).
        got = (json.loads(body)["reason"],)
        want = ("Redirected cluster's service url is not configured.",)
    else:
        reason = json.loads(body)["reason"]
        want_reason = (row["error"] or "").split(": ", 1)[-1]
        if row["response"] != "failed" or reason != want_reason:
            return f"HTTP {status} {reason!r}, the job says {row['response']} {row['error']!r}"
        return None
    return None if got == want else f"HTTP {status} gives {got}, the job says {want}"


# -- the command line with a snapshot file ---------------------------------------------------------


@pytest.mark.timeout(180)
@pytest.mark.spark
def test_cli_with_a_snapshot_file_text_and_csv_topics(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = cluster_nodes()
    snapshot = tmp_path / "snapshot.json"
    snapshot.write_text(json.dumps(nodes))
    texts: list[str | None] = [
        *(f"persistent://acme/events/e{i}" for i in range(40)),
        *(f"u{i}" for i in range(40)),
        "persistent://acme/orders/orders-p3",
        "foo://x/y/z",
    ]
    (tmp_path / "topics.txt").write_text("\n".join(t or "" for t in texts) + "\n\n  \n")
    (tmp_path / "topics.csv").write_text(
        "id,topic\n" + "".join(f"{i},{t}\n" for i, t in enumerate(texts))
    )
    (tmp_path / "zones.csv").write_text("dc,internal\ndmz,dmz\n")
    zones = [Zone("dc", "internal"), Zone("dmz", "dmz")]
    want = expected_rows(texts, zones, ResolvePolicy(), nodes)
    for kind in ("txt", "csv"):
        out = tmp_path / f"out-{kind}"
        code = cli(
            [
                "--metadata", f"file:{snapshot}",
                "--topics", str(tmp_path / f"topics.{kind}"),
                "--zones", str(tmp_path / "zones.csv"),
                "--out", str(out),
                "--default-bundles", "8",
                "--unowned-redirect", "least-loaded",
                "--partitions", "3",
            ]
        )  # fmt: skip
        assert code == 0
        printed = capsys.readouterr().out
        assert "warning: zone dmz: listener 'dmz' is missing on 2 of 4 brokers" in printed
        # The retired options are accepted and reported as ignored.
        assert "warning: --default-bundles is ignored" in printed
        assert "warning: --unowned-redirect is ignored" in printed
        assert "ZONE" in printed and "failed:InvalidTopicName" in printed
        assert f"resolved {2 * (len(texts) + 3)} (topic, zone) pairs" in printed
        rows = read_answers(out / "answers")
        assert Counter(as_row(r, keep_bundle=False) for r in rows) == want
        events = [r for r in rows if "/acme/events/" in (r["topic"] or "")]
        # No bundle data: the one full bundle, owned by b4 (which has no dmz listener).
        assert {r["bundle"] for r in events} == {"0x00000000_0xffffffff"}
        dc = [r for r in events if r["zone"] == "dc"]
        assert {(r["response"], r["broker_id"], r["authoritative"]) for r in dc} == {
            ("connect", "b4:8080", True)
        }
        assert (out / "summary.csv").exists() and (out / "share.png").exists()


@pytest.mark.spark
def test_cli_usage_errors(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snapshot = tmp_path / "snapshot.json"
    snapshot.write_text(json.dumps(cluster_nodes()))
    zones = tmp_path / "zones.csv"
    zones.write_text("dc,internal\n")
    topics = tmp_path / "topics.csv"
    topics.write_text("name\npersistent://public/default/a\n")
    base = ["--out", str(tmp_path / "out")]

    def run(metadata: str, topics_path: Path, zones_path: Path) -> str:
        argv = ["--metadata", metadata, "--topics", str(topics_path), "--zones", str(zones_path)]
        assert cli([*argv, *base]) == 2
        return capsys.readouterr().err

    assert "no 'topic' column (columns: name)" in run(f"file:{snapshot}", topics, zones)
    # the inputs are checked first, then the metadata
    good_topics = tmp_path / "good.csv"
    good_topics.write_text("topic\npersistent://public/default/a\n")
    assert "cannot read" in run(f"file:{tmp_path / 'missing.json'}", good_topics, zones)
    assert "neither zk:" in run("http://x", good_topics, zones)
    bad_zones = tmp_path / "bad.csv"
    bad_zones.write_text("dc\n")
    assert "bad.csv:1: expected zone,listener[,tls]" in run(f"file:{snapshot}", topics, bad_zones)
    assert "--topics" in run(f"file:{snapshot}", tmp_path / "nothing.parquet", zones)
    assert not (tmp_path / "out").exists()
