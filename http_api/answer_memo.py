"""Warm HTTP lookups answered from memory: the answer the full path gave to a request, kept by
what that answer depends on, so that asking again costs a dict read and building the response.

The answer to `GET /lookup/v2/topic/...` is a function of the raw request target (the topic
and `?listenerName=`), the `X-Pulsar-ListenerName` header, the route the socket gives a
request that names no listener, whether the request came over TLS (a redirect's scheme), and
the cluster view. An entry is made from the full path's own answer, only when it read one
version of the view from start to end and needed no credentials (no role is authorized), and
holds for that version: every metadata write bumps it, and the memo starts over.

What is never memoised: failures (their count, log line and reason go through the service),
redirects to a peer cluster (one of its hosts is chosen at random), requests on a route that
requires authentication or a client certificate. The memo is not read while the service logs
every answer (DEBUG) nor when admission has no room (the full path refuses the lookup), and a
hit is counted in the service's tallies as the full path counts an answer.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from time import perf_counter
from typing import Any

from aiohttp import web

from pulsar_lookup_gateway.listeners.auth import ListenerGuard
from pulsar_lookup_gateway.lookup.selection import ListenerChoice
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.serving.metrics import LookupTally
from pulsar_lookup_gateway.serving.service import LookupService

MAX_ENTRIES = 16_384  # per socket; more starts the memo over
MAX_BYTES = 16 * 1024 * 1024  # keys and answers together (clients choose the keys' bytes)
MAX_TARGET = 1024  # longer request targets or header values take the full path every time
ENTRY_OVERHEAD = 200  # bytes of an entry besides its strings: dict slot, tuples, tally share

#: (respond, its argument, the tally it counts in, connect (not a redirect)).
Entry = tuple[Callable[[Any], web.Response], Any, LookupTally, bool]
#: What the full path saw of the view when it started: (view, version).
Mark = tuple[ClusterView, int]


def open_guard(guard: ListenerGuard) -> bool:
    """Whether a route with `guard` takes requests without credentials or a certificate (its
    answers do not depend on who asks)."""
    return not guard.required and guard.certificate_of is None


class HttpAnswerMemo:
    """The memoised lookup answers of one HTTP socket, per route of requests that name no
    listener (a socket whose route never changes holds the dict of its own route)."""

    def __init__(
        self, service: LookupService, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES
    ) -> None:
        self._service = service
        self._admission = service.admission
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._by_route: dict[ListenerChoice, dict[Hashable, Entry]] = {}
        self._count = 0
        self._bytes = 0
        self._view: ClusterView | None = None
        self._version = -1

    def __len__(self) -> int:
        return self._count

    def entries_for(self, choice: ListenerChoice) -> dict[Hashable, Entry]:
        """The memo of the requests whose unnamed route is `choice`: key -> Entry. Cleared in
        place, never replaced, so a caller may hold it."""
        entries = self._by_route.get(choice)
        if entries is None:
            entries = self._by_route[choice] = {}
        return entries

    def mark(self) -> Mark | None:
        """Where the view is now, for a full path about to start (`remember` keeps its answer
        only if it is still there); None when the memo may not be read or filled now."""
        view = self._service.source.view
        version = view.version
        if view is not self._view or version != self._version:
            self.clear()
            self._view, self._version = view, version
        if not self._admission.has_room() or self._service.logs_each_answer:
            return None
        return view, version

    def answer(self, entries: dict[Hashable, Entry], key: Hashable) -> web.Response | None:
        """The memoised answer to `key`, counted as the full path counts one; None if there is
        none (call only after `mark` gave a mark: it checks the view and the bypasses)."""
        entry = entries.get(key)
        if entry is None:
            return None
        started = perf_counter()
        respond, argument, tally, connect = entry
        response = respond(argument)
        tally.answered_together(1, perf_counter() - started, connect)
        return response

    def remember(
        self,
        mark: Mark,
        entries: dict[Hashable, Entry],
        key: Hashable,
        size: int,
        entry: Entry,
    ) -> None:
        """Keep `entry`, the full path's answer to `key` (`size`: the bytes of the strings in
        key and answer), if the view it was read from is still the current one."""
        view, version = mark
        if self._service.source.view is not view or view.version != version:
            return  # the view changed under the full path: its answer may be the old one's
        if self._view is not view or self._version != version:
            return  # (entries are of the memo's view only)
        size += ENTRY_OVERHEAD
        if self._count >= self._max_entries or self._bytes + size > self._max_bytes:
            self.clear()
        if key not in entries:
            self._count += 1
            self._bytes += size
        entries[key] = entry

    def clear(self) -> None:
        for entries in self._by_route.values():
            entries.clear()
        self._count = 0
        self._bytes = 0
