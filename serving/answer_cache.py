"""The answers and authorization results of the current cluster view.

resolve() is pure, so an answer holds until the view changes (every write bumps its version; a
source may replace the view). Both caches are bounded by the bytes of the names in them
(clients choose the names) as well as by count; at either bound they start over."""

from __future__ import annotations

from typing import Generic, TypeVar

from pulsar_lookup_gateway.lookup.selection import ListenerChoice
from pulsar_lookup_gateway.lookup.view import ClusterView

MAX_CACHED_ANSWERS = 100_000
MAX_CACHED_BYTES = 32 * 1024 * 1024
ENTRY_OVERHEAD = 200  # bytes of one entry besides its name: dict slot, key tuple, answer share

A = TypeVar("A")


class AnswerCache(Generic[A]):
    """(topic, listener choice) -> answer, and the (role, topic) pairs found authorized."""

    def __init__(self) -> None:
        self._answers: dict[tuple[str, ListenerChoice], A] = {}
        self._allowed: set[tuple[str, str]] = set()
        self._bytes = 0  # names held by both, plus ENTRY_OVERHEAD each
        self._view: ClusterView | None = None
        self._version = -1

    @property
    def cached_bytes(self) -> int:
        return self._bytes

    def answers(self, view: ClusterView) -> dict[tuple[str, ListenerChoice], A]:
        """The answers resolved from `view` (all of them are dropped when it is not the view
        they came from)."""
        if self._view is not view or self._version != view.version:
            self._start_over()
            self._view = view
            self._version = view.version
        return self._answers

    def allowed(self, view: ClusterView) -> set[tuple[str, str]]:
        self.answers(view)  # drops what an older view allowed
        return self._allowed

    def add_answer(self, view: ClusterView, key: tuple[str, ListenerChoice], answer: A) -> None:
        """Keep `answer`, read from `view` (the view it was just read from)."""
        answers = self.answers(view)
        self._make_room(len(answers), len(key[0]))
        answers[key] = answer

    def add_allowed(self, view: ClusterView, role: str, topic: str) -> None:
        allowed = self.allowed(view)
        self._make_room(len(allowed), len(role) + len(topic))
        allowed.add((role, topic))

    def _make_room(self, entries: int, name_length: int) -> None:
        """Account one more entry; start both over when a bound is reached."""
        size = name_length + ENTRY_OVERHEAD
        if entries >= MAX_CACHED_ANSWERS or self._bytes + size > MAX_CACHED_BYTES:
            self._start_over()
        self._bytes += size

    def _start_over(self) -> None:
        self._answers.clear()
        self._allowed.clear()
        self._bytes = 0
