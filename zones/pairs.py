"""(topic, zone) pairs resolved with the gateway's own resolve(), and the per-zone summary.

Pure Python, no Spark and no Arrow: the executors run `resolve_pairs` on each batch of topics,
and the driver turns aggregated counts into the summary. A zone is a network that reaches the
cluster through one advertised listener.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pulsar_lookup_gateway.console.table import format_table
from pulsar_lookup_gateway.lookup.errors import LookupFailure, MalformedNode
from pulsar_lookup_gateway.lookup.model import BROKERS_ROOT, parse_broker
from pulsar_lookup_gateway.lookup.protocol_data import endpoints_text, resolve_protocol
from pulsar_lookup_gateway.lookup.resolve import (
    ResolvePolicy,
    namespace_bundle,
    resolve,
    resolve_partitions,
)
from pulsar_lookup_gateway.lookup.selection import (
    LISTENER_NAME_RULE,
    ChoiceSource,
    ListenerChoice,
    is_listener_name,
)
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.lookup.view import ClusterView

CONNECT, REDIRECT, FAILED = "connect", "redirect", "failed"
FAILED_PREFIX = "failed:"  # summary rows of failed answers: "failed:<ServerError name>"
UNKNOWN_BROKER = "(unknown)"  # an owner the snapshot cannot name (no brokerId, no known URL)
PEER_CLUSTER_PREFIX = "cluster:"  # broker_id of a redirect to a peer cluster: cluster:<name>

# The answer columns, in order. `zone` is the Parquet partition column.
COLUMNS = (
    "topic",  # the full name resolved (a partition's own name); the input text if it is invalid
    "partition",  # partition index; null for a non-partitioned topic or an invalid name
    "zone",
    "listener",
    "bundle",  # 0xLOWER_0xUPPER; null when the namespace does not exist or the name is invalid
    "response",  # connect | redirect | failed
    "broker_id",  # the broker the answer points to (owner, leader or chosen broker)
    "service_url",  # the URL the zone's clients use: TLS when the zone's tls column is true
    "service_url_tls",
    "authoritative",  # null for failed answers
    "error",  # "<ServerError name>: <message>" for failed answers, else null
)


SUMMARY_COLUMNS = (
    "zone",
    "listener",
    "broker",
    "topics",
    "connect",
    "redirect",
    "no_url",
    "share",
)


# Zone names become directory names (zone=<name>) in the Parquet output.
_ZONE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_TRUE = frozenset({"true", "yes", "1", "tls", "y"})
_FALSE = frozenset({"false", "no", "0", "", "n"})


class ZonesError(ValueError):
    """Input the job cannot use: a zones file, a topics path or format. Says what and where."""


# -- zones ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Zone:
    """A network zone: its clients reach the cluster through `listener`, over TLS if `tls`."""

    name: str
    listener: str
    tls: bool = False

    @property
    def choice(self) -> ListenerChoice:
        # The zone's clients name their listener, as the gateway's listenerName query does.
        return ListenerChoice(self.listener, ChoiceSource.EXPLICIT)


def parse_zones(text: str, origin: str) -> list[Zone]:
    """CSV lines `zone,listener[,tls]`; an optional header line; blank and `#` lines skipped."""
    zones: list[Zone] = []
    seen: set[str] = set()
    for number, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        cells = [cell.strip() for cell in row]
        if not cells or not any(cells) or cells[0].startswith("#"):
            continue
        if not zones and cells[0].lower() == "zone":
            continue  # header
        zones.append(_zone(cells, f"{origin}:{number}", seen))
    if not zones:
        raise ZonesError(f"{origin}: no zones (expected lines of zone,listener[,tls])")
    return zones


def zones_from_rows(rows: Iterable[Sequence[Any]], origin: str) -> list[Zone]:
    """Zones from rows of (zone, listener[, tls]) values (a DataFrame's, a list of tuples),
    checked as the zones file is; `tls` may be a bool, None (false) or a word."""
    zones: list[Zone] = []
    seen: set[str] = set()
    for number, row in enumerate(rows, start=1):
        values = list(row)
        if len(values) == 3 and (values[2] is None or isinstance(values[2], bool)):
            values[2] = "true" if values[2] else "false"
        cells = ["" if v is None else str(v).strip() for v in values]
        zones.append(_zone(cells, f"{origin} row {number}", seen))
    if not zones:
        raise ZonesError(f"{origin}: no zones (expected rows of zone, listener[, tls])")
    return zones


def _zone(cells: list[str], where: str, seen: set[str]) -> Zone:
    if len(cells) not in (2, 3):
        raise ZonesError(f"{where}: expected zone,listener[,tls], got {len(cells)} fields")
    name, listener = cells[0], cells[1]
    if not _ZONE_NAME.fullmatch(name):
        raise ZonesError(f"{where}: zone {name!r}: use letters, digits, '_', '-' and '.'")
    if not is_listener_name(listener):
        raise ZonesError(f"{where}: zone {name!r}: listener {listener!r}: use {LISTENER_NAME_RULE}")
    flag = cells[2].lower() if len(cells) == 3 else ""
    if flag not in _TRUE and flag not in _FALSE:
        raise ZonesError(f"{where}: zone {name!r}: tls {cells[2]!r} is not true or false")
    if name in seen:
        raise ZonesError(f"{where}: zone {name!r} is listed twice")
    seen.add(name)
    return Zone(name, listener, flag in _TRUE)


def read_zones(path: str | Path) -> list[Zone]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ZonesError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ZonesError(f"cannot read {path}: not UTF-8 text (byte {exc.start})") from None
    return parse_zones(text, str(path))


def listener_gaps(nodes: Mapping[str, Any], zones: Sequence[Zone]) -> list[str]:
    """Warnings for zones whose listener some registered brokers do not advertise."""
    brokers: dict[str, set[str]] = {}
    prefix = BROKERS_ROOT + "/"
    for path, content in nodes.items():
        if path.startswith(prefix) and "/" not in path[len(prefix) :]:
            try:
                brokers[path[len(prefix) :]] = set(parse_broker(path, content).advertised_listeners)
            except MalformedNode:
                continue
    warnings_: list[str] = []
    for zone in zones:
        missing = sorted(b for b, names in brokers.items() if zone.listener not in names)
        if missing:
            shown = ", ".join(missing[:10]) + (", ..." if len(missing) > 10 else "")
            warnings_.append(
                f"zone {zone.name}: listener {zone.listener!r} is missing on "
                f"{len(missing)} of {len(brokers)} brokers ({shown})"
            )
    return warnings_


# -- one batch of topics (the executors run this) ------------------------------------------------


def describe_failure(failure: LookupFailure) -> str:
    return f"{failure.code.name}: {failure.message}"


def expand_topic(name: TopicName, view: ClusterView, policy: ResolvePolicy) -> list[TopicName]:
    """A partitioned topic's partitions (per the snapshot's partitioned-topic metadata); any
    other name as it is. Fails as the gateway's partitions lookup fails (unknown namespace)."""
    if name.is_partition:
        return [name]
    count = resolve_partitions(name, view, policy)
    if count == 0:
        return [name]
    return [name.partition(i) for i in range(count)]


