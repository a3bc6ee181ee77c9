"""What forwarded answers weighed (brokers.answer_sizes): remembered, bounded."""

from __future__ import annotations

from pulsar_lookup_gateway.brokers.answer_sizes import MAX_KEY, AnswerSizes


def test_the_last_size_is_remembered_and_the_least_recent_goes_first() -> None:
    sizes = AnswerSizes(max_keys=2)
    assert sizes.get("schema a") == 0
    sizes.put("schema a", 10)
    sizes.put("schema b", 20)
    sizes.put("schema a", 5)
    assert sizes.get("schema a") == 5
    sizes.put("schema c", 30)  # b was the least recently used
    assert (sizes.get("schema b"), sizes.get("schema c"), len(sizes)) == (0, 30, 2)


def test_a_long_key_is_not_remembered() -> None:
    sizes = AnswerSizes()
    sizes.put("x" * (MAX_KEY + 1), 10)
    assert len(sizes) == 0
