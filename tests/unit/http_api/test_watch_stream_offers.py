"""http_api.watch_stream: a batch of messages offered at once (a subscribe's first answers)
leaves the stream as offering them one by one does: the same messages queued in the same
order, the same coalesced count and queued bytes, and the same answer (any queued)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pulsar_lookup_gateway.http_api.watch_stream import StreamState

TOPICS = ["a", "b", "c", "unwatched"]


def _stream() -> StreamState:
    stream = StreamState(max_topics=8)
    for topic in TOPICS[:3]:
        stream.add(topic)
    return stream


@given(
    st.lists(st.tuples(st.sampled_from(TOPICS), st.text(max_size=30)), max_size=5),
    st.lists(st.tuples(st.sampled_from(TOPICS), st.text(max_size=30)), max_size=12),
)
def test_offering_a_batch_is_offering_each_in_order(
    before: list[tuple[str, str]], batch: list[tuple[str, str]]
) -> None:
    one_by_one, together = _stream(), _stream()
    for stream in (one_by_one, together):
        for topic, message in before:
            stream.offer(topic, message)
    any_queued = [one_by_one.offer(topic, message) for topic, message in batch]
    assert together.offer_all(batch) == any(any_queued)
    assert together.coalesced == one_by_one.coalesced
    assert together.queued_bytes == one_by_one.queued_bytes
    assert together.pending == one_by_one.pending
    assert together.take() == one_by_one.take()
