"""Intervals for the demo's figures.

* ``bootstrap``: the headline intervals. A two-level percentile bootstrap over **test worlds × RL seeds**, paired by
  world (and by seed where two arms are compared): each replicate draws the worlds with replacement once, and the
  seeds with replacement once, and applies both draws to every quantity of the comparison, so world sampling and
  RL-seed variance are both in the interval and a difference keeps its pairing. The start checkpoint is one
  evaluation on the same worlds, so it enters with the world draw only. Env CE is a ratio (nats over tokens of the
  drawn worlds), success a mean over the drawn (seed, world) cells: replays of one world are never counted as
  independent episodes. ``bootstrap_se`` is the same bootstrap's standard error (the λ rule's, on validation worlds).
  ``draw`` sizes each replicate's draws as multiples of the observed worlds and seeds: 0 holds that source at the
  observed units (the interval without its variance), 4 draws four times as many (a recording that size, if the
  figures held: a planning figure, not a result).
* ``mean_ci``: Student-t 95% intervals over seeds (validation figures of the λ sweep).

Every interval is ``[low, high]``; with a single seed there is no spread to estimate, so ``ci95`` is ``None``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

BOOTSTRAP_REPLICATES = 4000
BOOTSTRAP_SEED = 20261126

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


def gap_closed(start: float, arm: float, reference: float) -> float | None:
    """Share of the start -> reference drop in env CE that an arm achieves (1 = as far as direct CE)."""
    gap = start - reference
    return None if gap <= 0 else (start - arm) / gap


@dataclass(frozen=True)
class Cells:
    """Per (seed, world) values of one quantity: ``num[s, w] / den[w]`` summed over drawn cells is the figure
    (``den`` all ones: a mean of per-world values such as success; token counts: a per-token CE)."""

    num: np.ndarray  # (S, W)
    den: np.ndarray  # (W,)

    @classmethod
    def of(cls, num: Sequence[Sequence[float]] | Sequence[float], den: Sequence[float] | None = None) -> Cells:
        a = np.asarray(num, dtype=np.float64)
        if a.ndim == 1:
            a = a[None, :]  # one evaluation (the start): the same values under every seed draw
        d = np.ones(a.shape[1]) if den is None else np.asarray(den, dtype=np.float64)
        if d.shape != (a.shape[1],):
            raise ValueError("den must have one value per world")
        return cls(a, d)

    def point(self) -> float:
        return float(self.num.sum(axis=1).mean() / self.den.sum())

    def replicates(self, seed_w: np.ndarray, world_w: np.ndarray) -> np.ndarray:
        """(B,) the figure under each replicate's seed weights (B, S) and world weights (B, W)."""
        s = self.num.shape[0]
        sw = seed_w if s == seed_w.shape[1] else np.ones((seed_w.shape[0], s))
        top: np.ndarray = np.einsum("bs,sw,bw->b", sw, self.num, world_w) / sw.sum(axis=1)
        out: np.ndarray = top / (world_w @ self.den)
        return out


def bootstrap(
    fn: Callable[[dict[str, Any]], Any],
    cells: dict[str, Cells],
    replicates: int = BOOTSTRAP_REPLICATES,
    draw: tuple[float, float] = (1, 1),
) -> list[float]:
    """``[point, low, high]`` of ``fn(figures)`` (``figures``: name -> figure of each ``Cells``; ``fn`` must work
    on floats and elementwise on arrays, e.g. ``lambda f: f["echo"] - f["grpo"]``), with a 95% percentile interval
    from the paired worlds × seeds bootstrap: every figure sees the same world and seed draws. Figures with several
    seeds must share them (same count, same order); one-evaluation figures (the start) see the world draw only.
    ``draw``: (worlds, seeds), each draw's size as a multiple of the observed count, 0 for no draw (module doc)."""
    point, reps = _replicates(fn, cells, replicates, draw)
    lo, hi = np.nanpercentile(reps, [2.5, 97.5])
    return [point, float(lo), float(hi)]


def bootstrap_se(
    fn: Callable[[dict[str, Any]], Any], cells: dict[str, Cells], replicates: int = BOOTSTRAP_REPLICATES
) -> float:
    """The standard error of ``fn(figures)`` under the same worlds × seeds bootstrap as ``bootstrap``."""
    return float(np.nanstd(_replicates(fn, cells, replicates, (1, 1))[1], ddof=1))


def _draws(rng: np.random.Generator, n: int, multiple: float, replicates: int) -> np.ndarray:
    """(B, n) counts of each observed unit in each replicate: ``multiple`` × n draws with replacement, or every unit
    once when ``multiple`` is 0."""
    if multiple == 0:
        return np.ones((replicates, n))
    if round(n * multiple) < 1:
        raise ValueError(f"a draw's multiple must be 0 or draw at least one unit, not {multiple:g} of {n}")
    return rng.multinomial(round(n * multiple), np.full(n, 1 / n), size=replicates).astype(np.float64)


def _replicates(
    fn: Callable[[dict[str, Any]], Any], cells: dict[str, Cells], replicates: int, draw: tuple[float, float]
) -> tuple[float, np.ndarray]:
    """The point figure and its (B,) bootstrap replicates."""
    worlds = {c.num.shape[1] for c in cells.values()}
    seeds = {c.num.shape[0] for c in cells.values()} - {1}
    if len(worlds) != 1 or len(seeds) > 1:
        raise ValueError("paired figures need the same worlds and the same seeds")
    w, s = worlds.pop(), (seeds.pop() if seeds else 1)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    world_w, seed_w = _draws(rng, w, draw[0], replicates), _draws(rng, s, draw[1], replicates)
    point = float(fn({k: c.point() for k, c in cells.items()}))
    with np.errstate(divide="ignore", invalid="ignore"):
        reps = np.asarray(fn({k: c.replicates(seed_w, world_w) for k, c in cells.items()}), dtype=np.float64)
    return point, reps
