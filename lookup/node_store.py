"""NodeStore: the znodes a view holds, with their parse caches, the writes and their observers.

Metadata sources (a snapshot file, ZooKeeper watches) write raw node content into it; readers
get decoded content, or a node parsed once until it changes. A store is either *complete* (a
snapshot: a path it does not hold does not exist) or *partial* (a cache: a path it does not hold
raises NodeNotLoaded, and the source reads it and retries). All writes happen on one thread.

Whether a node exists is decided from its parent's children list (one read and one watch per
parent) before the node itself is read: names come from clients, and a made-up name must cost
no read or watch of its own. lookup.view.ClusterView reads the typed nodes resolve() needs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, Self, TypeVar, cast

from pulsar_lookup_gateway.lookup.errors import MalformedNode, NodeNotLoaded
from pulsar_lookup_gateway.lookup.model import BROKERS_ROOT, decode_json

T = TypeVar("T")
# Equal znode contents share one decoded copy and one parse cache: ownership nodes of one broker
# are identical, so 100,000 bundles cost a few hundred objects. The table is bounded.
INTERN_LIMIT = 100_000
ABSENT_LIMIT = 100_000  # absent paths remembered (each saves a ZooKeeper read)
#: What observers hear when a source replaces a whole view (a reload, a lost session).
EVERY_PATH = "*"


class _Node:
    """One znode content, shared by every path that holds equal bytes, with its parses."""

    __slots__ = ("content", "parsed")

    def __init__(self, content: Any) -> None:
        self.content = content
        self.parsed: dict[object, Any] = {}


class _Undecodable:
    """Raw bytes that are not JSON, kept so the error names the path when a lookup needs it."""

    __slots__ = ("error",)

    def __init__(self, error: MalformedNode) -> None:
        self.error = error


class NodeStore:
    _quiet = False  # set while a first load is stored (no write: see _unseen)

    def __init__(self, *, complete: bool) -> None:
        self.complete = complete
        self._raw: dict[str, _Node] = {}
        self._absent: set[str] = set()
        self._children: dict[str, set[str]] = {}
        self._interned: dict[bytes, _Node] = {}
        self._version = 0  # bumped on every write; lets callers notice change
        # ZooKeeper's zxid dating each node and children list (see zxid()); one int per path.
        self._zxids: dict[str, int] = {}
        # What zxid() answers for a path its source dated with none (a snapshot: its file's
        # modification time, so that one snapshot dates every answer read from it alike).
        self.snapshot_zxid = 0
        self._observers: list[Callable[[str], None]] = []

    @property
    def version(self) -> int:
        """Bumped on every write: an answer read from this view holds while it is unchanged."""
        return self._version

    @classmethod
    def from_snapshot(cls, nodes: Mapping[str, Any]) -> Self:
        """A complete view of a snapshot: znode path -> decoded JSON content."""
        view = cls(complete=True)
        for path, content in nodes.items():
            view.put_json(path, content)
        return view

    # -- writes (metadata sources) -------------------------------------------------------

    def put_bytes(self, path: str, data: bytes, zxids: tuple[int, int] | None = None) -> None:
        """`zxids`: the node's (czxid, mzxid) as ZooKeeper read it (see zxid())."""
        zxid = None
        if zxids is not None:
            # A broker rewrites its registration with every load report; what a lookup reads
            # of it (its URLs) is fixed for the registration's life: it is dated by creation.
            registration = path.startswith(BROKERS_ROOT + "/")
            zxid = zxids[0] if registration else zxids[1]
        node = self._interned.get(data)
        if node is None:
            try:
                node = _Node(decode_json(path, data))
            except MalformedNode as exc:
                node = _Node(_Undecodable(exc))
            self._intern(data, node)
        unseen = self._unseen(path)
        if not unseen and self._raw.get(path) is node and self._zxids.get(path) == zxid:
            return  # read again as it was (a re-watch after a reconnect): nothing changed
        if zxid is not None:
            self._zxids[path] = zxid
        if not unseen:
            self._put(path, node)
            return
        self._quiet = True
        try:
            self._put(path, node)
        finally:
            self._quiet = False

    def put_json(self, path: str, content: Any) -> None:
        key = json.dumps(content, sort_keys=True, separators=(",", ":")).encode()
        node = self._interned.get(key)
        if node is None:
            node = _Node(content)
            self._intern(key, node)
        self._put(path, node)

    def _intern(self, key: bytes, node: _Node) -> None:
        if len(self._interned) >= INTERN_LIMIT:
            self._interned.clear()
        self._interned[key] = node

    def _unseen(self, path: str) -> bool:
        """Whether a partial view holds nothing of `path`, neither content nor absence: every
        read of it raised NodeNotLoaded, so no answer was made from it, and its first load
        changes none (it is no write: the version stays, observers do not hear it, and the
        answers kept survive the reads that land while a cold replica warms up)."""
        return not self.complete and path not in self._raw and path not in self._absent

    def _put(self, path: str, node: _Node) -> None:
        self._raw[path] = node
        self._absent.discard(path)
        if self.complete:  # a snapshot lists every ancestor's children, as ZooKeeper would
            child = path
            while child not in ("", "/"):
                parent, _, name = child.rpartition("/")
                self._children.setdefault(parent or "/", set()).add(name)
                child = parent
        self._changed(path)

    def put_absent(self, path: str) -> None:
        """Record that `path` does not exist (a partial view stops asking for it)."""
        if path in self._absent:
            return  # (known absent already: nothing changed)
        quiet = self._unseen(path)
        self._raw.pop(path, None)
        self._zxids.pop(path, None)
        if len(self._absent) >= ABSENT_LIMIT:
            # Clients choose the names looked up, so made-up namespaces and topics would grow
            # this set for ever; forgetting absences only costs a re-read when one is asked again.
            self._absent.clear()
        self._absent.add(path)
        if self.complete:
            parent, _, name = path.rpartition("/")
            self._children.get(parent or "/", set()).discard(name)
        if not quiet:
            self._changed(path)

    def set_children(self, path: str, names: Iterable[str], zxid: int | None = None) -> None:
        """`zxid`: the parent's pzxid (the zxid of its last child created or deleted)."""
        listed = set(names)
        before = self._children.get(path)
        key = path + "/"
        if before == listed and (zxid is None or self._zxids.get(key) == zxid):
            return  # listed again as it was: nothing changed
        self._children[path] = listed
        if zxid is not None:
            self._zxids[key] = zxid
        # A child listed now exists, whatever an earlier read of it found.
        absent = self._absent
        if absent:
            for name in listed:
                absent.discard(f"{path}/{name}")
        # A first listing (of a partial view) is no write: every read of it raised.
        if before is not None or self.complete:
            self._changed(key)

    def _changed(self, path: str) -> None:
        if self._quiet:
            return  # (a first load: see _unseen)
        self._version += 1
        for observer in self._observers:
            observer(path)

    # -- observers (the ownership watch) -----------------------------------------------------

    def observe(self, observer: Callable[[str], None]) -> None:
        """Call `observer(path)` after every write to the view: a node's path, a children
        list's path with a trailing `/`, or EVERY_PATH when the source replaced the view."""
        if observer not in self._observers:  # (once: a view handed over brings its own along)
            self._observers.append(observer)

    def unobserve(self, observer: Callable[[str], None]) -> None:
        if observer in self._observers:
            self._observers.remove(observer)

    def hand_over(self, successor: NodeStore) -> None:
        """A source replaces this view with `successor` (a reload, a lost session): the
        observers move to it and hear that every path may have changed."""
        successor._observers, self._observers = self._observers, []
        for observer in list(successor._observers):
            observer(EVERY_PATH)

    # -- reads -------------------------------------------------------------------------

    def raw(self, path: str) -> Any:
        """The decoded content of `path`, or None if it does not exist."""
        if path in self._raw:
            content = self._raw[path].content
            if isinstance(content, _Undecodable):
                raise content.error
            return content
        if self.complete or path in self._absent:
            return None
        raise NodeNotLoaded(path)

    def exists(self, path: str) -> bool:
        if path in self._raw:
            return True
        if self.complete or path in self._absent:
            return False
        raise NodeNotLoaded(path)

    def node(self, path: str, parser: Callable[[str, Any], T]) -> T | None:
        """The parsed node at `path` (parsed once, until it changes), or None if absent."""
        stored = self._raw.get(path)
        if stored is None:
            self.raw(path)  # raises NodeNotLoaded when the view cannot tell
            return None
        try:
            return cast(T, stored.parsed[parser])
        except KeyError:
            pass
        parsed = parser(path, self.raw(path))
        stored.parsed[parser] = parsed
        return parsed

    def has_child(self, parent: str, name: str) -> bool:
        """Whether `parent`'s children list (read and watched once per parent) names `name`."""
        names = self._children.get(parent)
        if names is None:
            if self.complete:
                return False
            raise NodeNotLoaded(parent + "/")
        return name in names

    def listed(self, path: str) -> bool:
        """Whether `path` exists by its parent's children list. Names come from clients: a name
        nobody created is answered from the parent's list, with no read or watch of its own."""
        parent, _, name = path.rpartition("/")
        return self.has_child(parent, name)

    def children(self, path: str) -> list[str]:
        names = self._children.get(path)
        if names is None:
            if self.complete:
                return []
            raise NodeNotLoaded(path + "/")
        return sorted(names)

    def child_names(self, path: str) -> Collection[str]:
        """The names `children` sorts, as the view holds them (unsorted; not to be changed):
        a list written again is a new object, so a caller may keep what it made of one until
        it is not the view's any more (a complete view adds and drops names in place: its
        length changes then)."""
        names = self._children.get(path)
        if names is None:
            if self.complete:
                return ()
            raise NodeNotLoaded(path + "/")
        return names

    def lists_children_of(self, path: str) -> bool:
        return path in self._children

    def zxid(self, path: str) -> int:
        """The ZooKeeper zxid that dates what the view holds of `path`: a node's last
        modification (a broker registration's creation), or with a trailing `/` the last
        child created or deleted under it (pzxid); `snapshot_zxid` for a path its source
        dated with none, or that the view does not hold (never raises)."""
        return self._zxids.get(path, self.snapshot_zxid)

    def known_paths(self) -> list[str]:
        """Every path the view holds, and the parents whose children it lists (with a trailing
        `/`). A source re-reads these to re-watch them. Absent paths are not among them: their
        parents' children lists say when they appear."""
        return [*self._raw, *(parent + "/" for parent in self._children)]
