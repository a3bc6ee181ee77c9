"""The watch's messages, made from each state's message in parts around its topic: a herd's
topics share a few states (one per bundle), so a state's JSON is encoded once and each topic's
message is its two parts around the topic's JSON string, byte for byte what
`TopicState.message_json` makes. Errors are made whole (their message text is no part of a
state's equality). Bounded: at MAX_STATES the parts start over. No I/O."""

from __future__ import annotations

import json

from pulsar_lookup_gateway.lookup.ownership_changes import TopicState

MAX_STATES = 4096  # states whose message is kept in parts
_PLACEHOLDER = "\x00topic\x00"  # (no URL holds it)
_QUOTED_PLACEHOLDER = json.dumps(_PLACEHOLDER)


class StateMessages:
    def __init__(self) -> None:
        self._parts: dict[TopicState, tuple[str, str]] = {}

    def message(self, state: TopicState, topic: str) -> str:
        """`state.message_json(topic)`."""
        if not state.dated:
            return state.message_json(topic)
        parts = self._parts.get(state)
        if parts is None:
            if len(self._parts) >= MAX_STATES:
                self._parts.clear()
            head, _, tail = state.message_json(_PLACEHOLDER).partition(_QUOTED_PLACEHOLDER)
            parts = self._parts[state] = (head, tail)
        return parts[0] + json.dumps(topic) + parts[1]
