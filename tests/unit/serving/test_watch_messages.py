"""serving.watch_messages: a topic's message made from its state's parts is byte for byte the
state's own `message_json`, whatever the topic's name (quotes, backslashes, non-ASCII)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulsar_lookup_gateway.lookup.ownership_changes import (
    ErrorCode,
    TopicState,
    TopicStateKind,
    error_state,
)
from pulsar_lookup_gateway.serving import watch_messages
from pulsar_lookup_gateway.serving.watch_messages import StateMessages

STATES = [
    TopicState(TopicStateKind.OWNER, 7, "pulsar://b1:6650", None, "http://b1:8080", ""),
    TopicState(TopicStateKind.OWNER, 9, 'pulsar://b\\x"2:6650', "pulsar+ssl://b2", None, None),
    TopicState(TopicStateKind.UNOWNED, 12),
    error_state(ErrorCode.NOT_FOUND, "no such topic"),
    error_state(ErrorCode.NOT_FOUND, "another message, an equal state"),
]


@given(st.lists(st.tuples(st.sampled_from(STATES), st.text(max_size=80)), max_size=20))
def test_a_message_is_its_states_message_json(told: list[tuple[TopicState, str]]) -> None:
    messages = StateMessages()
    for state, topic in told:
        assert messages.message(state, topic) == state.message_json(topic)


def test_the_parts_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch_messages, "MAX_STATES", 3)
    messages = StateMessages()
    for generation in range(10):
        state = TopicState(TopicStateKind.UNOWNED, generation)
        assert messages.message(state, "t") == state.message_json("t")
    assert len(messages._parts) <= 3
