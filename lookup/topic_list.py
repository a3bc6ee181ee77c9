"""Topic listing (GET_TOPICS_OF_NAMESPACE): the persistent topics of a namespace, as Pulsar's
broker lists them, filtered by a client's pattern and summed up by Pulsar's list hash.

The rules, as the broker applies them:

- The persistent topics of ``tenant/ns`` are the children of
  ``/managed-ledgers/<tenant>/<ns>/persistent``, each a URL-encoded local name (decoded as Java's
  URLDecoder does: ``+`` is a space). Pulsar's system topics are left out: the namespace-event
  and transaction-buffer topics (``__change_events``, ``__transaction_buffer_snapshot`` and its
  ``_segments`` / ``_indexes``), the transaction coordinator's topics in ``pulsar/system``, and
  any topic ending in ``__transaction_pending_ack`` (judged on the partitioned topic's name).
- A pattern (``topics_pattern``) filters only when it is at most ``subscriptionPatternMaxLength``
  characters (50); a longer one answers the whole list unfiltered (``filtered=false``), and the
  client filters it itself. A ``persistent://`` or ``non-persistent://`` scheme in front of the
  pattern is dropped, and each topic matches on its partitioned name without the scheme
  (``tenant/ns/local``), as a whole (Java's ``matches()``).
- The hash is CRC-32C (Castagnoli) of the sorted names joined by ``,``, written as Guava's
  ``HashCode.toString()`` writes a 32-bit hash: the four bytes little-endian, in hex. When the
  client's ``topics_hash`` equals it, the answer has no topics and ``changed=false``.

The gateway's own rule: a pattern that Python's backtracking ``re`` could match in more than
linear time (a backreference or lookaround, more than one repetition of variable length, an
alternation inside that repetition, or too many alternatives) is treated like an over-long one:
answered unfiltered. The broker matches with RE2J, which has no such cases; the client filters
an unfiltered list itself, so the subscription gets the same topics either way.

Pure: reads the ClusterView only (NodeNotLoaded when it lacks the children list).
"""

from __future__ import annotations

import functools
import re
import warnings
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import unquote_plus

from pulsar_lookup_gateway.lookup.errors import FailureKind, InvalidTopicName, LookupFailure
from pulsar_lookup_gateway.lookup.topics import NamespaceName, TopicDomain, TopicName
from pulsar_lookup_gateway.lookup.untrusted import printable
from pulsar_lookup_gateway.lookup.view import ClusterView

with warnings.catch_warnings():  # deprecated as a public name, still the parser `re` uses
    warnings.simplefilter("ignore", DeprecationWarning)
    import sre_constants as _sre
    import sre_parse

__all__ = [
    "DEFAULT_PATTERN_MAX_LENGTH",
    "MANAGED_LEDGERS_ROOT",
    "TopicLister",
    "TopicListing",
    "compile_topics_pattern",
    "crc32c",
    "is_system_topic",
    "parse_namespace",
    "persistent_topics",
    "persistent_topics_path",
    "topics_hash",
]

MANAGED_LEDGERS_ROOT = "/managed-ledgers"
#: Pulsar's subscriptionPatternMaxLength default.
DEFAULT_PATTERN_MAX_LENGTH = 50
#: Product of the alternatives' counts above which a pattern is not evaluated (each alternative
#: can make the matcher try the rest of the pattern again).
MAX_ALTERNATIVES = 64

_EVENT_TOPICS = frozenset(
    {
        "__change_events",
        "__transaction_buffer_snapshot",
        "__transaction_buffer_snapshot_segments",
        "__transaction_buffer_snapshot_indexes",
    }
)
_TRANSACTION_PREFIXES = (
    "persistent://pulsar/system/transaction_coordinator_assign",
    "persistent://pulsar/system/__transaction_log_",
)
_PENDING_ACK_SUFFIX = "__transaction_pending_ack"
_K = TypeVar("_K", bound=Hashable)


def parse_namespace(text: str) -> NamespaceName:
    """A namespace as clients name it (``tenant/ns``), checked by the topic-name rules."""
    tenant, slash, name = text.partition("/")
    try:
        if not slash or "/" in name:
            raise ValueError
        topic = TopicName.parse(f"persistent://{tenant}/{name}/t")
    except (InvalidTopicName, ValueError):
        raise LookupFailure(
            FailureKind.INVALID_TOPIC,
            f"Invalid namespace name '{printable(text)}': expected <tenant>/<namespace>",
        ) from None
    return topic.namespace_name


