"""The one answer memo of a process: the answers the full path gave (binary LOOKUP frames by
request bytes, HTTP lookup responses by request target, the service's answers and the roles
it found authorized), kept by what they were read from, so that asking again costs a dict read.

One rule of forgetting for all of it: the memo follows the cluster view's writes and maps each
written path to the keys it may change (lookup.write_keys). Every entry is filed under a place,
(`tenant/namespace`, the lower bound of its bundle (NAMESPACE_WIDE: none), whether it read
which of the namespace's topics exist), and a write drops the places it names: a bundle's
ownership node that bundle's, a namespace's policies or list of owned bundles that namespace's,
a tenant's its namespaces', a topic node's (managed ledger, partitioned metadata) the places
that read them (HTTP lookups of persistent topics: resolve() never reads them, so binary
answers survive a ledger roll), anything else everything. A rewritten broker registration
(every load report rewrites one) drops nothing unless what lookups read of the registrations
changed (`registry_print`, compared at the next `follow`).

One byte budget for all of it (clients choose the keys' bytes): at the bound the places filed
first are forgotten until there is room, never everything at once (the full path answers a
storm's first topic of each bundle; starting over at each would re-make the whole memo).

Callers read a table (a plain dict, cleared in place, never replaced, so they may hold it) after
`follow`/`mark`, and fill it with `remember`, giving the mark taken before their full path ran:
an answer is kept only if no write came in between (it may be the older view's).

Cold binary LOOKUPs are answered by bundle (BundleAnswers): a topic nobody asked about yet is
mapped to its bundle (a CRC-32 and a binary search) and answered with the frame of its bundle's
answer, kept per namespace, request shape and bundle. Exact because a LOOKUP_RESPONSE carries
no topic name and resolve() reads nothing of a topic but its namespace, domain and bundle,
except in a deleted namespace (only system topics are answered there), never kept here. An
entry is made from the full path's own answer for a topic written in full form, so the name's
checks hold for every topic that maps to it; non-ASCII names take the full path.
"""

from __future__ import annotations

import zlib
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Protocol

from pulsar_lookup_gateway.lookup.resolve import broker_fingerprint
from pulsar_lookup_gateway.lookup.topics import MAX_TOPIC_NAME_BYTES
from pulsar_lookup_gateway.lookup.write_keys import Key, bundle_lower, keys_of_path

MAX_BYTES = 64 * 1024 * 1024  # every entry of the process together, by the accounting below
#: What an entry holds besides the bytes its caller counts (the client's): the dict slot, the
#: key and value objects, its filing (tracemalloc of 60,000 binary entries: ~300 bytes with a
#: 50-byte key).
ENTRY_OVERHEAD = 250
NAMESPACE_WIDE = -1  # the lower bound of a place that is no bundle's (a namespace's, a tenant's)
DOMAINS = ("persistent", "non-persistent")
MAX_TAIL_BYTES = 256  # a cold request shape's bytes (its fields after the request id)
MAX_TAILS = 16  # cold request shapes per namespace and table (clients choose them)
SLOT_BYTES = 8  # one bundle's place in a cold request shape's list
OVERHEAD_BYTES = 200  # a cold namespace's or request shape's objects besides their bytes
_DOT_SEGMENTS = (b".", b"..")

#: Where an entry is filed: (`tenant/namespace`, bundle's lower bound or NAMESPACE_WIDE,
#: whether it read which of the namespace's topics exist).
Place = tuple[str, int, bool]
#: The view (and its version) a full path started from.
Mark = tuple[object, int]
_Filed = list[tuple[dict[Any, Any], Any, int]]  # (table, key, bytes)


class ObservedView(Protocol):
    @property
    def version(self) -> int: ...
    def observe(self, observer: Callable[[str], None]) -> None: ...
    def unobserve(self, observer: Callable[[str], None]) -> None: ...


def place_of(namespace: str, lower: int, *, reads_topics: bool = False) -> Place:
    return (namespace, lower, reads_topics)


