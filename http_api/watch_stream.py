"""One ownership-watch stream's state: its topics and what it has not been sent yet.

A client that reads slowly gets the latest answer per topic, not every answer: an unsent
message about a topic is replaced by a newer one (counted as coalesced), so a stream holds at
most one message per topic it watches, plus a few answers to its own requests (bounded too).
Pure: the I/O shell offers messages and takes them to send.
"""

from __future__ import annotations

from collections.abc import Iterable

#: Answers to the client's own requests (update_token, invalid names) waiting to be sent; a
#: client that keeps asking without reading goes over it (and its stream is closed).
CONTROL_LIMIT = 1024
#: What a queued message holds besides its text (the str object, its slot in the queue).
MESSAGE_OVERHEAD = 100


def message_bytes(message: str) -> int:
    """The bytes a queued message holds (its JSON is ASCII: a byte a character)."""
    return len(message) + MESSAGE_OVERHEAD


class StreamState:
    def __init__(self, max_topics: int) -> None:
        self.max_topics = max_topics
        self.topics: set[str] = set()
        self._pending: dict[str, str] = {}  # topic -> its latest unsent message, oldest first
        self._control: list[str] = []
        self.coalesced = 0  # messages replaced by a newer one before they were sent
        self.queued_bytes = 0  # what the unsent messages hold (message_bytes)

    def room_for(self, topics: Iterable[str]) -> bool:
        """Whether subscribing `topics` keeps the stream within max_topics."""
        new = {topic for topic in topics if topic not in self.topics}
        return len(self.topics) + len(new) <= self.max_topics

    def add(self, topic: str) -> bool:
        """Subscribe `topic`; False if it was already."""
        if topic in self.topics:
            return False
        self.topics.add(topic)
        return True

    def remove(self, topic: str) -> bool:
        """Unsubscribe `topic` (its unsent message is dropped); False if it was not."""
        if topic not in self.topics:
            return False
        self.topics.discard(topic)
        unsent = self._pending.pop(topic, None)
        if unsent is not None:
            self.queued_bytes -= message_bytes(unsent)
        return True

    def offer(self, topic: str, message: str) -> bool:
        """Queue `message` about a watched `topic` (replacing an unsent one); False if the
        stream does not watch it (any more)."""
        if topic not in self.topics:
            return False
        unsent = self._pending.get(topic)
        if unsent is not None:
            self.coalesced += 1
            self.queued_bytes -= message_bytes(unsent)
        self._pending[topic] = message
        self.queued_bytes += message_bytes(message)
        return True

    def offer_all(self, messages: Iterable[tuple[str, str]]) -> bool:
        """`offer` each (topic, message) in order (a subscribe's first answers: one call, not
        one each); whether any was queued."""
        topics, pending = self.topics, self._pending
        queued = 0
        offered = False
        for topic, message in messages:
            if topic not in topics:
                continue
            unsent = pending.get(topic)
            if unsent is not None:
                self.coalesced += 1
                queued -= len(unsent) + MESSAGE_OVERHEAD
            pending[topic] = message
            queued += len(message) + MESSAGE_OVERHEAD  # (message_bytes)
            offered = True
        self.queued_bytes += queued
        return offered

    def offer_control(self, message: str) -> bool:
        """Queue an answer to the client's request; False when CONTROL_LIMIT are unsent."""
        if len(self._control) >= CONTROL_LIMIT:
            return False
        self._control.append(message)
        self.queued_bytes += message_bytes(message)
        return True

    @property
    def pending(self) -> int:
        return len(self._pending) + len(self._control)

    def take(self) -> list[str]:
        """Everything unsent, answers to requests first, then topics in the order they were
        first queued."""
        taken = self._control
        if self._pending:
            taken = [*taken, *self._pending.values()]
        self._control, self._pending = [], {}
        self.queued_bytes = 0
        return taken
