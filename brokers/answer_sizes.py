"""What a forwarded request's answer weighed last time, so that the next asking client is
charged for it before the broker is asked (serving.held_bytes.Hold.reserve); and, while that
is not known, one client at a time asks.

Without the first, a burst of strangers that never read would each have a broker send its
megabytes down the shared connection, to be dropped on arrival, in front of an honest
client's answer; with it, once one answer was seen, the clients the budget cannot hold are
refused at once and the broker is asked only for those it can (bounded per client by bytes,
not by count).

Without the second, the *first* burst of a request never asked before (its size unknown:
100 strangers asking at once for a 5 MB schema) still reached the broker whole. So while a
request's size is unknown, `turn` lets one caller ask (the one weighing it); the others with
the same key wait until its answer was weighed (or it failed), then are charged as above: no
answer is shared between clients (each asks for itself, with its own identity: the broker
decides what each may see), only the size is learned first. A caller that waits longer than
its deadline fails (BROKER_UNAVAILABLE: the broker did not answer the first one in time).

Bounds: at most ``MAX_KEYS`` sizes remembered (least recently used out; a key longer than
``MAX_KEY`` characters is remembered by its digest); at most ``MAX_WEIGHING`` keys being
weighed at once (past it a request of another key asks unweighed, as before: each weighing is
a request in flight to a broker already, bounded by the link, and a stranger who fills the
table must not make an honest client's different request wait); at most ``MAX_WAITING``
callers waiting on one key (past it TOO_MANY_REQUESTS at once); each wait within its deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections import OrderedDict
from collections.abc import AsyncIterator

from pulsar_lookup_gateway.brokers.failures import unavailable
from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure

__all__ = ["MAX_WAITING", "MAX_WEIGHING", "AnswerSizes"]

MAX_KEYS = 1024
MAX_KEY = 1024  # characters (a topic or namespace name, and the request's kind)
#: Keys whose first answer is being weighed at once (each one request in flight to a broker).
MAX_WEIGHING = 1024
#: Callers waiting for one key's first answer to be weighed.
MAX_WAITING = 1024


class _Weighing:
    """One key's first asking: those waiting for it, woken when it is over."""

    __slots__ = ("over", "waiting")

    def __init__(self) -> None:
        self.over = asyncio.Event()
        self.waiting = 0


class AnswerSizes:
    def __init__(
        self,
        max_keys: int = MAX_KEYS,
        *,
        max_weighing: int = MAX_WEIGHING,
        max_waiting: int = MAX_WAITING,
    ) -> None:
        self._max_keys = max_keys
        self._max_weighing = max_weighing
        self._max_waiting = max_waiting
        self._sizes: OrderedDict[str, int] = OrderedDict()
        self._weighing: dict[str, _Weighing] = {}

    def __len__(self) -> int:
        return len(self._sizes)

    @property
    def weighing(self) -> int:
        """Keys whose first answer is being weighed now."""
        return len(self._weighing)

    def waiting(self, key: str) -> int:
        """Callers waiting for `key`'s first answer to be weighed."""
        weighing = self._weighing.get(_short(key))
        return weighing.waiting if weighing is not None else 0

    def get(self, key: str) -> int:
        """The bytes `key`'s answer weighed last (0: not known)."""
        key = _short(key)
        size = self._sizes.get(key, 0)
        if size:
            self._sizes.move_to_end(key)
        return size

    def put(self, key: str, size: int) -> None:
        key = _short(key)
        self._sizes[key] = size
        self._sizes.move_to_end(key)
        if len(self._sizes) > self._max_keys:
            self._sizes.popitem(last=False)

    @contextlib.asynccontextmanager
    async def turn(self, key: str, timeout: float) -> AsyncIterator[int]:
        """Yields what `key`'s answer weighed last time. 0: not known, and the caller asks
        the broker now (and `put`s what the answer weighed before leaving): other callers
        with `key` wait, at most `timeout` seconds, until it leaves. Raises LookupFailure
        (nothing was asked) when the wait is too long or too many wait already."""
        key = _short(key)
        weighing = await self._wait_for_size(key, timeout)
        try:
            yield self.get(key) if weighing is None else 0
        finally:
            if weighing is not None:
                del self._weighing[key]
                weighing.over.set()

    async def _wait_for_size(self, key: str, timeout: float) -> _Weighing | None:
        """None once `key`'s size is known (or the table of keys being weighed is full);
        else the weighing the caller now does itself."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.get(key):
            weighing = self._weighing.get(key)
            if weighing is None:
                if len(self._weighing) >= self._max_weighing:
                    return None  # (asks unweighed: see the module's bounds)
                weighing = self._weighing[key] = _Weighing()
                return weighing
            if weighing.waiting >= self._max_waiting:
                raise LookupFailure(
                    FailureKind.TOO_MANY_REQUESTS,
                    "too many clients wait for the same request's first answer; retry later",
                )
            weighing.waiting += 1
            try:
                # (wait_for, not asyncio.timeout: a binary request's first steps run outside
                # any task, listeners.binary.requests)
                await asyncio.wait_for(weighing.over.wait(), max(deadline - loop.time(), 0))
            except TimeoutError:
                raise unavailable(
                    f"the broker did not answer the same request within {timeout:g}s; retry"
                ) from None
            finally:
                weighing.waiting -= 1
        return None


def _short(key: str) -> str:
    """`key`, or its digest when it is longer than MAX_KEY (the table stays bounded in bytes)."""
    if len(key) <= MAX_KEY:
        return key
    return "sha256 " + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
