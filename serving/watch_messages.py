"""The watch's messages, made from each state's message in parts around its topic: a herd's
topics share a few states (one per bundle), so a state's JSON is encoded once and each topic's
message is its two parts around the topic's JSON string, byte for byte what
`TopicState.message_json` makes. Errors are made whole (their message text is no part of a
state's equality). Bounded: at MAX_STATES the parts start over. No I/O."""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii

from pulsar_lookup_gateway.lookup.ownership_changes import TopicState

MAX_STATES = 4096  # states whose message is kept in parts
_PLACEHOLDER = "\x00topic\x00"  # (no URL holds it)
_QUOTED_PLACEHOLDER = json.dumps(_PLACEHOLDER)


class StateMessages:
    def __init__(self) -> None:
        self._parts: dict[TopicState, tuple[str, str]] = {}
        # The last state's parts: a herd's topics of one bundle come in runs of its one
        # state object (serving.watch_index.share), found again without hashing it
        self._last: tuple[TopicState, tuple[str, str]] | None = None

    def message(self, state: TopicState, topic: str) -> str:
        """`state.message_json(topic)`."""
        if not state.dated:
            return state.message_json(topic)
        last = self._last
        if last is not None and last[0] is state:
            parts = last[1]
        else:
            found = self._parts.get(state)
            if found is None:
                if len(self._parts) >= MAX_STATES:
                    self._parts.clear()
                head, _, tail = state.message_json(_PLACEHOLDER).partition(_QUOTED_PLACEHOLDER)
                found = self._parts[state] = (head, tail)
            parts = found
            self._last = (state, parts)
        # (what json.dumps makes of a string, without its encoder's dispatch)
        return parts[0] + encode_basestring_ascii(topic) + parts[1]