def _bundle_or_none(name: TopicName, view: ClusterView) -> str | None:
    try:
        return namespace_bundle(name, view).name
    except LookupFailure:
        return None


def resolve_pairs(
    texts: Iterable[str | None],
    zones: Sequence[Zone],
    view: ClusterView,
    policy: ResolvePolicy,
) -> dict[str, list[Any]]:
    """The answer columns for every (topic, zone) pair of `texts` (one name each). Each name is
    parsed once and resolved once per distinct listener; zones that share a listener share the
    answer. A failed lookup is a row, never an exception."""
    columns: dict[str, list[Any]] = {name: [] for name in COLUMNS}
    add_topic = columns["topic"].append
    add_partition = columns["partition"].append
    add_zone = columns["zone"].append
    add_listener = columns["listener"].append
    add_bundle = columns["bundle"].append
    add_response = columns["response"].append
    add_broker = columns["broker_id"].append
    add_url = columns["service_url"].append
    add_url_tls = columns["service_url_tls"].append
    add_authoritative = columns["authoritative"].append
    add_error = columns["error"].append

    listeners = list(dict.fromkeys(zone.listener for zone in zones))
    choices = [ListenerChoice(name, ChoiceSource.EXPLICIT) for name in listeners]
    plan = [(zone.name, zone.listener, zone.tls, listeners.index(zone.listener)) for zone in zones]

    def failed(topic: str | None, partition: int | None, bundle: str | None, error: str) -> None:
        for zone_name, listener, _tls, _index in plan:
            add_topic(topic)
            add_partition(partition)
            add_zone(zone_name)
            add_listener(listener)
            add_bundle(bundle)
            add_response(FAILED)
            add_broker(None)
            add_url(None)
            add_url_tls(None)
            add_authoritative(None)
            add_error(error)

    for text in texts:
        try:
            name = TopicName.parse(text if text is not None else "")
        except LookupFailure as failure:
            failed(text, None, None, describe_failure(failure))
            continue
        try:
            targets = expand_topic(name, view, policy)
        except LookupFailure as failure:
            failed(name.full, None, _bundle_or_none(name, view), describe_failure(failure))
            continue
        for target in targets:
            partition = target.partition_index if target.partition_index >= 0 else None
            answers: list[Any] = []
            for choice in choices:
                try:
                    answers.append(resolve(target, choice, view, policy))
                except LookupFailure as failure:
                    answers.append(failure)
            failure_bundle: str | None = None
            failure_bundle_known = False
            for zone_name, listener, tls, index in plan:
                answer = answers[index]
                add_topic(target.full)
                add_partition(partition)
                add_zone(zone_name)
                add_listener(listener)
                if isinstance(answer, LookupFailure):
                    if not failure_bundle_known:
                        failure_bundle = _bundle_or_none(target, view)
                        failure_bundle_known = True
                    add_bundle(failure_bundle)
                    add_response(FAILED)
                    add_broker(None)
                    add_url(None)
                    add_url_tls(None)
                    add_authoritative(None)
                    add_error(describe_failure(answer))
                else:
                    urls = answer.urls
                    add_bundle(answer.bundle.name)
                    add_response(answer.response.value)
                    add_broker(
                        answer.broker_id
                        if answer.peer_cluster is None
                        else f"{PEER_CLUSTER_PREFIX}{answer.peer_cluster}"
                    )
                    add_url(urls.service_url_tls if tls else urls.service_url)
                    add_url_tls(urls.service_url_tls)
                    add_authoritative(answer.authoritative)
                    add_error(None)
    return columns


