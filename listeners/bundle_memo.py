"""Cold LOOKUPs answered by their bundle: a topic nobody asked about yet is mapped to its
bundle (a CRC-32 and a binary search) and answered with the frame of its bundle's answer, kept
per listener choice, namespace, bundle and the request's other fields. Sans-IO: bytes in,
bytes out.

Why this is exact: a LOOKUP_RESPONSE carries no topic name, and resolve() reads nothing of a
topic but its namespace, its domain and its bundle, except in a deleted namespace (where only
system topics are answered), which is never kept here. An entry is made from the full path's
own answer (as the lookup memo's are) for a topic written in full form, so the name's checks
(TopicName.parse) hold for every topic that maps to it: the namespace part is that of a name
already checked, and the local part only has to be non-empty, free of `/` and not a dot
segment. Non-ASCII names take the full path.

Entries outlive view versions, unlike the memo's: the memo watches the view's writes and drops
only what a write can change: a bundle's ownership node drops that bundle's entries, a
namespace's list of owned bundles that namespace's, a broker registration everything only if
what a lookup reads of the brokers changed (load reports rewrite registrations all the time),
and the nodes no lookup reads (managed ledgers, partitioned-topic metadata, schemas) nothing;
any other write, or a new view, drops everything.
"""

from __future__ import annotations

import zlib
from bisect import bisect_right
from collections.abc import Callable
from typing import Any, Protocol

from pulsar_lookup_gateway.listeners.protocol.wire import read_varint
from pulsar_lookup_gateway.lookup.topics import MAX_TOPIC_NAME_BYTES

#: Roots of the nodes that hold one bundle's owner: `<root>/<tenant>/<namespace>/<bundle>`.
OWNER_ROOTS = ("/namespace/", "/service_unit_state/")
BROKERS_PREFIX = "/loadbalance/brokers/"
#: Nodes no lookup reads (resolve() never touches them).
UNREAD_PREFIXES = ("/managed-ledgers/", "/admin/partitioned-topics/", "/schemas/")
EVERY_PATH = "*"
DOMAINS = ("persistent", "non-persistent")

#: What the entries of one socket may hold in all, every choice, namespace and request shape
#: together (request shapes are client bytes): at the bound everything starts over.
MAX_BYTES = 32 * 1024 * 1024
MAX_TAIL_BYTES = 256  # a request shape's bytes (its fields after the request id)
MAX_TAILS = 16  # request shapes per namespace and choice (clients choose them)
SLOT_BYTES = 8  # one bundle's place in a request shape's list
OVERHEAD_BYTES = 200  # a namespace's or a request shape's objects besides their bytes
_DOT_SEGMENTS = (b".", b"..")


class ObservedView(Protocol):
    def observe(self, observer: Callable[[str], None]) -> None: ...
    def unobserve(self, observer: Callable[[str], None]) -> None: ...


class _Namespace:
    """One namespace of one listener choice: its bundles' lower bounds, and per request shape
    (the request's bytes after its request id) the entry of each bundle (None: not known)."""

    __slots__ = ("by_tail", "lowers")

    def __init__(self, lowers: tuple[int, ...]) -> None:
        self.lowers = lowers
        self.by_tail: dict[bytes, list[Any]] = {}


class BundleAnswers:
    """The bundle entries of one listener choice."""

    __slots__ = ("_memo", "_namespaces")

    def __init__(self, memo: BundleMemo) -> None:
        self._memo = memo
        self._namespaces: dict[bytes, _Namespace] = {}

    def entry(self, topic: bytes, tail: bytes) -> Any:
        """The entry of the LOOKUP of `topic` (its bytes as sent) with `tail` (its fields after
        the request id), or None when the full path must answer it."""
        memo = self._memo
        if memo.brokers_unchecked:
            memo.check_brokers()
        prefix, _, local = topic.rpartition(b"/")
        namespace = self._namespaces.get(prefix)
        if (
            namespace is None
            or not local
            or local in _DOT_SEGMENTS
            or len(topic) > MAX_TOPIC_NAME_BYTES  # (TopicName.parse refuses it)
            or not topic.isascii()
        ):
            return None
        entries = namespace.by_tail.get(tail)
        if entries is None:
            return None
        return entries[bisect_right(namespace.lowers, zlib.crc32(topic)) - 1]

    def remember(
        self, topic: bytes, tail: bytes, boundaries: tuple[int, ...], lower: int, value: Any
    ) -> None:
        """Keep `value` for the bundle starting at `lower` of the namespace `topic` (a checked
        name in full form) is in, whose bundle boundaries are `boundaries`."""
        if len(tail) > MAX_TAIL_BYTES:
            return
        memo = self._memo
        prefix = topic.rpartition(b"/")[0]
        lowers = boundaries[:-1]
        namespace = self._namespaces.get(prefix)
        if namespace is None or namespace.lowers != lowers:
            if namespace is not None:
                self.forget_namespace(prefix)
            if not memo.take_bytes(_namespace_bytes(prefix, lowers)):
                return
            namespace = self._namespaces[prefix] = _Namespace(lowers)
        entries = namespace.by_tail.get(tail)
        if entries is None:
            if len(namespace.by_tail) >= MAX_TAILS or not memo.take_bytes(
                _shape_bytes(tail, lowers)
            ):
                return
            entries = namespace.by_tail[tail] = [None] * len(lowers)
        index = bisect_right(lowers, lower) - 1
        if index >= 0 and lowers[index] == lower:
            entries[index] = value

    def forget_bundle(self, prefix: bytes, lower: int) -> None:
        namespace = self._namespaces.get(prefix)
        if namespace is None:
            return
        index = bisect_right(namespace.lowers, lower) - 1
        if index >= 0 and namespace.lowers[index] == lower:
            for entries in namespace.by_tail.values():
                entries[index] = None
        else:  # (not one of the bundles we know: the boundaries changed)
            self.forget_namespace(prefix)

    def forget_namespace(self, prefix: bytes) -> None:
        namespace = self._namespaces.pop(prefix, None)
        if namespace is not None:
            held = _namespace_bytes(prefix, namespace.lowers)
            held += sum(_shape_bytes(tail, namespace.lowers) for tail in namespace.by_tail)
            self._memo.give_back(held)

    def clear(self) -> None:
        self._namespaces.clear()


