r"""Topic listing (GET_TOPICS_OF_NAMESPACE): the persistent topics of a namespace, as Pulsar's
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

Matching is RE2's (google-re2), as the broker's first choice RE2J: linear in the name, never
backtracking; no client's pattern ever reaches Python's ``re``. Its options are RE2's defaults,
which mean what RE2J's do: ``.`` is any code point but ``\n``; ``\w``, ``\d``, ``\s`` and ``\b``
are ASCII; ``(?i)`` folds Unicode case; ``^`` and ``$`` are the ends of the name. A pattern RE2J
refuses (RE2 refuses it, or it is one of RE2J's own refusals: ``\C``, a repetition right after
a literal ``{``) goes where the broker sends it, to the JDK: lookup.jdk_patterns follows JDK
17's parser, and the pattern is the JDK's error (``MetadataError``), or is matched in the JDK's
meaning translated into RE2 (``\p{Lower}`` and the other US-ASCII POSIX classes, the JDK's
classes, ``.``, ``\s``), or is answered unfiltered. A pattern is answered unfiltered
(``filtered=false``, and the client filters the list itself, as Pulsar's clients do; the
listing's ``refused`` says why) when

- it is longer than the bound or names another scheme (the broker's rules, above);
- the JDK would compile it with a meaning RE2 cannot give exactly (inline flags such as
  ``(?i)``, ``\b``, look-arounds, back-references, possessive repetition, Unicode properties),
  or with constructs lookup.jdk_patterns does not model (``(?x)``, look-behinds, ``\N{...}``);
- its RE2 program is over ``MAX_PROGRAM_SIZE`` instructions (512), or compiling it needs more
  than ``RE2_MAX_MEM`` bytes (RE2 refuses it then). RE2 is linear in the name, but when its DFA
  cannot keep its states (``.*a.{20}`` on varied names) a byte costs up to ~3 ns per
  instruction: the bound keeps the longest name (4 KiB) to ~6 ms;
- filtering one listing, and hashing what it keeps, takes more than ``pattern_budget`` seconds
  of the thread's CPU time (5 ms; the clock is read about every KiB of names). The refusal is
  kept until the namespace's list changes, so a repeated request costs nothing. Even a plain
  pattern costs ~1.5 us a topic (and the hash ~65 ns a byte of what it keeps, unless it keeps
  every topic): a namespace of more than 2,000-4,000 topics is answered unfiltered.

Otherwise the cost of a listing is linear in the bytes of its names (partitions of one topic,
adjacent in the sorted list, are matched once). No pattern holds the event loop longer than its
compile (under 2 ms, once while the pattern is kept), the budget and one name.

Pure: reads the ClusterView only (NodeNotLoaded when it lacks the children list).
"""

from __future__ import annotations

import functools
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar
from urllib.parse import unquote_plus

import re2  # type: ignore[import-untyped]  # google-re2 ships no type information

from pulsar_lookup_gateway.lookup.errors import FailureKind, InvalidTopicName, LookupFailure
from pulsar_lookup_gateway.lookup.jdk_patterns import JdkError, Translated, escapes, jdk_compile
from pulsar_lookup_gateway.lookup.topics import NamespaceName, TopicDomain, TopicName
from pulsar_lookup_gateway.lookup.untrusted import printable
from pulsar_lookup_gateway.lookup.view import ClusterView

__all__ = [
    "ALL_TOPICS_PATTERN",
    "DEFAULT_PATTERN_BUDGET",
    "DEFAULT_PATTERN_MAX_LENGTH",
    "MANAGED_LEDGERS_ROOT",
    "MAX_PROGRAM_SIZE",
    "RE2_MAX_MEM",
    "PatternInvalid",
    "PatternRefused",
    "TopicLister",
    "TopicListing",
    "TopicsPattern",
    "compile_topics_pattern",
    "crc32c",
    "is_system_topic",
    "parse_namespace",
    "persistent_topics",
    "persistent_topics_path",
    "topics_hash",
]

