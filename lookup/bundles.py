"""Namespace bundles: hash ranges that group a namespace's topics."""

from __future__ import annotations

import zlib
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import pairwise

FULL_LOWER = 0x00000000
FULL_UPPER = 0xFFFFFFFF
DEFAULT_NUM_BUNDLES = 4


def topic_hash(full_name: str) -> int:
    """Pulsar's bundle hash: CRC-32 of the full topic name, unsigned."""
    return zlib.crc32(full_name.encode()) & 0xFFFFFFFF


def format_boundary(value: int) -> str:
    return f"0x{value:08x}"


@dataclass(frozen=True, slots=True)
class BundleRange:
    """One bundle, `[lower, upper)`; the namespace's last bundle also holds 0xffffffff."""

    lower: int
    upper: int
    name: str = field(init=False, compare=False)  # lookups use it as a key: format it once

    def __post_init__(self) -> None:
        name = f"{format_boundary(self.lower)}_{format_boundary(self.upper)}"
        object.__setattr__(self, "name", name)

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class NamespaceBundles:
    """The ordered boundaries of one namespace's bundles."""

    boundaries: tuple[int, ...]
    ranges: tuple[BundleRange, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        b = self.boundaries
        ranges = tuple(BundleRange(b[i], b[i + 1]) for i in range(len(b) - 1))
        object.__setattr__(self, "ranges", ranges)

    @classmethod
    def from_strings(cls, boundaries: Sequence[str], num_bundles: int | None) -> NamespaceBundles:
        """Validate Pulsar's stored form; raises ValueError saying what is wrong."""
        values: list[int] = []
        for text in boundaries:
            if not text.lower().startswith("0x"):
                raise ValueError(f"boundary {text!r} is not a 0x-prefixed hex number")
            try:
                values.append(int(text, 16))
            except ValueError:
                raise ValueError(f"boundary {text!r} is not a hex number") from None
        if len(values) < 2:
            raise ValueError("a namespace needs at least two boundaries")
        if values[0] != FULL_LOWER or values[-1] != FULL_UPPER:
            raise ValueError("boundaries must start at 0x00000000 and end at 0xffffffff")
        if any(a >= b for a, b in pairwise(values)):
            raise ValueError("boundaries must be strictly increasing")
        if num_bundles is not None and num_bundles != len(values) - 1:
            raise ValueError(
                f"numBundles is {num_bundles} but {len(values)} boundaries make "
                f"{len(values) - 1} bundles"
            )
        return cls(tuple(values))

    @staticmethod
    def equal(num_bundles: int) -> NamespaceBundles:
        """`num_bundles` equal ranges, as Pulsar writes them when it creates a namespace."""
        return _equal_bundles(num_bundles)

    @staticmethod
    def full() -> NamespaceBundles:
        """One bundle over the whole hash range: what Pulsar's brokers use for a namespace whose
        policies hold no bundle data."""
        return _equal_bundles(1)

    def find(self, hash_value: int) -> BundleRange:
        index = bisect_right(self.boundaries, hash_value) - 1
        # The last boundary (0xffffffff) belongs to the last range, not to a range of its own.
        if index >= len(self.ranges):
            index = len(self.ranges) - 1
        return self.ranges[index]

    def names(self) -> list[str]:
        return [r.name for r in self.ranges]


@lru_cache(maxsize=64)
def _equal_bundles(num_bundles: int) -> NamespaceBundles:
    if num_bundles < 1:
        raise ValueError("a namespace has at least one bundle")
    step = 2**32 // num_bundles
    boundaries = [i * step for i in range(num_bundles)] + [FULL_UPPER]
    return NamespaceBundles(tuple(boundaries))
