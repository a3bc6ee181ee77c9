"""The fast plan's tables: every answer resolve-zones can give, computed once on the driver.

A topic's answers depend on its namespace, its bundle (a range of the CRC-32 of its full name),
its domain and, through its partitioned-topic metadata, on how many partitions it expands to. So
the driver answers one *representative* topic per (bundle, domain) with the per-pair path
(`zones.pairs.resolve_pairs`, hence the lookup core's resolve()), for every zone, and Spark only
looks the answers up: a topic's bundle by its hash, its answers by (bundle, domain). A
representative is a made-up name whose CRC-32 is the bundle's lower bound, forged by solving the
CRC's linear equations, so every bundle has one however narrow it is.

Whatever these tables cannot answer for sure goes to the per-pair path, topic by topic: names
Spark does not parse (`zones.spark`), namespaces that do not exist, are marked deleted (there a
topic's answer depends on whether it is a system topic) or whose answers could not be computed,
and partitioned topics whose metadata lookup fails. Pure: no Spark and no Arrow.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any
from urllib.parse import unquote_plus

from pulsar_lookup_gateway.lookup.bundles import FULL_UPPER, BundleRange, topic_hash
from pulsar_lookup_gateway.lookup.errors import LookupFailure
from pulsar_lookup_gateway.lookup.model import PARTITIONED_ROOT, POLICIES_ROOT, partitioned_path
from pulsar_lookup_gateway.lookup.resolve import ResolvePolicy, resolve_partitions
from pulsar_lookup_gateway.lookup.topics import NamespaceName, TopicDomain, TopicName
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.zones.pairs import (
    COLUMNS,
    FAILED,
    FAILED_PREFIX,
    UNKNOWN_BROKER,
    Zone,
    protocol_columns,
    resolve_pairs,
    resolve_pairs_with_protocol,
)


def answer_columns(protocol: str | None = None) -> tuple[str, ...]:
    """The answer columns a (bundle, domain, zone) determines: all but the topic and its
    partition (with `--protocol`, the endpoints column too)."""
    columns = COLUMNS if protocol is None else protocol_columns()
    return tuple(c for c in columns if c not in ("topic", "partition"))


ANSWER_COLUMNS = answer_columns()
#: Domain index in answer keys: key = bundle_id * len(DOMAINS) + domain index.
DOMAINS = tuple(TopicDomain)

# Bucketing of the hash range per namespace, so that Spark finds a topic's bundle with an equi
# join on (namespace, hash >> shift) and a range condition over one or two candidates.
MAX_BUCKET_BITS = 12
_REPRESENTATIVE = "zones-representative-"
_FREE_CHARS = 12  # the forged suffix: 12 characters of 0x60..0x6f, 48 free bits
_FREE_BASE = 0x60


@dataclass(frozen=True, slots=True)
class NamespaceEntry:
    tenant: str
    namespace: str
    namespace_id: int
    shift: int  # a topic's bucket is its hash >> shift


@dataclass(frozen=True, slots=True)
class BucketEntry:
    namespace_id: int
    bucket: int
    lower: int  # the bundle's hash range, both ends included
    highest: int
    bundle_id: int


@dataclass
class AnswerTable:
    zones: tuple[Zone, ...]
    protocol: str | None = None  # resolve-zones --protocol: the endpoints column
    namespaces: list[NamespaceEntry] = field(default_factory=list)
    buckets: list[BucketEntry] = field(default_factory=list)
    #: answer key -> one tuple of ANSWER_COLUMNS values per zone, in the zones' order
    answers: dict[int, list[tuple[Any, ...]]] = field(default_factory=dict)
    #: full topic name -> its partition count (> 0), or None: the topic takes the per-pair path
    partitioned: dict[str, int | None] = field(default_factory=dict)
    #: namespaces left to the per-pair path, and why
    per_pair_namespaces: dict[str, str] = field(default_factory=dict)

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns of each answer tuple."""
        return answer_columns(self.protocol)

    def pairs(
        self, texts: Sequence[str | None], view: ClusterView, policy: ResolvePolicy
    ) -> dict[str, list[Any]]:
        """The per-pair path's columns for `texts` (with the endpoints column for a protocol)."""
        if self.protocol is None:
            return resolve_pairs(texts, self.zones, view, policy)
        return resolve_pairs_with_protocol(texts, self.zones, view, policy, self.protocol)

    @property
    def resolved(self) -> int:
        """resolve_pairs calls made for the table (one per bundle and domain)."""
        return len(self.answers)