def persistent_topics_path(namespace: NamespaceName) -> str:
    """The parent of the namespace's persistent topics' managed ledgers."""
    return f"{MANAGED_LEDGERS_ROOT}/{namespace.tenant}/{namespace.namespace}/persistent"


def is_system_topic(topic: TopicName) -> bool:
    """Pulsar's system topics, which the broker leaves out of a namespace's topic list."""
    base = topic.base
    if base.local_name in _EVENT_TOPICS:
        return True
    name = base.full
    return name.startswith(_TRANSACTION_PREFIXES) or name.endswith(_PENDING_ACK_SUFFIX)


def persistent_topics(view: ClusterView, namespace: NamespaceName) -> list[str]:
    """The namespace's persistent topics (full names, sorted), system topics left out."""
    topics = []
    prefix = f"persistent://{namespace}/"
    for encoded in view.children(persistent_topics_path(namespace)):
        try:
            topic = TopicName.parse(prefix + unquote_plus(encoded))
        except InvalidTopicName:
            continue  # not a name a client could use (a decoded '/', a dot segment)
        if not is_system_topic(topic):
            topics.append(topic.full)
    topics.sort()
    return topics


# --- the list hash ------------------------------------------------------------------------------


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_CRC32C_TABLE = _crc32c_table()


def crc32c(data: bytes, crc: int = 0) -> int:
    """CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), continuing from `crc`.
    The standard library has CRC-32 only (zlib), and the gateway takes no dependency for 20
    lines; the check value of b"123456789" is 0xE3069283."""
    table = _CRC32C_TABLE
    crc ^= 0xFFFFFFFF
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def topics_hash(topics: Iterable[str]) -> str:
    """Pulsar's topic-list hash (TopicList.calculateHash): CRC-32C of the sorted names joined
    by ','; Guava prints the 32-bit value's bytes little-endian, in hex."""
    value = crc32c(",".join(sorted(topics)).encode())
    return value.to_bytes(4, "little").hex()


# --- patterns -----------------------------------------------------------------------------------


def _remove_domain_scheme(pattern: str) -> str | None:
    """The pattern without a leading `persistent://` / `non-persistent://` scheme (anything may
    stand before the domain, e.g. `^`); None when the part before `://` is not a domain."""
    if "://" not in pattern:
        return pattern
    parts = pattern.split("://")
    prefix = parts[0]
    rest = parts[1] if len(parts) > 1 else ""
    for domain in (TopicDomain.NON_PERSISTENT.value, TopicDomain.PERSISTENT.value):
        if prefix.endswith(domain):
            return prefix[: -len(domain)] + rest
    return None


@functools.lru_cache(maxsize=256)
def compile_topics_pattern(pattern: str, max_length: int) -> re.Pattern[str] | None:
    """The compiled pattern (without its domain scheme), or None when the broker's rule or the
    gateway's linear-time rule says the list is answered unfiltered."""
    if len(pattern) > max_length:
        return None
    regex = _remove_domain_scheme(pattern)
    if regex is None:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = sre_parse.parse(regex)
            compiled = re.compile(regex)
    except (re.error, RecursionError, OverflowError, ValueError):
        return None
    if not _linear(tree):
        return None
    return compiled


_REPEATS = {_sre.MAX_REPEAT, _sre.MIN_REPEAT, _sre.POSSESSIVE_REPEAT}
_REFUSED = {_sre.GROUPREF, _sre.GROUPREF_EXISTS, _sre.ASSERT, _sre.ASSERT_NOT}


