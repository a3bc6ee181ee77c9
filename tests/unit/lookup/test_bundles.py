from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulsar_lookup_gateway.lookup.bundles import (
    FULL_UPPER,
    BundleRange,
    NamespaceBundles,
    topic_hash,
)

FOUR = NamespaceBundles.from_strings(
    ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"], 4
)
# The first bundle of FOUR split in two, as a local-policies node stores it.
SPLIT = NamespaceBundles.from_strings(
    ["0x00000000", "0x20000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"], 5
)


def test_hash_is_crc32_of_the_full_name() -> None:
    name = "persistent://public/default/orders-partition-2"
    assert topic_hash(name) == zlib.crc32(name.encode()) & 0xFFFFFFFF
    # A value computed independently (CRC-32/ISO-HDLC check value of "123456789").
    assert topic_hash("123456789") == 0xCBF43926


@pytest.mark.parametrize(
    ("bundles", "hash_value", "name"),
    [
        (FOUR, 0, "0x00000000_0x40000000"),
        (FOUR, 0x3FFFFFFF, "0x00000000_0x40000000"),
        (FOUR, 0x40000000, "0x40000000_0x80000000"),  # exactly on a boundary: upper range
        (FOUR, 0xBFFFFFFF, "0x80000000_0xc0000000"),
        (FOUR, 0xC0000000, "0xc0000000_0xffffffff"),
        (FOUR, 0xFFFFFFFE, "0xc0000000_0xffffffff"),
        (FOUR, 0xFFFFFFFF, "0xc0000000_0xffffffff"),  # the last range includes 0xffffffff
        (SPLIT, 0x1FFFFFFF, "0x00000000_0x20000000"),
        (SPLIT, 0x20000000, "0x20000000_0x40000000"),
        (SPLIT, 0x40000000, "0x40000000_0x80000000"),
    ],
)
def test_find(bundles: NamespaceBundles, hash_value: int, name: str) -> None:
    assert bundles.find(hash_value).name == name


@pytest.mark.parametrize(
    ("count", "boundaries"),
    [
        (1, ["0x00000000", "0xffffffff"]),
        (2, ["0x00000000", "0x80000000", "0xffffffff"]),
        (3, ["0x00000000", "0x55555555", "0xaaaaaaaa", "0xffffffff"]),
        (4, ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"]),
    ],
)
def test_equal_bundles(count: int, boundaries: list[str]) -> None:
    assert NamespaceBundles.equal(count) == NamespaceBundles.from_strings(boundaries, count)


@pytest.mark.parametrize(
    ("boundaries", "num", "message"),
    [
        (["0x00000000"], None, "at least two"),
        (["0x00000001", "0xffffffff"], None, "start at"),
        (["0x00000000", "0xfffffffe"], None, "end at"),
        (["0x00000000", "0x80000000", "0x80000000", "0xffffffff"], None, "increasing"),
        (["0x00000000", "zz", "0xffffffff"], None, "0x-prefixed"),
        (["0x00000000", "0xgg", "0xffffffff"], None, "not a hex"),
        (["0x00000000", "0xffffffff"], 2, "numBundles is 2"),
    ],
)
def test_invalid_boundaries(boundaries: list[str], num: int | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        NamespaceBundles.from_strings(boundaries, num)


def test_range_names() -> None:
    assert BundleRange(0x40000000, 0x80000000).name == "0x40000000_0x80000000"
    assert FOUR.names()[-1] == "0xc0000000_0xffffffff"


@st.composite
def bundle_sets(draw: st.DrawFn) -> NamespaceBundles:
    inner = draw(st.sets(st.integers(1, FULL_UPPER - 1), max_size=40))
    return NamespaceBundles((0, *sorted(inner), FULL_UPPER))


@given(bundle_sets(), st.integers(0, FULL_UPPER))
def test_every_hash_maps_to_exactly_one_bundle(bundles: NamespaceBundles, h: int) -> None:
    containing = [
        r
        for i, r in enumerate(bundles.ranges)
        if r.lower <= h < r.upper or (i == len(bundles.ranges) - 1 and h == FULL_UPPER)
    ]
    assert containing == [bundles.find(h)]
