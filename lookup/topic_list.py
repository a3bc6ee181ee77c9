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
  instruction: the bound keeps the longest name (4 KiB) to ~6 ms.

Any list is filtered, whatever the namespace's size, as the broker filters it: a listing is
made in steps (``TopicLister.begin``, ``ListingWork.step``) of ``pattern_budget`` seconds of the
thread's CPU time (2 ms; the clock is read about every KiB of names), and the caller gives the
event loop's other sockets a turn between steps (serving.namespace_queries). The first list of
a namespace (each name parsed, the list sorted and hashed) is made in steps too: names parsed
a run at a time, each run sorted, the runs merged. All listings together take at most
``SHARE`` of the clock (a quarter of a core): past it a step waits (``TopicLister.pause``), so
thousands of distinct patterns are answered slower, never unfiltered, and never at the other
sockets' expense. What a listing made is kept per namespace (the list and its hash) and per
(namespace, pattern) until the namespace's list changes.

The cost of a listing is linear in the bytes of its names (partitions of one topic, adjacent in
the sorted list, are matched once). No pattern holds the event loop longer than its compile
(under 2 ms, once while the pattern is kept) and one step.

Pure: reads the ClusterView only (NodeNotLoaded when it lacks the children list).
"""

from __future__ import annotations

import functools
import heapq
import time
from collections import OrderedDict
from collections.abc import Callable, Generator, Hashable, Iterable, Sized
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
    "ListingWork",
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
    "topics_in_steps",
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
#: CPU seconds of one step of a listing (the event loop's other sockets go between steps).
DEFAULT_PATTERN_BUDGET = 0.002
#: Share of the clock all listings together may take (see TopicLister.pause).
SHARE = 0.25
#: Units of work (bytes matched or hashed) between two readings of the clock (~0.5 us each).
_CLOCK_EVERY = 1024
#: Names parsed and sorted as one run before the runs are merged.
_RUN = 512

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


def topics_in_steps(
    names: Iterable[str], namespace: NamespaceName, system: bool, over: Callable[[int], bool]
) -> Generator[None, None, list[str]]:
    """persistent_topics() of the children `names`, yielding whenever `over(cost)` says a
    step's time is up: names parsed a run at a time, each run sorted, the runs merged (no
    step sorts or parses the whole list)."""
    prefix = f"persistent://{namespace}/"
    runs: list[list[str]] = []
    run: list[str] = []
    for encoded in tuple(names):
        try:
            topic = TopicName.parse(prefix + unquote_plus(encoded))
        except InvalidTopicName:
            topic = None  # not a name a client could use (a decoded '/', a dot segment)
        if topic is not None and (system or not is_system_topic(topic)):
            run.append(topic.full)
        if len(run) >= _RUN:
            run.sort()
            runs.append(run)
            run = []
        if over(16):
            yield
    run.sort()
    runs.append(run)
    topics: list[str] = []
    for name in heapq.merge(*runs):
        topics.append(name)
        if over(16):
            yield
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
    names: object  # the children list (the view's set) it was built from
    topics: tuple[str, ...]
    topics_hash: str
    size: int = 0  # how many names that list held when this was built


class _Build:
    """A list being made (its steps), shared by the listings that want it meanwhile."""

    __slots__ = ("listed", "names", "size", "steps")

    def __init__(self, names: object, size: int, steps: Generator[None, None, _Listed]) -> None:
        self.names = names
        self.size = size
        self.steps = steps
        self.listed: _Listed | None = None


class _Slice:
    """The clock of one step of a listing: `over(cost)` reads it once `_CLOCK_EVERY` units of
    work (bytes matched or hashed, 16 a name parsed or merged) were done since the last
    reading, and says whether the step's time is up."""

    __slots__ = ("clock", "deadline", "spent_from", "unclocked")

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.deadline = 0.0
        self.spent_from = 0.0
        self.unclocked = 0

    def over(self, cost: int) -> bool:
        self.unclocked += cost
        if self.unclocked < _CLOCK_EVERY:
            return False
        self.unclocked = 0
        return self.clock() > self.deadline


_Steps = Generator[None, None, TopicListing]