def _namespace_bytes(prefix: bytes, lowers: tuple[int, ...]) -> int:
    return len(prefix) + SLOT_BYTES * len(lowers) + OVERHEAD_BYTES


def _shape_bytes(tail: bytes, lowers: tuple[int, ...]) -> int:
    return len(tail) + SLOT_BYTES * len(lowers) + OVERHEAD_BYTES


class BundleMemo:
    """The bundle entries of one binary socket, per listener choice, kept fresh by the view's
    writes. `registry_fingerprint`: what lookups read of the registered brokers in the current
    view (compared after a registration is rewritten; raising means "cannot tell")."""

    def __init__(self, registry_fingerprint: Callable[[Any], object]) -> None:
        self._fingerprint = registry_fingerprint
        self._by_choice: dict[Any, BundleAnswers] = {}
        self._bytes = 0
        self._view: ObservedView | None = None
        self._brokers: object = None
        self.brokers_unchecked = False

    @property
    def bytes_held(self) -> int:
        """What the entries hold, by the accounting of MAX_BYTES."""
        return self._bytes

    def answers_for(self, choice: Any) -> BundleAnswers:
        answers = self._by_choice.get(choice)
        if answers is None:
            answers = self._by_choice[choice] = BundleAnswers(self)
        return answers

    def follow(self, view: ObservedView) -> None:
        """Keep the entries fresh by `view`'s writes (a view other than the one followed so far
        drops them all)."""
        if view is self._view:
            return
        self.close()
        self._view = view
        view.unobserve(self._changed)  # (a view handed over brings its observers along)
        view.observe(self._changed)
        self._brokers = self._registry_or_none()

    def close(self) -> None:
        if self._view is not None:
            self._view.unobserve(self._changed)
            self._view = None
        self.clear()

    def take_bytes(self, count: int) -> bool:
        """Account `count` more bytes; at the bound everything starts over (False: the caller
        keeps nothing this time)."""
        if self._bytes + count > MAX_BYTES:
            self.clear()
            return False
        self._bytes += count
        return True

    def give_back(self, count: int) -> None:
        self._bytes = max(0, self._bytes - count)

    def clear(self) -> None:
        for answers in self._by_choice.values():
            answers.clear()
        self._bytes = 0

    def check_brokers(self) -> None:
        """After a registration was rewritten: drop everything if what lookups read of the
        brokers changed (or cannot be read)."""
        self.brokers_unchecked = False
        now = self._registry_or_none()
        if now is None or now != self._brokers:
            self.clear()
        self._brokers = now

    def _registry_or_none(self) -> object:
        try:
            return self._fingerprint(self._view)
        except Exception:  # (a partial view that lacks a registration: cannot tell)
            return None

    def _changed(self, path: str) -> None:
        for root in OWNER_ROOTS:
            if path.startswith(root):
                self._owner_changed(path[len(root) :])
                return
        if path.startswith(BROKERS_PREFIX) and not path.endswith("/"):
            self.brokers_unchecked = True
        elif not path.startswith(UNREAD_PREFIXES):
            self.clear()

    def _owner_changed(self, rest: str) -> None:
        """`rest`: `<tenant>/<namespace>/<bundle>`, or `<tenant>/<namespace>/` (the list of
        the namespace's owned bundles)."""
        parts = rest.split("/")
        if len(parts) != 3:
            self.clear()
            return
        tenant, namespace, bundle = parts
        lower = _bundle_lower(bundle)
        for domain in DOMAINS:
            prefix = f"{domain}://{tenant}/{namespace}".encode()
            for answers in self._by_choice.values():
                if lower is None:
                    answers.forget_namespace(prefix)
                else:
                    answers.forget_bundle(prefix, lower)


def _bundle_lower(name: str) -> int | None:
    """The lower bound of a bundle named `0xLLLLLLLL_0xUUUUUUUU`; None for anything else (a
    children list's empty name among them)."""
    lower, _, upper = name.partition("_")
    if len(lower) != 10 or len(upper) != 10 or not lower.startswith("0x"):
        return None
    try:
        return int(lower, 16)
    except ValueError:
        return None


def topic_and_tail(key: bytes) -> tuple[bytes, bytes] | None:
    """(topic bytes, the fields after the request id) of a lookup memo key (the topic field,
    then those fields)."""
    if not key or key[0] != 0x0A:
        return None
    read = read_varint(key, 1)
    if read is None:
        return None
    length, start = read
    if start + length > len(key):
        return None
    return key[start : start + length], key[start + length :]
