"""The lookup tally (plain counts, added to the series at collection) exports exactly what
prometheus-client's own updates would have."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from pulsar_lookup_gateway.serving.metrics import LATENCY_BUCKETS, LookupMetrics

LABELS = ("external", "socket", "binary")
# the bounds themselves (a value equal to a bound belongs to its bucket), and anything between
LATENCIES = st.one_of(st.sampled_from(LATENCY_BUCKETS), st.floats(0, 20, allow_nan=False))


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in registry.collect()
        for s in family.samples
        if s.name.startswith("pulsar_broker_lookup")
    }


@given(st.lists(st.tuples(LATENCIES, st.booleans()), max_size=60), st.integers(0, 60))
def test_tally_equals_direct_updates(answers: list[tuple[float, bool]], scrape_at: int) -> None:
    tallied, direct = LookupMetrics(), LookupMetrics()
    tally = tallied.tally(LABELS)
    for index, (seconds, connect) in enumerate(answers):
        if index == scrape_at:
            samples(tallied.registry)  # a scrape in between flushes what was counted so far
        tally.answered(seconds, connect)
        direct.latency.labels(*LABELS).observe(seconds)
        (direct.answers if connect else direct.redirects).labels(*LABELS).inc()
    for series in (direct.latency, direct.answers, direct.redirects):
        series.labels(*LABELS)  # a tally's series exist from its first use, at zero
    got, want = samples(tallied.registry), samples(direct.registry)
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert abs(got[key] - value) <= 1e-9 * max(1.0, abs(value)), key


@given(st.lists(st.tuples(st.integers(1, 20), LATENCIES, st.booleans()), max_size=20))
def test_answers_counted_together_equal_as_many_direct_updates(
    runs: list[tuple[int, float, bool]],
) -> None:
    """A run of memoised answers counted at once exports what `count` observations of their
    mean time would have."""
    tallied, direct = LookupMetrics(), LookupMetrics()
    tally = tallied.tally(LABELS)
    for count, seconds, connect in runs:
        tally.answered_together(count, seconds, connect)
        for _ in range(count):
            direct.latency.labels(*LABELS).observe(seconds)
            (direct.answers if connect else direct.redirects).labels(*LABELS).inc()
    for series in (direct.latency, direct.answers, direct.redirects):
        series.labels(*LABELS)
    got, want = samples(tallied.registry), samples(direct.registry)
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert abs(got[key] - value) <= 1e-9 * max(1.0, abs(value)), key


def test_a_collection_sees_every_lookup_counted_so_far() -> None:
    metrics = LookupMetrics()
    tally = metrics.tally(LABELS)
    for _ in range(3):
        tally.answered(0.0002, connect=True)
    labels = dict(zip(("listener", "chosen_by", "protocol"), LABELS, strict=True))
    value = metrics.registry.get_sample_value("pulsar_broker_lookup_answers_total", labels)
    assert value == 3
    assert metrics.registry.get_sample_value("pulsar_broker_lookup_count", labels) == 3
    le = {**labels, "le": "0.00025"}
    assert metrics.registry.get_sample_value("pulsar_broker_lookup_bucket", le) == 3