MANAGED_LEDGERS_ROOT = "/managed-ledgers"
#: TopicList.ALL_TOPICS_PATTERN: keeps every topic, whatever its characters.
ALL_TOPICS_PATTERN = ".*"
#: Pulsar's subscriptionPatternMaxLength default.
DEFAULT_PATTERN_MAX_LENGTH = 50
#: Instructions of a pattern's RE2 program above which it is answered unfiltered. A match costs
#: up to ~3 ns per instruction per byte of the name when RE2's DFA cannot keep its states
#: (measured): at most ~1.5 us per byte here, ~6 ms for the longest name (4 KiB).
MAX_PROGRAM_SIZE = 512
#: RE2's memory for one pattern (program and DFA cache; RE2's default is 8 MiB). It bounds the
#: compile (~1 ms for the largest program it allows) and the cache below: the 256 patterns kept
#: here and the 128 google-re2 keeps itself.
RE2_MAX_MEM = 256 * 1024
#: CPU seconds the filtering of one listing may take before it is answered unfiltered.
DEFAULT_PATTERN_BUDGET = 0.005
#: Budgets of filtering per second for all listings together (see TopicLister).
SHARED_BUDGETS = 10
#: Bytes of names matched or hashed between two readings of the clock (a reading costs ~0.5 us).
_CLOCK_EVERY = 1024

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


def persistent_topics(
    view: ClusterView, namespace: NamespaceName, *, system: bool = False
) -> list[str]:
    """The namespace's persistent topics (full names, sorted), system topics left out unless
    `system` (the REST list's includeSystemTopic)."""
    topics = []
    prefix = f"persistent://{namespace}/"
    for encoded in view.children(persistent_topics_path(namespace)):
        try:
            topic = TopicName.parse(prefix + unquote_plus(encoded))
        except InvalidTopicName:
            continue  # not a name a client could use (a decoded '/', a dot segment)
        if system or not is_system_topic(topic):
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


_SCHEME_SEPARATOR = "://"


def _remove_domain_scheme(pattern: str) -> str | PatternInvalid:
    """TopicList.removeTopicDomainScheme: the pattern without a leading `persistent://` /
    `non-persistent://` (anything may stand before the domain, e.g. `^`; after a second
    `://` the rest is dropped, as Java's split keeps part 1 only). Another scheme makes the
    broker's filtering throw: the request's error (PatternInvalid)."""
    if _SCHEME_SEPARATOR not in pattern:
        return pattern
    parts = pattern.split(_SCHEME_SEPARATOR)
    while len(parts) > 1 and not parts[-1]:
        parts.pop()  # Java's String.split drops trailing empty strings
    if len(parts) < 2:
        return PatternInvalid(
            "java.lang.ArrayIndexOutOfBoundsException: Index 1 out of bounds for length 1"
        )
    prefix, rest = parts[0], parts[1]
    for domain in (TopicDomain.NON_PERSISTENT.value, TopicDomain.PERSISTENT.value):
        if prefix.endswith(domain):
            return prefix[: -len(domain)] + rest
    return PatternInvalid(
        "java.lang.IllegalArgumentException: Does not support topic domain: " + printable(prefix)
    )


class _Regexp(Protocol):
    """The part of google-re2's compiled pattern used here."""

    @property
    def programsize(self) -> int: ...

    def fullmatch(self, text: bytes) -> object | None: ...


def _re2_options() -> object:
    options = re2.Options()
    options.log_errors = False  # a client's pattern is not the gateway's error
    options.never_capture = True  # no submatches to find: a whole match is the DFA's alone
    options.max_mem = RE2_MAX_MEM
    return options


_OPTIONS = _re2_options()
# RE2's refusal of a program over RE2_MAX_MEM: a bound of the gateway's (RE2J compiles it).
_TOO_LARGE = "pattern too large"