# -- the summary -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SummaryRow:
    zone: str
    listener: str
    broker: str  # a broker id, or failed:<ServerError name> for failed answers
    topics: int  # answers (a partition counts as a topic)
    connect: int
    redirect: int
    no_url: int  # answers whose broker has no URL for the zone's scheme (plain or TLS)
    share: float  # topics / the zone's answers

    def cells(self) -> tuple[str, ...]:
        return (
            self.zone,
            self.listener,
            self.broker,
            str(self.topics),
            str(self.connect),
            str(self.redirect),
            str(self.no_url),
            f"{self.share:.6f}",
        )


def build_summary(
    counts: Iterable[tuple[str, str, str, int, int]], zones: Sequence[Zone]
) -> list[SummaryRow]:
    """From (zone, broker, response, answers, answers without a URL) counts: one row per zone
    and broker, failed answers grouped per error code; zones in the given order, then brokers
    by topics (descending) and id, failures last."""
    per: dict[tuple[str, str], list[int]] = {}  # -> [connect, redirect, failed, no_url]
    for zone_name, broker, response, count, no_url in counts:
        tally = per.setdefault((zone_name, broker), [0, 0, 0, 0])
        tally[{CONNECT: 0, REDIRECT: 1}.get(response, 2)] += count
        tally[3] += no_url
    rows: list[SummaryRow] = []
    for zone in zones:
        entries = [(b, t, sum(t[:3])) for (z, b), t in per.items() if z == zone.name]
        total = sum(topics for _b, _t, topics in entries)
        entries.sort(key=lambda e: (e[0].startswith(FAILED_PREFIX), -e[2], e[0]))
        for broker, tally, topics in entries:
            rows.append(
                SummaryRow(
                    zone.name,
                    zone.listener,
                    broker,
                    topics,
                    tally[0],
                    tally[1],
                    tally[3],
                    topics / total if total else 0.0,
                )
            )
    return rows


