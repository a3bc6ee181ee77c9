"""The messages of one subscribe's topics, told in one stretch of its turn (no wait between):
handed to its stream together (one offer of them all, one charge to the byte budget, one
wake of its writer) instead of one by one, in the order they were told. The subscribe hands
them over before it waits for anything (another turn, an authorization) and once it is done,
so nothing else runs while a message waits here. Also kept for the stretch: where its
lookups' answers are counted (the same for all: one listener choice). No I/O."""

from __future__ import annotations

from typing import Protocol

from pulsar_lookup_gateway.serving.metrics import LookupTally


class ManySink(Protocol):
    def deliver_many(self, messages: list[tuple[str, str]]) -> None: ...


class ToldBatch:
    __slots__ = ("messages", "tally")

    def __init__(self) -> None:
        self.messages: list[tuple[str, str]] = []  # (topic, message), in the order told
        self.tally: LookupTally | None = None  # (set by the first answer counted)

    def add(self, topic: str, message: str) -> None:
        self.messages.append((topic, message))

    def hand_to(self, sink: ManySink) -> None:
        """Give `sink` what was told so far (if anything), and start a new stretch."""
        self.tally = None
        if self.messages:
            messages, self.messages = self.messages, []
            sink.deliver_many(messages)