def answer_key(bundle_id: int, domain: TopicDomain) -> int:
    return bundle_id * len(DOMAINS) + DOMAINS.index(domain)


def build_table(
    nodes: Mapping[str, Any],
    view: ClusterView,
    zones: Sequence[Zone],
    policy: ResolvePolicy,
    protocol: str | None = None,
) -> AnswerTable:
    """The tables for a complete snapshot (`nodes`, and the view built from it)."""
    table = AnswerTable(tuple(zones), protocol)
    for namespace in namespaces_of(nodes):
        reason = _add_namespace(table, namespace, view, policy)
        if reason is not None:
            table.per_pair_namespaces[str(namespace)] = reason
    _add_partitioned(table, nodes, view, policy)
    return table


def namespaces_of(nodes: Iterable[str]) -> list[NamespaceName]:
    """The namespaces whose policies the snapshot holds, in order."""
    found: set[NamespaceName] = set()
    prefix = POLICIES_ROOT + "/"
    for path in nodes:
        if path.startswith(prefix):
            parts = path[len(prefix) :].split("/")
            if len(parts) == 2:
                found.add(NamespaceName(*parts))
    return sorted(found, key=str)


def _bucket_bits(bundles: int) -> int:
    return 0 if bundles <= 1 else min(MAX_BUCKET_BITS, (bundles - 1).bit_length() + 1)


def _add_namespace(
    table: AnswerTable, namespace: NamespaceName, view: ClusterView, policy: ResolvePolicy
) -> str | None:
    """Adds the namespace's buckets and answers; or returns why its topics take the per-pair
    path (and adds nothing)."""
    try:
        policies = view.policies(namespace)
        bundles = view.bundles(namespace)
    except LookupFailure as failure:
        return f"{failure.code.name}: {failure.message}"
    if policies is None or bundles is None:
        return "no policies"
    if policies.deleted:
        return "deleted: system topics are answered apart"
    first_bundle = len(table.answers) // len(DOMAINS)
    answers: dict[int, list[tuple[Any, ...]]] = {}
    for index, bundle in enumerate(bundles.ranges):
        for domain in DOMAINS:
            try:
                rows = _answers(table, namespace, bundle, domain, view, policy)
            except (LookupFailure, ValueError) as exc:  # a name that does not parse, ...
                return f"{type(exc).__name__}: {exc}"
            answers[answer_key(first_bundle + index, domain)] = rows
    shift = 32 - _bucket_bits(len(bundles.ranges))
    namespace_id = len(table.namespaces)
    table.namespaces.append(
        NamespaceEntry(namespace.tenant, namespace.namespace, namespace_id, shift)
    )
    for index, bundle in enumerate(bundles.ranges):
        highest = bundle.upper if bundle.upper == FULL_UPPER else bundle.upper - 1
        for bucket in range(bundle.lower >> shift, (highest >> shift) + 1):
            table.buckets.append(
                BucketEntry(namespace_id, bucket, bundle.lower, highest, first_bundle + index)
            )
    table.answers.update(answers)
    return None


def _answers(
    table: AnswerTable,
    namespace: NamespaceName,
    bundle: BundleRange,
    domain: TopicDomain,
    view: ClusterView,
    policy: ResolvePolicy,
) -> list[tuple[Any, ...]]:
    """One tuple of the table's columns per zone: the per-pair path's answers for a
    representative topic of the bundle and domain."""
    topic = representative(namespace, domain, bundle.lower)
    columns = table.pairs([topic.full], view, policy)
    count = len(table.zones)
    if columns["topic"] != [topic.full] * count or columns["partition"] != [None] * count:
        raise ValueError(f"{topic.full} did not resolve as one topic")
    if any(name != bundle.name for name in columns["bundle"]):
        raise ValueError(f"{topic.full} is not in bundle {bundle.name}")
    return [tuple(columns[c][i] for c in table.columns) for i in range(count)]


# -- representatives: a topic name with a chosen CRC-32 ----------------------------------------


