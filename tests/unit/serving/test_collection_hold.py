"""serving.collection_hold's young-generation threshold: raised to YOUNG_THRESHOLD, never
lowered, and left alone when the collector's thresholds were turned off (0)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from pulsar_lookup_gateway.serving.collection_hold import (
    YOUNG_THRESHOLD,
    raise_young_threshold,
)


@pytest.fixture
def thresholds() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


@pytest.mark.usefixtures("thresholds")
def test_the_young_threshold_is_raised_and_the_others_kept() -> None:
    gc.set_threshold(700, 11, 12)
    raise_young_threshold()
    assert gc.get_threshold() == (YOUNG_THRESHOLD, 11, 12)
    raise_young_threshold()  # (again: the same)
    assert gc.get_threshold() == (YOUNG_THRESHOLD, 11, 12)


@pytest.mark.usefixtures("thresholds")
def test_a_higher_or_turned_off_threshold_is_left_as_it_is() -> None:
    gc.set_threshold(YOUNG_THRESHOLD * 2, 10, 10)
    raise_young_threshold()
    assert gc.get_threshold() == (YOUNG_THRESHOLD * 2, 10, 10)
    gc.set_threshold(0, 10, 10)
    raise_young_threshold()
    assert gc.get_threshold()[0] == 0