class AnswerMemo:
    """Answers filed under their places, forgotten by the view's writes (see the module)."""

    def __init__(
        self,
        max_bytes: int | None = None,
        registry_print: Callable[[Any], object] = broker_fingerprint,
    ) -> None:
        """`max_bytes`: the budget (None: MAX_BYTES)."""
        self._max_bytes = MAX_BYTES if max_bytes is None else max_bytes
        self._print = registry_print
        self._tables: dict[Hashable, dict[Any, Any]] = {}
        self._cold: dict[Hashable, BundleAnswers] = {}
        # place -> the entries filed there, in the order places were first filed
        self._filed: OrderedDict[Place, _Filed] = OrderedDict()
        # (namespace, whether they read its topics) -> its places filed: a topic node's write
        # (every ledger roll) finds the few places it drops without looking at the others
        self._places_of: dict[tuple[str, bool], set[Place]] = {}
        # cold namespaces, oldest first: (table, topic prefix) -> None
        self._cold_order: OrderedDict[tuple[BundleAnswers, bytes], None] = OrderedDict()
        self._bytes = 0
        self._view: ObservedView | None = None
        self._brokers: object = None
        self._brokers_unchecked = False
        self._hearers: list[Callable[[str, list[Key]], None]] = []

    @property
    def bytes_held(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return sum(len(table) for table in self._tables.values())

    # -- tables ------------------------------------------------------------------------

    def table(self, name: Hashable) -> dict[Any, Any]:
        """The answers of one kind of request (a front end and the route it answers for):
        key -> whatever the caller keeps. Cleared in place, never replaced."""
        table = self._tables.get(name)
        if table is None:
            table = self._tables[name] = {}
        return table

    def cold_table(self, name: Hashable) -> BundleAnswers:
        """The cold answers (by bundle) of one kind of binary LOOKUP."""
        answers = self._cold.get(name)
        if answers is None:
            answers = self._cold[name] = BundleAnswers(self)
        return answers

    def release(self, name: Hashable) -> None:
        """Drop the tables called `name` (their front end is closed)."""
        table = self._tables.pop(name, None)
        if table is not None:
            emptied = []
            for place, filed in self._filed.items():
                kept = [entry for entry in filed if entry[0] is not table]
                if len(kept) != len(filed):
                    for held, key, size in filed:
                        if held is table and table.pop(key, None) is not None:
                            self._bytes -= size
                    filed[:] = kept  # (the filing no longer holds the table's keys alive)
                    if not kept:
                        emptied.append(place)
            for place in emptied:
                self._unfile(place, self._filed.pop(place))
            table.clear()
        answers = self._cold.pop(name, None)
        if answers is not None:
            for prefix in list(answers.prefixes()):
                answers.forget_prefix(prefix)

    # -- following the view ------------------------------------------------------------

    def follow(self, view: ObservedView) -> None:
        """Before answers are read or kept, with `view` the current view: follow it (another
        view than the one followed so far forgets everything) and settle a rewritten
        registration. The view's writes come between two calls (ZooKeeper's callbacks)."""
        if view is not self._view:
            self.close()
            self._view = view
            view.unobserve(self._changed)  # (a view handed over brings its observers along)
            view.observe(self._changed)
            self._brokers = self._print_or_none()
        elif self._brokers_unchecked:
            self._brokers_unchecked = False
            now = self._print_or_none()
            if now is None or now != self._brokers:
                self.clear()
            self._brokers = now

    def mark(self, view: ObservedView) -> Mark:
        """`follow`, and where the view is now: a full path about to start gives it to
        `remember`, which keeps its answer only if the view is still there."""
        self.follow(view)
        return view, view.version

    def close(self) -> None:
        """Stop following the view (and forget everything: nothing keeps it fresh any more)."""
        if self._view is not None:
            self._view.unobserve(self._changed)
            self._view = None
        self._brokers_unchecked = False
        self.clear()

    def _print_or_none(self) -> object:
        try:
            return self._print(self._view)
        except Exception:  # (a partial view that lacks a registration: cannot tell)
            return None

    def hear_writes(self, hearer: Callable[[str, list[Key]], None]) -> None:
        """Tell `hearer` each write followed, with its keys, once the memo forgot by them
        (the ownership watch looks the topics filed under them up again)."""
        self._hearers.append(hearer)

    def stop_hearing(self, hearer: Callable[[str, list[Key]], None]) -> None:
        if hearer in self._hearers:
            self._hearers.remove(hearer)

    def _changed(self, path: str) -> None:
        keys = keys_of_path(path)
        for key in keys:
            self.forget(key)
        for hearer in self._hearers:
            hearer(path, keys)

    # -- forgetting --------------------------------------------------------------------

    def forget(self, key: Key) -> None:
        """Drop what a write with `key` (lookup.write_keys) may have changed."""
        kind = key[0]
        if kind == "bundle":
            namespace = f"{key[1]}/{key[2]}"
            lower = bundle_lower(key[3])
            if lower is None:
                self.forget_namespace(namespace)
            else:
                self.forget_bundle(namespace, lower)
        elif kind == "children" or kind == "ns":
            self.forget_namespace(f"{key[1]}/{key[2]}")
        elif kind == "tenant":
            self._forget_tenant(key[1])
        elif kind == "topics":
            self._forget_topics(f"{key[1]}/{key[2]}")
        elif kind == "broker":
            self._brokers_unchecked = True  # (compared at the next follow)
        else:  # BROKERS, LEADER, ALL: anything may have changed
            self.clear()
            # take what lookups read of the brokers anew at the next follow (answers made
            # after this write read the new registrations)
            self._brokers_unchecked = True

    def forget_bundle(self, namespace: str, lower: int) -> None:
        for reads_topics in (False, True):
            place = (namespace, lower, reads_topics)
            filed = self._filed.pop(place, None)
            if filed is not None:
                self._unfile(place, filed)
        for answers in self._cold.values():
            answers.forget_bundle(namespace, lower)

    def forget_namespace(self, namespace: str) -> None:
        for reads_topics in (False, True):
            for place in self._places_of.pop((namespace, reads_topics), ()):
                self._drop(self._filed.pop(place, ()))
        for answers in self._cold.values():
            answers.forget_namespace(namespace)

    def _forget_tenant(self, tenant: str) -> None:
        prefix = tenant + "/"
        for namespace in {name for name, _ in self._places_of if name.startswith(prefix)}:
            self.forget_namespace(namespace)
        for answers in self._cold.values():
            answers.forget_tenant(tenant)

    def _forget_topics(self, namespace: str) -> None:
        for place in self._places_of.pop((namespace, True), ()):
            self._drop(self._filed.pop(place, ()))

    def clear(self) -> None:
        for table in self._tables.values():
            table.clear()
        for answers in self._cold.values():
            answers.clear()
        self._filed.clear()
        self._places_of.clear()
        self._cold_order.clear()
        self._bytes = 0

    # -- keeping -----------------------------------------------------------------------

    def remember(
        self,
        mark: Mark | None,
        table: dict[Any, Any],
        key: Any,
        value: Any,
        place: Place,
        size: int,
    ) -> None:
        """Keep `value` for `key` in `table`, filed under `place` (what the answer read);
        `size`: the bytes the client chose (the key's); `mark`: where the view was when the
        full path began (None: the answer was made from the current view just now). At the
        bound the places filed first are forgotten until there is room."""
        view = self._view
        if view is None or (mark is not None and (mark[0] is not view or view.version != mark[1])):
            return  # the view changed under the full path: its answer may be the old one's
        if key in table:
            table[key] = value
            return
        size += ENTRY_OVERHEAD
        if self._make_room(size):
            self._file(table, key, value, place, size)

    def remember_if_room(
        self, table: dict[Any, Any], key: Any, value: Any, place: Place, size: int
    ) -> None:
        """Remember unless the bound is reached (then nothing: a storm of distinct topics
        answered by bundle must not push out what the memo holds)."""
        size += ENTRY_OVERHEAD
        if key not in table and self._bytes + size <= self._max_bytes:
            self._file(table, key, value, place, size)

    def _make_room(self, size: int) -> bool:
        """Forget the oldest places, then the oldest cold namespaces, until `size` more bytes
        fit; False if they cannot."""
        while self._bytes + size > self._max_bytes and self._filed:
            place, filed = self._filed.popitem(last=False)
            self._unfile(place, filed)
        while self._bytes + size > self._max_bytes and self._cold_order:
            answers, prefix = self._cold_order.popitem(last=False)[0]
            answers.forget_prefix(prefix)
        return self._bytes + size <= self._max_bytes

    def _file(self, table: dict[Any, Any], key: Any, value: Any, place: Place, size: int) -> None:
        table[key] = value
        filed = self._filed.get(place)
        if filed is None:
            filed = self._filed[place] = []
            places = self._places_of.get((place[0], place[2]))
            if places is None:
                places = self._places_of[(place[0], place[2])] = set()
            places.add(place)
        filed.append((table, key, size))
        self._bytes += size

    def _unfile(self, place: Place, filed: _Filed) -> None:
        """Drop the entries filed under `place` (taken out of the filing already)."""
        self._drop(filed)
        places = self._places_of.get((place[0], place[2]))
        if places is not None:
            places.discard(place)
            if not places:
                del self._places_of[(place[0], place[2])]

    def _drop(self, filed: _Filed | tuple[()]) -> None:
        for table, key, size in filed:
            if table.pop(key, None) is not None:
                self._bytes -= size

    # -- the cold answers' bytes ---------------------------------------------------------

    def _take_cold(self, answers: BundleAnswers, prefix: bytes, count: int) -> bool:
        """Account `count` more bytes of `answers`' namespace `prefix` (False: no room)."""
        if not self._make_room(count):
            return False
        self._bytes += count
        self._cold_order[(answers, prefix)] = None
        return True

    def _give_back_cold(self, answers: BundleAnswers, prefix: bytes, count: int) -> None:
        self._cold_order.pop((answers, prefix), None)
        self._bytes = max(0, self._bytes - count)


class SocketTables:
    """The tables of one front end (a socket's handlers, an HTTP application) in the memo, one
    per route it answers for: made on first use, counted together, given back together."""

    def __init__(self, memo: AnswerMemo) -> None:
        self.memo = memo
        self._routes: set[Hashable] = set()

    def table(self, route: Hashable) -> dict[Any, Any]:
        self._routes.add(route)
        return self.memo.table((self, route))

    def cold_table(self, route: Hashable) -> BundleAnswers:
        self._routes.add(route)
        return self.memo.cold_table((self, route))

    def __len__(self) -> int:
        return sum(len(self.memo.table((self, route))) for route in self._routes)

    def entries(self) -> list[tuple[tuple[Hashable, Any], Any]]:
        """((route, key), value) of every entry its tables hold (for tests and operators)."""
        return [
            ((route, key), value)
            for route in self._routes
            for key, value in self.memo.table((self, route)).items()
        ]

    def release(self) -> None:
        """Give back what the tables hold (the front end is closed)."""
        for route in self._routes:
            self.memo.release((self, route))
        self._routes.clear()


class _Namespace:
    """One namespace of one cold table: its bundles' lower bounds, the bytes it holds, and per
    request shape (the request's bytes after its request id) the entry of each bundle (None:
    not known)."""

    __slots__ = ("by_tail", "held", "lowers")

    def __init__(self, lowers: tuple[int, ...], held: int) -> None:
        self.lowers = lowers
        self.held = held
        self.by_tail: dict[bytes, list[Any]] = {}


class BundleAnswers:
    """The cold answers of one kind of binary LOOKUP (AnswerMemo.cold_table)."""

    __slots__ = ("_memo", "_namespaces")

    def __init__(self, memo: AnswerMemo) -> None:
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
        name in full form) is in, whose bundle boundaries are `boundaries` (made from the
        current view: call right after the full path's answer, with no write in between)."""
        if len(tail) > MAX_TAIL_BYTES:
            return
        memo = self._memo
        prefix = topic.rpartition(b"/")[0]
        lowers = boundaries[:-1]
        namespace = self._namespaces.get(prefix)
        if namespace is None or namespace.lowers != lowers:
            if namespace is not None:
                self.forget_prefix(prefix)
            held = len(prefix) + SLOT_BYTES * len(lowers) + OVERHEAD_BYTES
            if not memo._take_cold(self, prefix, held):
                return
            namespace = self._namespaces[prefix] = _Namespace(lowers, held)
        entries = namespace.by_tail.get(tail)
        if entries is None:
            shape = len(tail) + SLOT_BYTES * len(lowers) + OVERHEAD_BYTES
            if len(namespace.by_tail) >= MAX_TAILS or not memo._take_cold(self, prefix, shape):
                return
            if self._namespaces.get(prefix) is not namespace:  # (room was made by forgetting
                memo._give_back_cold(self, prefix, shape)  # this very namespace)
                return
            namespace.held += shape
            entries = namespace.by_tail[tail] = [None] * len(lowers)
        index = bisect_right(lowers, lower) - 1
        if index >= 0 and lowers[index] == lower:
            entries[index] = value

    def forget_bundle(self, namespace: str, lower: int) -> None:
        for prefix in _prefixes(namespace):
            held = self._namespaces.get(prefix)
            if held is None:
                continue
            index = bisect_right(held.lowers, lower) - 1
            if index >= 0 and held.lowers[index] == lower:
                for entries in held.by_tail.values():
                    entries[index] = None
            else:  # (not one of the bundles known: the boundaries changed)
                self.forget_prefix(prefix)

    def forget_namespace(self, namespace: str) -> None:
        for prefix in _prefixes(namespace):
            self.forget_prefix(prefix)

    def forget_tenant(self, tenant: str) -> None:
        starts = tuple(f"{domain}://{tenant}/".encode() for domain in DOMAINS)
        for prefix in [prefix for prefix in self._namespaces if prefix.startswith(starts)]:
            self.forget_prefix(prefix)

    def forget_prefix(self, prefix: bytes) -> None:
        held = self._namespaces.pop(prefix, None)
        if held is not None:
            self._memo._give_back_cold(self, prefix, held.held)

    def prefixes(self) -> list[bytes]:
        return list(self._namespaces)

    def clear(self) -> None:
        self._namespaces.clear()


def _prefixes(namespace: str) -> list[bytes]:
    """The topic name prefixes of `namespace` (`tenant/namespace`), one per domain."""
    return [f"{domain}://{namespace}".encode() for domain in DOMAINS]
