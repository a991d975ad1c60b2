"""Statistics shared by the benchmark scripts: quantiles and medians with their spread."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

__all__ = ["pct", "summary"]


def pct(xs: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) with linear interpolation."""
    s = sorted(xs)
    if not s:
        return float("nan")
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summary(values: Sequence[float]) -> dict[str, float]:
    """Median over repetitions, with the spread (min..max) and the count."""
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }
