"""The ownership watch's index of what is watched: each topic watched with one listener choice
and role (a WatchedTopic, shared by every stream that watches it), filed by the keys of the
changes that may change its state (ownership_changes.depends_on), the topics not found by the
nodes whose appearance may find them, and what was told: the states topics share (a table
of the process's answer memo, in its one byte budget, filed by bundle and forgotten by its
rule) and what a told owner's registration read.

No I/O, no tasks: the watch (serving.ownership_watch) asks it which topics a write concerns.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import Protocol

from pulsar_lookup_gateway.lookup.errors import NodeNotLoaded
from pulsar_lookup_gateway.lookup.ownership_changes import (
    ABSENT,
    TopicState,
    absence_paths,
    registration_print,
)
from pulsar_lookup_gateway.lookup.selection import ListenerChoice
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.lookup.write_keys import Key, bundle_lower
from pulsar_lookup_gateway.serving.memo import NAMESPACE_WIDE, AnswerMemo, place_of
from pulsar_lookup_gateway.serving.watch_firsts import FirstLookups

#: Topics not found under one list beyond which a write of the list walks the list, not them
#: (640,000 made-up names checked one by one: ~0.2 s of the loop per ledger created).
SCAN_LIST_ABOVE = 4096
#: A shared state's objects besides its strings, in the memo's byte budget (the TopicState, the
#: key tuple; the memo adds its own ENTRY_OVERHEAD for the slot and filing).
STATE_BYTES = 150

Route = tuple[ListenerChoice, str | None]  # (listener choice, role)


@functools.lru_cache(maxsize=4096)
def names_absence(keys: frozenset[Key]) -> bool:
    """Whether `keys` wait for a node to appear (a topic not found). Asked once per key set:
    depends_on gives every topic of a bundle in one state the same set (a herd files
    thousands of topics under a few)."""
    return any(key[0] == ABSENT for key in keys)


class Sink(Protocol):
    """A stream: takes the messages about the topics it watches; its str() is its client (for
    the log line of a refused lookup)."""

    def deliver(self, topic: str, message: str) -> None: ...
    def deliver_many(self, messages: list[tuple[str, str]]) -> None: ...  # (each, in order)
    def watching(self, topic: str) -> None: ...


class WatchedTopic:
    """One topic watched with one listener choice and role, by one or more streams. Its name
    is held once, as a string (the streams' sets hold this same object): it is parsed again
    for each lookup rather than kept in parts."""

    __slots__ = (
        "absent", "choice", "first", "keys", "name", "queued", "read_at", "removed", "role",
        "sinks", "state",
    )  # fmt: skip

    def __init__(self, name: str, choice: ListenerChoice, role: str | None) -> None:
        self.name = name
        self.choice = choice
        self.role = role
        # The streams that watch it: one (the common case, no set), or a set of them.
        self.sinks: Sink | set[Sink] | None = None
        self.state: TopicState | None = None  # last told (its message is made when sent)
        self.read_at = -1  # the index's write count when its last state was read
        self.keys: frozenset[Key] = frozenset()
        self.absent: tuple[str, ...] = ()  # its nodes it waits for (not found)
        self.removed = False
        self.queued = False  # waiting in a queue for its lookup
        self.first: FirstLookups | None = None  # its first lookup's batch, until made

    def add(self, sink: Sink) -> None:
        sinks = self.sinks
        if sinks is None or sinks is sink:
            self.sinks = sink
        elif isinstance(sinks, set):
            sinks.add(sink)
        else:
            self.sinks = {sinks, sink}

    def discard(self, sink: Sink) -> bool:
        """Remove `sink`; True when no stream watches the topic any more."""
        sinks = self.sinks
        if sinks is sink:
            self.sinks = None
        elif isinstance(sinks, set):
            sinks.discard(sink)
            if len(sinks) == 1:
                self.sinks = next(iter(sinks))
        return self.sinks is None

    @property
    def topic(self) -> TopicName:
        return TopicName.parse(self.name)

    def message(self) -> str | None:
        """The message of its last state, for a stream that starts watching it."""
        return self.state.message_json(self.name) if self.state is not None else None

    def watcher(self) -> Sink | None:
        """One stream that watches it (the client a refused lookup's log line names)."""
        sinks = self.sinks
        if isinstance(sinks, set):
            return next(iter(sinks), None)
        return sinks

    def watchers(self) -> list[Sink]:
        sinks = self.sinks
        if sinks is None:
            return []
        return list(sinks) if isinstance(sinks, set) else [sinks]


class WatchIndex:
    def __init__(self, memo: AnswerMemo) -> None:
        # route -> topic -> watched topic (a dict per route, not a key per topic)
        self._routes: dict[Route, dict[str, WatchedTopic]] = {}
        # The last route watched and its topics (a subscribe's topics share one): found
        # again without its listener choice hashed for each
        self._last_route: tuple[ListenerChoice, str | None, dict[str, WatchedTopic]] | None = None
        self.count = 0
        # Topics filed by their set of keys (topics of a bundle in the same state share one:
        # lookup.ownership_changes.depends_on), and each key's sets: a topic takes one slot,
        # not one per key.
        self._by_keys: dict[frozenset[Key], set[WatchedTopic]] = {}
        self._keysets: dict[Key, set[frozenset[Key]]] = {}
        # Topics not found, by the nodes whose appearance may change that: parent -> name ->
        # topics (a list written tells its parent: its watched names are checked in it).
        self._absent: dict[str, dict[str, set[WatchedTopic]]] = {}
        self._memo = memo
        self._states_table = ("ownership watch states", id(self))
        self._states: dict[tuple[object, ...], TopicState] = memo.table(self._states_table)
        self._prints: dict[str, object] = {}  # broker id -> registration_print
        #: Writes heard so far: a state read after a write already reflects it (WatchedTopic
        #: read_at), and is not looked up again for it.
        self.writes = 0

    @property
    def empty(self) -> bool:
        return not self._routes

    # -- what is watched ------------------------------------------------------------------

    def watch(
        self, topic: TopicName, choice: ListenerChoice, role: str | None
    ) -> tuple[WatchedTopic, bool]:
        """The watched topic for this route (True: new, not looked up yet)."""
        last = self._last_route
        if last is not None and last[0] is choice and last[1] is role:
            entries = last[2]
        else:
            route = (choice, role)
            found = self._routes.get(route)
            if found is None:
                found = self._routes[route] = {}
            entries = found
            self._last_route = (choice, role, entries)
        entry = entries.get(topic.full)
        if entry is not None:
            return entry, False
        entry = entries[topic.full] = WatchedTopic(topic.full, choice, role)
        self.count += 1
        return entry, True

    def get(self, route: Route, topic: str) -> WatchedTopic | None:
        entries = self._routes.get(route)
        return entries.get(topic) if entries is not None else None

    def remove(self, entry: WatchedTopic) -> None:
        route = (entry.choice, entry.role)
        entries = self._routes[route]
        del entries[entry.name]
        if not entries:
            del self._routes[route]
            self._last_route = None  # (a new one is made for the next topic of it)
        self.count -= 1
        self.file(entry, frozenset())

    def every(self) -> Iterator[WatchedTopic]:
        for entries in self._routes.values():
            yield from entries.values()

    # -- by what may change them ----------------------------------------------------------

    def under(self, key: Key) -> Iterator[WatchedTopic]:
        """The topics whose state a change of `key` may change."""
        for keys in list(self._keysets.get(key, ())):
            yield from list(self._by_keys.get(keys, ()))

    def file(self, entry: WatchedTopic, keys: frozenset[Key]) -> None:
        """File `entry` under `keys` (and by its own nodes while it is not found)."""
        if keys is entry.keys:
            return
        by_keys, keysets = self._by_keys, self._keysets
        old = entry.keys
        if old:
            members = by_keys.get(old)
            if members is not None:
                members.discard(entry)
                if not members:
                    del by_keys[old]
                    for key in old:
                        holding = keysets.get(key)
                        if holding is not None:
                            holding.discard(old)
                            if not holding:
                                del keysets[key]
        if keys:
            members = by_keys.get(keys)
            if members is None:
                members = by_keys[keys] = set()
                for key in keys:
                    keysets.setdefault(key, set()).add(keys)
            members.add(entry)
        entry.keys = keys
        absent = names_absence(keys)
        if absent != bool(entry.absent):
            self._file_absent(entry, absence_paths(entry.topic) if absent else ())

    def _file_absent(self, entry: WatchedTopic, paths: tuple[str, ...]) -> None:
        for path in entry.absent:
            parent, _, name = path.rpartition("/")
            names = self._absent.get(parent)
            entries = names.get(name) if names is not None else None
            if names is None or entries is None:
                continue
            entries.discard(entry)
            if not entries:
                del names[name]
                if not names:
                    del self._absent[parent]
        for path in paths:
            parent, _, name = path.rpartition("/")
            self._absent.setdefault(parent, {}).setdefault(name, set()).add(entry)
        entry.absent = paths

    def waits_under(self, parent: str) -> bool:
        """Whether a topic not found waits for a node under `parent`."""
        return parent in self._absent

    def appeared(self, paths: Iterable[str], view: ClusterView) -> Iterator[WatchedTopic]:
        """The topics not found whose node was written (a path), or whose node's parent lists
        it now (a parent's path and "/")."""
        for path in paths:
            if not path.endswith("/"):
                parent, _, name = path.rpartition("/")
                yield from self._absent.get(parent, {}).get(name, ())
                continue
            parent = path[:-1]
            names = self._absent.get(parent, {})
            try:
                if len(names) > SCAN_LIST_ABOVE:  # (made-up names outnumber the real ones)
                    found = [name for name in view.children(parent) if name in names]
                else:
                    found = [name for name in names if view.has_child(parent, name)]
            except NodeNotLoaded:
                found = list(names)  # (whatever it is now, the lookup reads it)
            for name in found:
                yield from names[name]

    # -- what was told ----------------------------------------------------------------------

    def share(self, state: TopicState, topic: TopicName) -> TopicState:
        """The one object for `state` of `topic`: topics of one bundle share it (a full
        garbage collection walks each one). Kept in the memo under the topic's bundle (a
        write of it makes new states), or its namespace for a state of no bundle."""
        key = (state, state.owner, state.bundle, state.message)
        shared = self._states.get(key)
        if shared is not None:
            return shared
        lower = bundle_lower(state.bundle) if state.bundle is not None else None
        place = place_of(
            f"{topic.tenant}/{topic.namespace}", NAMESPACE_WIDE if lower is None else lower
        )
        urls = (state.service_url, state.service_url_tls, state.http_url, state.http_url_tls)
        size = STATE_BYTES + len(state.message) + sum(len(url) for url in urls if url)
        self._memo.remember(None, self._states, key, state, place, size)
        return state

    def release(self) -> None:
        """Give the memo back the shared states (the watch is closed)."""
        self._memo.release(self._states_table)

    def told_owner(self, view: ClusterView, owner: str) -> None:
        """Note what an owner's registration read, once an answer naming it was told."""
        if owner not in self._prints:
            self._prints[owner] = registration_print(view, owner)

    def registration_changed(self, view: ClusterView, broker_id: str) -> bool:
        """Whether a rewritten registration changed what answers read of it (a load report
        rewrites it every few seconds and changes nothing)."""
        now = registration_print(view, broker_id)
        if self._prints.get(broker_id, ()) == now:
            return False
        self._prints[broker_id] = now
        return True

    def forget_registrations(self) -> None:
        self._prints.clear()
