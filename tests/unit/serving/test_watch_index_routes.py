"""serving.watch_index: a route's topics are found again for the route's next topic, and a
route whose last topic was removed starts over (its new topics are in the index, not in the
dropped table)."""

from __future__ import annotations

from pulsar_lookup_gateway.lookup.selection import ChoiceSource, ListenerChoice
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.serving.memo import AnswerMemo
from pulsar_lookup_gateway.serving.watch_index import WatchIndex

EXTERNAL = ListenerChoice("external", ChoiceSource.EXPLICIT)
INTERNAL = ListenerChoice("internal", ChoiceSource.EXPLICIT)


def _topic(name: str) -> TopicName:
    return TopicName.parse(f"persistent://public/default/{name}")


def test_routes_are_kept_apart_and_a_dropped_route_starts_over() -> None:
    index = WatchIndex(AnswerMemo())
    a, new = index.watch(_topic("a"), EXTERNAL, None)
    assert new
    assert index.watch(_topic("a"), EXTERNAL, None) == (a, False)
    other, new = index.watch(_topic("a"), INTERNAL, None)  # (another route: its own topic)
    assert new and other is not a
    by_role, new = index.watch(_topic("a"), EXTERNAL, "alice")
    assert new and by_role is not a
    # An equal choice, another object: the same route
    same = ListenerChoice("external", ChoiceSource.EXPLICIT)
    assert index.watch(_topic("a"), same, None) == (a, False)
    index.remove(a)
    assert index.get((EXTERNAL, None), a.name) is None
    again, new = index.watch(_topic("a"), EXTERNAL, None)
    assert new and again is not a
    assert index.get((EXTERNAL, None), again.name) is again
    assert index.count == 3