def write_summary_csv(rows: Sequence[SummaryRow], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(SUMMARY_COLUMNS)
        writer.writerows(row.cells() for row in rows)


def format_summary(rows: Sequence[SummaryRow]) -> str:
    """The summary as an aligned text table (shares in percent)."""
    header = ("ZONE", "LISTENER", "BROKER", "TOPICS", "CONNECT", "REDIRECT", "NO_URL", "SHARE")
    table: list[tuple[str, ...]] = [header]
    for row in rows:
        table.append((*row.cells()[:-1], f"{100 * row.share:.1f}%"))
    lines = format_table(table, right=range(3, len(header)))
    if not rows:
        lines.append("(no topics)")
    return "\n".join(lines)


# -- protocol handlers (resolve-zones --protocol) ----------------------------------------------

#: The optional answer column of `--protocol NAME`: the owner's endpoints of that protocol
#: handler for the zone's listener, as a comma list of URLs.
ENDPOINTS_COLUMN = "endpoints"


def protocol_columns() -> tuple[str, ...]:
    """The answer columns with `--protocol`: COLUMNS, then ENDPOINTS_COLUMN."""
    return (*COLUMNS, ENDPOINTS_COLUMN)


def add_protocol_endpoints(
    columns: dict[str, list[Any]],
    zones: Sequence[Zone],
    view: ClusterView,
    policy: ResolvePolicy,
    protocol: str,
) -> dict[str, list[Any]]:
    """`resolve_pairs`'s columns with ENDPOINTS_COLUMN added: for each row, what the gateway's
    protocol route answers for that topic and zone (`lookup.protocol_data.resolve_protocol`,
    the zone's listener named explicitly), as a comma list; null where the name is invalid,
    the bundle has no owner, or the owner has no endpoint of `protocol` for the listener."""
    choices = {zone.name: zone.choice for zone in zones}
    known: dict[tuple[str, str], str | None] = {}
    cells: list[str | None] = []
    for topic, zone_name in zip(columns["topic"], columns["zone"], strict=True):
        choice = choices[zone_name]
        key = (topic or "", choice.name or "")
        if key not in known:
            known[key] = _endpoints_cell(topic, choice, view, policy, protocol)
        cells.append(known[key])
    columns[ENDPOINTS_COLUMN] = cells
    return columns


def _endpoints_cell(
    topic: str | None,
    choice: ListenerChoice,
    view: ClusterView,
    policy: ResolvePolicy,
    protocol: str,
) -> str | None:
    try:
        name = TopicName.parse(topic or "")
        answer = resolve_protocol(name, choice, protocol, view, policy)
    except LookupFailure:
        return None
    return endpoints_text(answer.endpoints) if answer.owned else None


def resolve_pairs_with_protocol(
    texts: Iterable[str | None],
    zones: Sequence[Zone],
    view: ClusterView,
    policy: ResolvePolicy,
    protocol: str,
) -> dict[str, list[Any]]:
    """`resolve_pairs` with the ENDPOINTS_COLUMN of `protocol` (columns: `protocol_columns()`)."""
    columns = resolve_pairs(texts, zones, view, policy)
    return add_protocol_endpoints(columns, zones, view, policy, protocol)
