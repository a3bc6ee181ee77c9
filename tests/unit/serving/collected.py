"""A watch stream's sink for tests of the ownership watch without a stream: it keeps the
messages it is handed, by topic (tests/unit/serving and tests/unit/lookup share it)."""

from __future__ import annotations

import json
from typing import Any


class Collected:
    """A stream's sink: the messages it was handed, by topic."""

    def __init__(self) -> None:
        self.got: dict[str, dict[str, Any]] = {}

    def deliver(self, topic: str, message: str) -> None:
        self.got[topic] = json.loads(message)

    def deliver_many(self, messages: list[tuple[str, str]]) -> None:
        for topic, message in messages:
            self.deliver(topic, message)

    def watching(self, topic: str) -> None:
        """(A stream keeps the name it is handed; this sink keeps only what it is told.)"""