@dataclass(frozen=True, slots=True)
class TopicsPattern:
    """A client's pattern as RE2 compiled it, its scheme removed. `engine`: whose meaning it
    has, ``re2j`` (RE2J compiles it: RE2 means the same) or ``jdk`` (RE2J refuses it: the
    broker's JDK fallback, translated exactly by lookup.jdk_patterns); `match_all`: Pulsar's
    ``.*``, which keeps every topic (TopicsPatternFactory.matchAll)."""

    regex: str
    program_size: int
    _compiled: _Regexp | None = field(repr=False, compare=False)
    engine: str = "re2j"

    @property
    def match_all(self) -> bool:
        return self._compiled is None

    def fullmatch(self, name: str) -> bool:
        """Whether `name` matches as a whole (Java's ``matches()``)."""
        return self.fullmatch_utf8(name.encode("utf-8", "surrogatepass"))

    def fullmatch_utf8(self, name: bytes) -> bool:
        """The same for a name in UTF-8."""
        return self._compiled is None or self._compiled.fullmatch(name) is not None


@dataclass(frozen=True, slots=True)
class PatternRefused:
    """Why a pattern is not applied: the list is answered unfiltered."""

    reason: str


@dataclass(frozen=True, slots=True)
class PatternInvalid:
    """A pattern the broker's filtering fails on (an unsupported scheme; a regex neither RE2J
    nor the JDK compiles): GET_TOPICS_OF_NAMESPACE answers MetadataError with this text, as
    ServerCnx.internalHandleGetTopicsOfNamespace answers the exception."""

    message: str


def _re2j_refuses(regex: str) -> str | None:
    """Why RE2J refuses `regex` though RE2 compiles it, or None: RE2's own one-byte escape
    ``\\C`` (literal when quoted in ``\\Q...\\E``); a repetition operator right after a ``{``
    taken literally (RE2J calls it a nested repetition: ``{*``, ``a{{1,}``); a repetition count
    over 1,000 that RE2 takes for a literal (``{99999999999}``); a group name that is not
    ASCII letters, digits and ``_``, or one used twice."""
    if "C" in escapes(regex):
        return "\\C (one byte) is RE2's own"
    text = _outside_classes(regex)
    index = text.find("{")
    while index >= 0:
        end = _repetition_end(text, index)
        if end < 0:  # a literal `{`
            after = text[index + 1 : index + 2]
            if after in ("*", "+", "?") or (after == "{" and _repetition_end(text, index + 1) > 0):
                return "RE2J refuses a repetition right after a literal '{'"
            end = index + 1
        elif any(_over_1000(count) for count in text[index + 1 : end - 1].split(",")):
            return "RE2J refuses a repetition count over 1000"
        index = text.find("{", end)
    names: set[str] = set()
    for opening in ("(?P<", "(?<"):
        index = text.find(opening)
        while index >= 0:
            start = index + len(opening)
            name = text[start : text.find(">", start)] if ">" in text[start:] else ""
            if opening == "(?P<" or text[start : start + 1] not in ("=", "!"):
                if not name or not all(c.isascii() and (c.isalnum() or c == "_") for c in name):
                    return "RE2J refuses the group name"
                if name in names:
                    return "RE2J refuses a group name used twice"
                names.add(name)
            index = text.find(opening, start)
    return None


def _over_1000(count: str) -> bool:
    digits = count.lstrip("0")
    return len(digits) > 4 or (digits != "" and int(digits) > 1000)


def _repetition_end(text: str, index: int) -> int:
    """The index after the repetition ``{n}``, ``{n,}`` or ``{n,m}`` at `index`, or -1."""
    digits = 0
    comma = False
    for end in range(index + 1, len(text)):
        char = text[end]
        if "0" <= char <= "9":
            digits += 1
        elif char == "," and not comma and digits:
            comma = True
        elif char == "}" and digits:
            return end + 1
        else:
            return -1
    return -1


