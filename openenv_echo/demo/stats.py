"""Intervals for the demo's figures: Student-t 95% intervals over training seeds, Wilson intervals for success.

Every interval is ``[low, high]``; with a single seed there is no spread to estimate, so ``ci95`` is ``None``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

# two-sided 95% quantiles of Student's t by degrees of freedom (1..30); beyond 30 the normal 1.96 is within 2%
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t975(df: int) -> float:
    if df < 1:
        raise ValueError("need at least 1 degree of freedom")
    return _T975[df - 1] if df <= len(_T975) else 1.96


def mean_ci(values: Sequence[float]) -> dict[str, Any]:
    """``{"mean", "ci95", "per_seed", "n"}``: mean and Student-t 95% interval of per-seed values."""
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("no values")
    n = len(xs)
    m = sum(xs) / n
    ci = None
    if n > 1:
        sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
        h = t975(n - 1) * sd / math.sqrt(n)
        ci = [m - h, m + h]
    return {"mean": m, "ci95": ci, "per_seed": xs, "n": n}


def paired_difference(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """Mean and 95% interval of ``a - b`` paired by seed (the arms share prompts and sampler seeds)."""
    if len(a) != len(b):
        raise ValueError("paired values need the same seeds")
    return mean_ci([x - y for x, y in zip(a, b, strict=True)])


def wilson(successes: int, n: int, z: float = 1.96) -> list[float]:
    """Wilson score 95% interval of a binomial proportion."""
    if n < 1 or not 0 <= successes <= n:
        raise ValueError("need 0 <= successes <= n and n >= 1")
    p = successes / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return [max(0.0, centre - half), min(1.0, centre + half)]


def gap_closed(start: float, arm: float, reference: float) -> float | None:
    """Share of the start -> reference drop in env CE that an arm achieves (1 = as far as direct CE)."""
    gap = start - reference
    return None if gap <= 0 else (start - arm) / gap
