"""serving.watch_index: whether a key set waits for a node to appear (a topic not found), as
depends_on files topics: a not-found state's keys do, an owner's and a state not known yet
do not."""

from __future__ import annotations

from pulsar_lookup_gateway.lookup.ownership_changes import ErrorCode, depends_on, error_state
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.serving.watch_index import names_absence


def test_only_a_not_found_states_keys_wait_for_a_node() -> None:
    topic = TopicName.parse("persistent://public/default/t")
    not_found = depends_on(topic, error_state(ErrorCode.NOT_FOUND, "Topic not found"))
    unknown = depends_on(topic, None)
    assert names_absence(not_found)
    assert names_absence(not_found)  # (asked again: the same)
    assert not names_absence(unknown)
    assert not names_absence(frozenset())