def _outside_classes(regex: str) -> str:
    """`regex` as RE2 reads it, with every escape, quoted run and class replaced by ``_``
    (a ``{`` that stays is an operator or a literal of RE2's)."""
    out = []
    index = 0
    while index < len(regex):
        char = regex[index]
        if regex.startswith("\\Q", index):
            end = regex.find("\\E", index + 2)
            index = len(regex) if end < 0 else end + 2
            out.append("_")
        elif char == "\\":
            index += 2
            out.append("_")
        elif char == "[":
            index = _re2_class_end(regex, index)
            out.append("_")
        else:
            out.append(char)
            index += 1
    return "".join(out)


def _re2_class_end(regex: str, index: int) -> int:
    """The index after the RE2 class opened at `index` (a leading ``]`` is a member,
    ``[:name:]`` an item)."""
    index += 1
    if regex.startswith("^", index):
        index += 1
    if regex.startswith("]", index):
        index += 1
    while index < len(regex) and regex[index] != "]":
        if regex[index] == "\\":
            index += 2
        elif regex.startswith("[:", index) and ":]" in regex[index + 2 :]:
            index = regex.index(":]", index + 2) + 2
        else:
            index += 1
    return index + 1


def _re2(regex: str) -> _Regexp | PatternRefused:
    """RE2's compile of `regex` (RE2J's meaning), or why it refuses it."""
    try:
        compiled: _Regexp = re2.compile(regex, _OPTIONS)
    except re2.error as error:
        reason = error.args[0] if error.args else ""
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        return PatternRefused(f"RE2 refuses it: {printable(str(reason))}")
    except UnicodeEncodeError:  # a lone surrogate: no UTF-8 for RE2
        return PatternRefused("not Unicode text")
    size = compiled.programsize
    if size > MAX_PROGRAM_SIZE:
        return PatternRefused(f"an RE2 program of {size} instructions (over {MAX_PROGRAM_SIZE})")
    return compiled


def _jdk_fallback(regex: str, refused: str) -> TopicsPattern | PatternRefused | PatternInvalid:
    """What the broker does with a pattern RE2J refuses (`refused`: why): the JDK compiles it,
    or fails."""
    jdk = jdk_compile(regex)
    if isinstance(jdk, JdkError):
        return PatternInvalid(f"java.util.regex.PatternSyntaxException: {printable(jdk.message)}")
    if not isinstance(jdk, Translated):
        # (jdk.reason says which construct; the listing keeps the shorter reason)
        return PatternRefused(f"{refused} (the broker's JDK fallback would apply it)")
    compiled = _re2(jdk.regex)
    if isinstance(compiled, PatternRefused):
        return PatternRefused(f"{refused}; in the JDK's meaning, {compiled.reason}")
    return TopicsPattern(regex, compiled.programsize, compiled, "jdk")


@functools.lru_cache(maxsize=256)
def compile_topics_pattern(
    pattern: str, max_length: int
) -> TopicsPattern | PatternRefused | PatternInvalid:
    """The pattern compiled by RE2 (without its domain scheme), why the list is answered
    unfiltered, or the broker's error for it (the module's rules). Kept for the last 256
    (pattern, bound) pairs, refusals too; each pattern is at most `max_length` characters."""
    if len(pattern) > max_length:
        return PatternRefused(f"longer than {max_length} characters")
    regex = _remove_domain_scheme(pattern)
    if isinstance(regex, PatternInvalid):
        return regex
    if regex == ALL_TOPICS_PATTERN:
        return TopicsPattern(regex, 0, None)
    compiled = _re2(regex)
    refused_syntax = (
        isinstance(compiled, PatternRefused)
        and compiled.reason.startswith("RE2 refuses it")
        and _TOO_LARGE not in compiled.reason
    )
    if isinstance(compiled, PatternRefused) and refused_syntax:
        return _jdk_fallback(regex, compiled.reason)
    re2j_refusal = _re2j_refuses(regex)
    if re2j_refusal is not None:
        return _jdk_fallback(regex, re2j_refusal)
    if isinstance(compiled, PatternRefused):
        return compiled  # (RE2J compiles it: over the gateway's bounds)
    return TopicsPattern(regex, compiled.programsize, compiled)


