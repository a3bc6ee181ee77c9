"""maxConcurrentLookupRequest, decided in one place for the full path and the memo alike."""

from __future__ import annotations

import logging

import pytest

from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure, ServerError
from pulsar_lookup_gateway.serving.admission import Admission
from pulsar_lookup_gateway.serving.metrics import LookupMetrics

LABELS = ("external", "socket", "binary")


def refusals(metrics: LookupMetrics) -> float:
    sample = metrics.registry.get_sample_value(
        "pulsar_broker_lookup_failures_total",
        {
            "listener": "external",
            "chosen_by": "socket",
            "protocol": "binary",
            "error": "TooManyRequests",
        },
    )
    return sample or 0.0


def test_a_lookup_is_admitted_below_the_bound_and_refused_at_it() -> None:
    metrics = LookupMetrics()
    admission = Admission(2, metrics, logging.getLogger("test"))
    admission.admit(LABELS)
    admission.pending = 1
    assert admission.has_room()
    admission.admit(LABELS)
    admission.pending = 2
    assert not admission.has_room()  # what a memo of warm answers asks first
    with pytest.raises(LookupFailure) as refused:
        admission.admit(LABELS)
    assert refused.value.kind is FailureKind.TOO_MANY_REQUESTS
    assert refused.value.code is ServerError.TooManyRequests
    assert "maxConcurrentLookupRequest=2" in refused.value.message
    assert refused.value.logged  # one throttled line stands for a burst of them
    assert refusals(metrics) == 1
    with pytest.raises(LookupFailure):
        admission.admit(None)  # a request that is not a lookup: not counted as one
    assert refusals(metrics) == 1
