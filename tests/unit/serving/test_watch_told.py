"""serving.watch_told: a subscribe's messages told in one stretch reach its stream together,
in the order told, once per hand-over (nothing handed twice, no empty hand-over), and the
tally kept for the stretch is dropped at each hand-over."""

from __future__ import annotations

from pulsar_lookup_gateway.serving.watch_told import ToldBatch


class _Stream:
    def __init__(self) -> None:
        self.handed: list[list[tuple[str, str]]] = []

    def deliver_many(self, messages: list[tuple[str, str]]) -> None:
        self.handed.append(messages)


def test_messages_reach_the_stream_together_in_order_once() -> None:
    stream, told = _Stream(), ToldBatch()
    told.hand_to(stream)
    assert stream.handed == []  # (nothing told: nothing handed)
    told.add("t1", "m1")
    told.add("t2", "m2")
    told.tally = object()  # type: ignore[assignment]
    told.hand_to(stream)
    assert told.tally is None
    told.add("t3", "m3")
    told.hand_to(stream)
    told.hand_to(stream)
    assert stream.handed == [[("t1", "m1"), ("t2", "m2")], [("t3", "m3")]]