def _match_key(topic: str) -> bytes:
    """What Java's TopicList.filterTopics matches: the partitioned topic's name without its
    scheme, here in UTF-8 (RE2's text)."""
    name = topic
    index = name.rfind("-partition-")
    if index > 0 and name[index + len("-partition-") :].isdigit():
        name = name[:index]
    return name.partition("://")[2].encode("utf-8", "surrogatepass")


# --- answers ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicListing:
    """What GET_TOPICS_OF_NAMESPACE answers. `refused`: why a client's pattern did not filter
    the list (None when it did, or when there was none)."""

    topics: tuple[str, ...]
    filtered: bool
    topics_hash: str
    changed: bool
    refused: str | None = None


@dataclass(frozen=True, slots=True)
class _Listed:
    names: tuple[str, ...]  # the children list it was built from
    topics: tuple[str, ...]
    topics_hash: str
    refused: str | None = None  # a filtering over budget: `topics` are the whole list


class TopicLister:
    """Answers topic listings from a view, keeping the last list (and its hash) per namespace
    and per pattern: a list is rebuilt only when its children list changed. Bounded: at most
    `max_entries` namespaces and as many (namespace, pattern) pairs. A pattern's filtering may
    take `pattern_budget` seconds of `clock` (the thread's CPU time), then the list is answered
    unfiltered."""

    def __init__(
        self,
        *,
        pattern_max_length: int = DEFAULT_PATTERN_MAX_LENGTH,
        evaluate_patterns: bool = True,
        max_entries: int = 1024,
        pattern_budget: float = DEFAULT_PATTERN_BUDGET,
        clock: Callable[[], float] = time.thread_time,
        wall: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pattern_max_length = pattern_max_length
        self.evaluate_patterns = evaluate_patterns
        self.max_entries = max_entries
        self.pattern_budget = pattern_budget
        self.clock = clock
        # All listings together may filter for SHARED_BUDGETS budgets a second (50 ms with
        # the default: 5 % of a core): a read of thousands of distinct patterns would
        # otherwise hold the loop for seconds, 5 ms at a time. Refilled by `wall`.
        self.shared_budget = SHARED_BUDGETS * pattern_budget
        self._wall = wall
        self._allowance = self.shared_budget
        self._refilled = wall()
        self._lists: OrderedDict[tuple[NamespaceName, bool], _Listed] = OrderedDict()
        self._filtered: OrderedDict[tuple[NamespaceName, str], _Listed] = OrderedDict()

    def listing(
        self,
        view: ClusterView,
        namespace: NamespaceName,
        pattern: str | None = None,
        client_hash: str | None = None,
        *,
        system: bool = False,
    ) -> TopicListing:
        """The persistent topics of `namespace` as the broker answers them (system topics
        too with `system`: the REST list's includeSystemTopic, kept apart). A namespace that
        does not exist lists no topics (as the broker's metadata store answers an absent
        parent), and its managed-ledger path is never read. A pattern the broker's filtering
        fails on raises LookupFailure INVALID_PATTERN (binary MetadataError)."""
        if view.policies(namespace) is None:
            listed = _Listed((), (), topics_hash(()))
        else:
            listed = self._list(view, namespace, system)
        refused: str | None = None
        if pattern is not None:
            compiled = (
                compile_topics_pattern(pattern, self.pattern_max_length)
                if self.evaluate_patterns
                else PatternRefused("broker-side pattern evaluation is off")
            )
            if isinstance(compiled, PatternInvalid):
                raise LookupFailure(FailureKind.INVALID_PATTERN, compiled.message)
            if isinstance(compiled, PatternRefused):
                refused = compiled.reason
            elif compiled.match_all:
                pass  # TopicsPatternFactory.matchAll: the whole list, filtered
            else:
                listed = self._filter(namespace, pattern, compiled, listed)
                refused = listed.refused
        filtered = pattern is not None and refused is None
        if client_hash is not None and client_hash == listed.topics_hash:
            return TopicListing((), filtered, listed.topics_hash, False, refused)
        return TopicListing(listed.topics, filtered, listed.topics_hash, True, refused)

    def _list(self, view: ClusterView, namespace: NamespaceName, system: bool) -> _Listed:
        names = tuple(view.children(persistent_topics_path(namespace)))
        key = (namespace, system)
        cached = self._lists.get(key)
        if cached is not None and cached.names == names:
            self._lists.move_to_end(key)
            return cached
        topics = tuple(persistent_topics(view, namespace, system=system))
        listed = _Listed(names, topics, topics_hash(topics))
        _remember(self._lists, key, listed, self.max_entries)
        return listed

    def _filter(
        self, namespace: NamespaceName, pattern: str, compiled: TopicsPattern, listed: _Listed
    ) -> _Listed:
        """The topics `compiled` matches, kept until the list changes; over the budget, the
        whole list with the reason (kept as long)."""
        key = (namespace, pattern)
        cached = self._filtered.get(key)
        if cached is not None and cached.names is listed.topics:
            self._filtered.move_to_end(key)
            return cached
        allowance = self._available()
        if allowance <= 0:  # (not remembered: the next request may find time again)
            reason = "the time the gateway gives to filtering is spent for now"
            return _Listed(listed.topics, listed.topics, listed.topics_hash, reason)
        result, spent = self._matching(compiled, listed, min(self.pattern_budget, allowance))
        self._allowance -= spent
        if result is None:
            reason = f"filtering took over {self.pattern_budget * 1000:g} ms of CPU time"
            result = _Listed(listed.topics, listed.topics, listed.topics_hash, reason)
        _remember(self._filtered, key, result, self.max_entries)
        return result

    def _available(self) -> float:
        """Seconds of filtering left to all listings now (refilled at shared_budget a second)."""
        now = self._wall()
        refill = (now - self._refilled) * self.shared_budget
        self._allowance = min(self.shared_budget, self._allowance + refill)
        self._refilled = now
        return self._allowance

    def _matching(
        self, compiled: TopicsPattern, listed: _Listed, budget: float
    ) -> tuple[_Listed | None, float]:
        """The topics (sorted) whose names `compiled` matches, and their hash; None once that
        has taken more than the budget. Linear in the names' bytes: RE2 reads each byte a
        bounded number of times, a run of one topic's partitions is matched once, the hash
        (pure Python, ~65 ns a byte) is the whole list's when every topic matches, and the
        clock is read whenever `_CLOCK_EVERY` bytes were matched or hashed since the last
        reading."""
        clock = self.clock
        started = last = clock()
        deadline = started + budget
        unclocked = 0

        def over_budget() -> bool:
            nonlocal unclocked, last
            unclocked = 0
            last = clock()
            return last > deadline

        kept: list[str] = []
        last_key: bytes | None = None
        last_matched = False
        for topic in listed.topics:
            if unclocked >= _CLOCK_EVERY and over_budget():
                return None, last - started
            key = _match_key(topic)
            if key != last_key:
                last_key, last_matched = key, compiled.fullmatch_utf8(key)
                unclocked += len(key)
            if last_matched:
                kept.append(topic)
        if len(kept) == len(listed.topics):
            return _Listed(listed.topics, listed.topics, listed.topics_hash), last - started
        crc = 0  # topics_hash(kept), summed here to keep to the budget (`kept` is sorted)
        for index, topic in enumerate(kept):
            if unclocked >= _CLOCK_EVERY and over_budget():
                return None, last - started
            data = topic.encode()
            crc = crc32c(b"," + data if index else data, crc)
            unclocked += len(data)
        answer = _Listed(listed.topics, tuple(kept), crc.to_bytes(4, "little").hex())
        return answer, last - started


def _remember(cache: OrderedDict[_K, _Listed], key: _K, value: _Listed, limit: int) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > limit:
        cache.popitem(last=False)
