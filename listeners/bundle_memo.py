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

Entries outlive view versions: a write of the view drops only what it can change (a bundle's
entries, a namespace's, or everything), as lookup.view_writes decides.
"""

from __future__ import annotations

import zlib
from bisect import bisect_right
from typing import Any

from pulsar_lookup_gateway.listeners.protocol.wire import read_varint
from pulsar_lookup_gateway.lookup.topics import MAX_TOPIC_NAME_BYTES

DOMAINS = ("persistent", "non-persistent")

#: What the entries of one socket may hold in all, every choice, namespace and request shape
#: together (request shapes are client bytes): at the bound everything starts over.
MAX_BYTES = 32 * 1024 * 1024
MAX_TAIL_BYTES = 256  # a request shape's bytes (its fields after the request id)
MAX_TAILS = 16  # request shapes per namespace and choice (clients choose them)
SLOT_BYTES = 8  # one bundle's place in a request shape's list
OVERHEAD_BYTES = 200  # a namespace's or a request shape's objects besides their bytes
_DOT_SEGMENTS = (b".", b"..")


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
    """The bundle entries of one binary socket, per listener choice. Kept fresh by a
    lookup.view_writes.WriteFollower, which tells it what each write of the view may change."""

    def __init__(self) -> None:
        self._by_choice: dict[Any, BundleAnswers] = {}
        self._bytes = 0

    @property
    def bytes_held(self) -> int:
        """What the entries hold, by the accounting of MAX_BYTES."""
        return self._bytes

    def answers_for(self, choice: Any) -> BundleAnswers:
        answers = self._by_choice.get(choice)
        if answers is None:
            answers = self._by_choice[choice] = BundleAnswers(self)
        return answers

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

    def forget_bundle(self, namespace: str, lower: int) -> None:
        for prefix in _prefixes(namespace):
            for answers in self._by_choice.values():
                answers.forget_bundle(prefix, lower)

    def forget_namespace(self, namespace: str) -> None:
        for prefix in _prefixes(namespace):
            for answers in self._by_choice.values():
                answers.forget_namespace(prefix)


def _prefixes(namespace: str) -> list[bytes]:
    """The topic name prefixes of `namespace` (`tenant/namespace`), one per domain."""
    return [f"{domain}://{namespace}".encode() for domain in DOMAINS]


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
