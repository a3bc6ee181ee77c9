"""What a forwarded request's answer weighed last time, so that the next asking client is
charged for it before the broker is asked (serving.held_bytes.Hold.reserve).

Without it a burst of strangers that never read would each have a broker send its megabytes
down the shared connection, to be dropped on arrival, in front of an honest client's answer;
with it, once one answer was seen, the clients the budget cannot hold are refused at once
and the broker is asked only for those it can (bounded per client by bytes, not by count).
Bounded: at most ``MAX_KEYS`` requests remembered (least recently used out), none whose key
is longer than ``MAX_KEY`` characters."""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["AnswerSizes"]

MAX_KEYS = 1024
MAX_KEY = 1024  # characters (a topic or namespace name, and the request's kind)


class AnswerSizes:
    def __init__(self, max_keys: int = MAX_KEYS) -> None:
        self._max_keys = max_keys
        self._sizes: OrderedDict[str, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sizes)

    def get(self, key: str) -> int:
        """The bytes `key`'s answer weighed last (0: not known)."""
        size = self._sizes.get(key, 0)
        if size:
            self._sizes.move_to_end(key)
        return size

    def put(self, key: str, size: int) -> None:
        if len(key) > MAX_KEY:
            return
        self._sizes[key] = size
        self._sizes.move_to_end(key)
        if len(self._sizes) > self._max_keys:
            self._sizes.popitem(last=False)