class ListingWork:
    """One listing, made in steps of at most about `seconds` of the lister's clock each (one
    name past it): `step()` is None until the listing is made. The caller gives the rest of
    its work (the event loop's other sockets) a turn between steps, so that a namespace of
    any size is listed and filtered without holding the loop more than a step."""

    def __init__(self, lister: TopicLister, steps: _Steps | TopicListing) -> None:
        self._lister = lister
        self._steps = steps
        self._slice = lister._slice

    def step(self, seconds: float) -> TopicListing | None:
        steps = self._steps
        if isinstance(steps, TopicListing):
            return steps
        clock = self._slice.clock
        started = clock()
        self._slice.deadline = started + seconds
        self._slice.unclocked = 0
        try:
            next(steps)
        except StopIteration as done:
            self._steps = done.value
        finally:
            self._lister._spend(clock() - started)
        return self._steps if isinstance(self._steps, TopicListing) else None


class TopicLister:
    """Answers topic listings from a view, keeping the last list (and its hash) per namespace
    and per pattern: a list is rebuilt, and a pattern matched again, only when the namespace's
    children list changed. Bounded: at most `max_entries` namespaces and as many (namespace,
    pattern) pairs. Any list is filtered, whatever its size, in steps (`begin`, ListingWork)
    of `pattern_budget` seconds of `clock` (the thread's CPU time); all listings together
    take at most SHARE of that clock (`pause()` says how long to wait for it)."""

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
        self.pattern_budget = pattern_budget  # one step's seconds
        self.clock = clock
        self._slice = _Slice(clock)
        self._wall = wall
        # Seconds of listing work all listings may still take now (refilled at SHARE of a
        # second each second, up to one second's share): a read of thousands of distinct
        # patterns waits for its turn instead of taking the loop from every other socket.
        self._allowance = SHARE
        self._refilled = wall()
        self._lists: OrderedDict[tuple[NamespaceName, bool], _Listed] = OrderedDict()
        self._filtered: OrderedDict[tuple[NamespaceName, str], _Listed] = OrderedDict()
        self._building: dict[tuple[NamespaceName, bool], _Build] = {}  # lists being made

    def listing(
        self,
        view: ClusterView,
        namespace: NamespaceName,
        pattern: str | None = None,
        client_hash: str | None = None,
        *,
        system: bool = False,
    ) -> TopicListing:
        """`begin` and every step at once (for callers that may hold their thread)."""
        work = self.begin(view, namespace, pattern, client_hash, system=system)
        while True:
            done = work.step(float("inf"))
            if done is not None:
                return done

    def begin(
        self,
        view: ClusterView,
        namespace: NamespaceName,
        pattern: str | None = None,
        client_hash: str | None = None,
        *,
        system: bool = False,
    ) -> ListingWork:
        """The listing of the persistent topics of `namespace` as the broker answers them
        (system topics too with `system`: the REST list's includeSystemTopic, kept apart), to
        be made in steps. A namespace that does not exist lists no topics (as the broker's
        metadata store answers an absent parent), and its managed-ledger path is never read.
        A pattern the broker's filtering fails on raises LookupFailure INVALID_PATTERN (binary
        MetadataError). Reads the view now (NodeNotLoaded), never after."""
        names: object = ()
        if view.policies(namespace) is not None:
            names = view.child_names(persistent_topics_path(namespace))
        refused: str | None = None
        compiled: TopicsPattern | None = None
        if pattern is not None:
            found = (
                compile_topics_pattern(pattern, self.pattern_max_length)
                if self.evaluate_patterns
                else PatternRefused("broker-side pattern evaluation is off")
            )
            if isinstance(found, PatternInvalid):
                raise LookupFailure(FailureKind.INVALID_PATTERN, found.message)
            if isinstance(found, PatternRefused):
                refused = found.reason
            elif not found.match_all:  # (matchAll: the whole list, filtered)
                compiled = found
        steps = self._steps(namespace, system, names, pattern, compiled, refused, client_hash)
        return ListingWork(self, steps)

    def pause(self) -> float:
        """Seconds to wait before the next step of any listing (0: go on)."""
        now = self._wall()
        refill = (now - self._refilled) * SHARE
        self._allowance = min(SHARE, self._allowance + refill)
        self._refilled = now
        return 0.0 if self._allowance > 0 else -self._allowance / SHARE

    def _spend(self, seconds: float) -> None:
        self._allowance -= seconds

    def _steps(
        self,
        namespace: NamespaceName,
        system: bool,
        names: object,
        pattern: str | None,
        compiled: TopicsPattern | None,
        refused: str | None,
        client_hash: str | None,
    ) -> _Steps:
        listed = yield from self._list(namespace, system, names)
        if compiled is not None and pattern is not None:
            listed = yield from self._filter(namespace, pattern, compiled, listed)
        filtered = pattern is not None and refused is None
        if client_hash is not None and client_hash == listed.topics_hash:
            return TopicListing((), filtered, listed.topics_hash, False, refused)
        return TopicListing(listed.topics, filtered, listed.topics_hash, True, refused)

    def _list(
        self, namespace: NamespaceName, system: bool, names: object
    ) -> Generator[None, None, _Listed]:
        key = (namespace, system)
        size = len(names) if isinstance(names, Sized) else 0
        cached = self._lists.get(key)
        if cached is not None and cached.names is names and cached.size == size:
            self._lists.move_to_end(key)
            return cached
        if not size:
            return _Listed(names, (), topics_hash(()), 0)
        # Listings of one list at the same time share its build (each copy of a big
        # namespace's list in the making would hold its names: one per request otherwise).
        build = self._building.get(key)
        if build is None or build.names is not names or build.size != size:
            assert isinstance(names, Iterable)
            build = self._building[key] = _Build(names, size, self._build(key, names, size))
            if len(self._building) > self.max_entries:  # (builds their listings gave up)
                del self._building[next(iter(self._building))]
        while build.listed is None:
            try:
                next(build.steps)
            except StopIteration as done:
                build.listed = done.value
                if self._building.get(key) is build:
                    del self._building[key]
                break
            yield
        return build.listed

    def _build(
        self, key: tuple[NamespaceName, bool], names: Iterable[str], size: int
    ) -> Generator[None, None, _Listed]:
        topics = yield from topics_in_steps(names, key[0], key[1], self._slice.over)
        hashed = yield from self._hash(topics)
        listed = _Listed(names, tuple(topics), hashed, size)
        _remember(self._lists, key, listed, self.max_entries)
        return listed

    def _filter(
        self, namespace: NamespaceName, pattern: str, compiled: TopicsPattern, listed: _Listed
    ) -> Generator[None, None, _Listed]:
        """The topics `compiled` matches, kept until the list changes. Linear in the names'
        bytes: RE2 reads each byte a bounded number of times, a run of one topic's partitions
        is matched once, and the hash is the whole list's when every topic matches."""
        key = (namespace, pattern)
        cached = self._filtered.get(key)
        if cached is not None and cached.names is listed.topics:
            self._filtered.move_to_end(key)
            return cached
        over = self._slice.over
        kept: list[str] = []
        last_key: bytes | None = None
        last_matched = False
        for topic in listed.topics:
            key_bytes = _match_key(topic)
            if key_bytes != last_key:
                last_key, last_matched = key_bytes, compiled.fullmatch_utf8(key_bytes)
                if over(len(key_bytes)):
                    yield
            if last_matched:
                kept.append(topic)
        if len(kept) == len(listed.topics):
            result = _Listed(listed.topics, listed.topics, listed.topics_hash)
        else:
            hashed = yield from self._hash(kept)
            result = _Listed(listed.topics, tuple(kept), hashed)
        _remember(self._filtered, key, result, self.max_entries)
        return result

    def _hash(self, topics: list[str]) -> Generator[None, None, str]:
        """topics_hash(topics) (`topics` sorted), a step at a time."""
        over = self._slice.over
        crc = 0
        for index, topic in enumerate(topics):
            data = topic.encode()
            crc = crc32c(b"," + data if index else data, crc)
            if over(len(data)):
                yield
        return crc.to_bytes(4, "little").hex()


def _remember(cache: OrderedDict[_K, _Listed], key: _K, value: _Listed, limit: int) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > limit:
        cache.popitem(last=False)