def _linear(tree: sre_parse.SubPattern) -> bool:
    """At most one repetition of variable length, with no alternation inside it; no
    backreference or lookaround; a bounded product of alternatives. Then a backtracking match
    of a name of length n costs O(n) times a constant of the pattern."""
    variable = 0
    alternatives = 1

    def walk(items: Sequence[tuple[object, Any]], inside_variable: bool) -> bool:
        nonlocal variable, alternatives
        for op, av in items:
            if op in _REFUSED:
                return False
            nested: list[tuple[Sequence[tuple[object, Any]], bool]] = []
            if op in _REPEATS:
                low, high, body = av
                if low != high:
                    variable += 1
                    if variable > 1:
                        return False
                nested.append((body.data, inside_variable or low != high))
            elif op is _sre.BRANCH:
                if inside_variable:
                    return False
                alternatives *= len(av[1])
                if alternatives > MAX_ALTERNATIVES:
                    return False
                nested.extend((branch.data, inside_variable) for branch in av[1])
            elif op is _sre.SUBPATTERN:
                nested.append((av[-1].data, inside_variable))
            elif op is _sre.ATOMIC_GROUP:
                nested.append((av.data, inside_variable))
            if not all(walk(data, inside) for data, inside in nested):
                return False
        return True

    return walk(tree.data, False)


def _matches(pattern: re.Pattern[str], topic: str) -> bool:
    """Java's TopicList.filterTopics: the partitioned topic's name without its scheme."""
    name = topic
    index = name.rfind("-partition-")
    if index > 0 and name[index + len("-partition-") :].isdigit():
        name = name[:index]
    return pattern.fullmatch(name.partition("://")[2]) is not None


# --- answers ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicListing:
    """What GET_TOPICS_OF_NAMESPACE answers."""

    topics: tuple[str, ...]
    filtered: bool
    topics_hash: str
    changed: bool


@dataclass(frozen=True, slots=True)
class _Listed:
    names: tuple[str, ...]  # the children list it was built from
    topics: tuple[str, ...]
    topics_hash: str


class TopicLister:
    """Answers topic listings from a view, keeping the last list (and its hash) per namespace
    and per pattern: a list is rebuilt only when its children list changed. Bounded: at most
    `max_entries` namespaces and as many (namespace, pattern) pairs."""

    def __init__(
        self,
        *,
        pattern_max_length: int = DEFAULT_PATTERN_MAX_LENGTH,
        evaluate_patterns: bool = True,
        max_entries: int = 1024,
    ) -> None:
        self.pattern_max_length = pattern_max_length
        self.evaluate_patterns = evaluate_patterns
        self.max_entries = max_entries
        self._lists: OrderedDict[NamespaceName, _Listed] = OrderedDict()
        self._filtered: OrderedDict[tuple[NamespaceName, str], _Listed] = OrderedDict()

    def listing(
        self,
        view: ClusterView,
        namespace: NamespaceName,
        pattern: str | None = None,
        client_hash: str | None = None,
    ) -> TopicListing:
        """The persistent topics of `namespace` as the broker answers them. A namespace that
        does not exist lists no topics (as the broker's metadata store answers an absent
        parent), and its managed-ledger path is never read."""
        if view.policies(namespace) is None:
            listed = _Listed((), (), topics_hash(()))
        else:
            listed = self._list(view, namespace)
        filtered = False
        if pattern is not None and self.evaluate_patterns:
            compiled = compile_topics_pattern(pattern, self.pattern_max_length)
            if compiled is not None:
                filtered = True
                listed = self._filter(namespace, pattern, compiled, listed)
        if client_hash is not None and client_hash == listed.topics_hash:
            return TopicListing((), filtered, listed.topics_hash, False)
        return TopicListing(listed.topics, filtered, listed.topics_hash, True)

    def _list(self, view: ClusterView, namespace: NamespaceName) -> _Listed:
        names = tuple(view.children(persistent_topics_path(namespace)))
        cached = self._lists.get(namespace)
        if cached is not None and cached.names == names:
            self._lists.move_to_end(namespace)
            return cached
        topics = tuple(persistent_topics(view, namespace))
        listed = _Listed(names, topics, topics_hash(topics))
        _remember(self._lists, namespace, listed, self.max_entries)
        return listed

    def _filter(
        self, namespace: NamespaceName, pattern: str, compiled: re.Pattern[str], listed: _Listed
    ) -> _Listed:
        key = (namespace, pattern)
        cached = self._filtered.get(key)
        if cached is not None and cached.names is listed.topics:
            self._filtered.move_to_end(key)
            return cached
        topics = tuple(t for t in listed.topics if _matches(compiled, t))
        result = _Listed(listed.topics, topics, topics_hash(topics))
        _remember(self._filtered, key, result, self.max_entries)
        return result


def _remember(cache: OrderedDict[_K, _Listed], key: _K, value: _Listed, limit: int) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > limit:
        cache.popitem(last=False)