def representative(namespace: NamespaceName, domain: TopicDomain, hash_value: int) -> TopicName:
    """A plain, unpartitioned, non-system topic of `namespace` whose bundle hash is
    `hash_value`. CRC-32 is affine over GF(2): flipping bits of a message's last characters
    XORs its CRC with a vector that depends only on the flipped bits and their distance from the
    end, so the bits of a forged suffix that give `hash_value` solve a linear system."""
    prefix = f"{domain.value}://{namespace}/{_REPRESENTATIVE}".encode()
    base = zlib.crc32(prefix + bytes([_FREE_BASE] * _FREE_CHARS)) & 0xFFFFFFFF
    basis = _suffix_basis()
    target = base ^ hash_value
    mask = 0
    while target:
        top = target.bit_length() - 1
        if top not in basis:  # pragma: no cover - 48 vectors span the 32 bits
            raise ValueError(f"cannot forge a name of {namespace} with hash {hash_value:#010x}")
        target ^= basis[top][0]
        mask ^= basis[top][1]
    values = [_FREE_BASE] * _FREE_CHARS
    for bit in range(4 * _FREE_CHARS):
        if mask >> bit & 1:
            values[bit // 4] |= 1 << (bit % 4)
    name = TopicName.parse(prefix.decode() + bytes(values).decode("ascii"))
    if topic_hash(name.full) != hash_value or name.is_partition:  # pragma: no cover
        raise AssertionError(f"forged {name.full} does not hash to {hash_value:#010x}")
    return name


@cache
def _suffix_basis() -> dict[int, tuple[int, int]]:
    """The CRC-32 change of flipping each low bit of the forged suffix's characters, reduced to
    a basis: leading bit -> (vector, mask of the suffix bits that make it)."""
    zero = bytes([_FREE_BASE] * _FREE_CHARS)
    base = zlib.crc32(zero)
    basis: dict[int, tuple[int, int]] = {}
    for bit in range(4 * _FREE_CHARS):
        flipped = bytearray(zero)
        flipped[bit // 4] |= 1 << (bit % 4)
        vector, mask = zlib.crc32(flipped) ^ base, 1 << bit
        while vector:
            top = vector.bit_length() - 1
            if top not in basis:
                basis[top] = (vector, mask)
                break
            vector ^= basis[top][0]
            mask ^= basis[top][1]
    return basis


# -- partitioned topics --------------------------------------------------------------------------


def _add_partitioned(
    table: AnswerTable, nodes: Iterable[str], view: ClusterView, policy: ResolvePolicy
) -> None:
    """Each partitioned-topic node's topic: its partition count as the per-pair path finds it
    (`resolve_partitions`), or None when that fails (the per-pair path answers such a topic)."""
    prefix = PARTITIONED_ROOT + "/"
    for path in nodes:
        if not path.startswith(prefix):
            continue
        parts = path[len(prefix) :].split("/")
        if len(parts) != 4:
            continue
        tenant, namespace, domain, encoded = parts
        try:
            name = TopicName.parse(f"{domain}://{tenant}/{namespace}/{unquote_plus(encoded)}")
        except LookupFailure:
            continue  # no topic name has this path
        if name.is_partition or partitioned_path(name) != path:
            continue  # a partition never expands; no other name has this path
        try:
            count = resolve_partitions(name, view, policy)
        except LookupFailure:
            table.partitioned[name.full] = None
            continue
        if count > 0:
            table.partitioned[name.full] = count


# -- the summary of the table's answers ---------------------------------------------------------


def summary_counts(
    table: AnswerTable, pairs_per_key: Iterable[tuple[int, int]]
) -> list[tuple[str, str, str, int, int]]:
    """(zone, broker, response, answers, answers without a URL), as `build_summary` takes them,
    from the number of topics (partitions included) answered with each answer key."""
    zone_index, response_index, broker_index, url_index, error_index = (
        table.columns.index(c) for c in ("zone", "response", "broker_id", "service_url", "error")
    )
    counts: list[tuple[str, str, str, int, int]] = []
    for key, topics in pairs_per_key:
        for row in table.answers[key]:
            response = row[response_index]
            if response == FAILED:
                broker = FAILED_PREFIX + str(row[error_index]).split(":", 1)[0]
                no_url = 0
            else:
                broker = row[broker_index] or UNKNOWN_BROKER
                no_url = topics if row[url_index] is None else 0
            counts.append((row[zone_index], broker, response, topics, no_url))
    return counts
