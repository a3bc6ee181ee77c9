"""Small pieces the benchmarks share."""

from __future__ import annotations

import resource


def cpu_seconds() -> float:
    """User + system CPU time of this process: a cost per operation that does not depend on how
    fast the other side (or anything else on the machine) is."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def percentile(values: list[float], fraction: float) -> float:
    """The value at `fraction` (0..1) of the sorted values; NaN when there are none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]
