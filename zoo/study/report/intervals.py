"""Interval estimates over seeds (Agarwal et al. 2021, "Deep RL at the Edge of the Statistical
Precipice", arXiv:2108.13264): the interquartile mean with a 95% percentile-bootstrap interval, paired
differences against a baseline arm with their interval, the probability of improvement, and how many
seeds a difference of the observed size would need.

The bootstrap is scipy's (`scipy.stats.bootstrap`, method "percentile", as rliable's default) with a
fixed generator seed (`BOOTSTRAP_SEED`), so a report is reproducible. Agarwal et al. stratify the
bootstrap over tasks; a zoo metric is one task, so its stratified bootstrap resamples the seeds.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from statistics import NormalDist
from typing import Sequence

import numpy as np
from scipy import stats as sps

BOOTSTRAP_SEED = 0
N_RESAMPLES = 9999  # scipy's default
CONFIDENCE = 0.95
POWER = 0.8
# |delta| <= REL_TOL * max(1, max |value|) is rounding noise, a difference of 0: the metrics are means
# of float32 tensors (machine epsilon 1.19e-7), so per-seed values carry ~1e-7 relative noise (seen: two
# arms whose per-seed differences sum to 0 exactly gave delta 2.98e-09 at values ~0.75, and
# 25889815944021 "seeds needed"); a real effect below 1e-6 of the values' scale is no effect.
REL_TOL = 1e-6
FEW_SEEDS = 5  # below this many seeds (pairs) a percentile-bootstrap interval is about [min, max]
FEW_MARK = "†"


def finite(values: Sequence[float | None]) -> list[float]:
    """The finite numbers of `values` (None, NaN and inf left out), in order."""
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def iqm(values: Sequence[float], axis: int | None = None) -> float | np.ndarray:
    """Interquartile mean: the mean of the values left after cutting int(0.25 n) from each end
    (scipy.stats.trim_mean(x, 0.25), Agarwal et al. 2021 §4; for n < 4 it is the plain mean)."""
    return sps.trim_mean(np.asarray(values, dtype=float), 0.25, axis=axis)


def _iqm_stat(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return sps.trim_mean(x, 0.25, axis=axis)


def _mean_stat(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis)


def _bootstrap(data: tuple[np.ndarray, ...], statistic, paired: bool = False) -> tuple[float, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a constant sample gives a degenerate (zero-width) interval
        res = sps.bootstrap(
            data,
            statistic,
            n_resamples=N_RESAMPLES,
            paired=paired,
            vectorized=True,
            confidence_level=CONFIDENCE,
            method="percentile",
            rng=np.random.default_rng(BOOTSTRAP_SEED),
        )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


@dataclass
class Estimate:
    """One metric of one arm over its n seeds: IQM and its 95% interval (None for n < 2)."""

    n: int
    iqm: float | None
    low: float | None = None
    high: float | None = None


def estimate(values: Sequence[float | None]) -> Estimate:
    """IQM of the finite values with a 95% percentile-bootstrap interval of the IQM (fixed seed).
    One value: the value, no interval; none: Estimate(0, None)."""
    v = finite(values)
    if not v:
        return Estimate(0, None)
    if len(v) == 1:
        return Estimate(1, v[0])
    lo, hi = _bootstrap((np.asarray(v),), _iqm_stat)
    return Estimate(len(v), float(iqm(v)), lo, hi)


def probability_of_improvement(x: Sequence[float], y: Sequence[float]) -> float | None:
    """P(X > Y) over every pair of a run of X and a run of Y, ties counting 1/2 = U / (n m) of the
    Mann-Whitney test (Agarwal et al. 2021 §4, "probability of improvement"); None when a side is empty."""
    x, y = finite(x), finite(y)
    if not x or not y:
        return None
    wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in x for b in y)
    return wins / (len(x) * len(y))


def noise_tolerance(*values: Sequence[float]) -> float:
    """REL_TOL * max(1, max |value|) over the values compared: a difference at most this large is
    floating-point rounding of float32 metrics, not an effect."""
    return REL_TOL * max([1.0, *(abs(v) for vs in values for v in vs)])


def seeds_needed(sigma_d: float, delta: float, tol: float = 0.0) -> float:
    """Seeds for a two-sided test at 5% to detect a mean difference `delta` with power 0.8 when the
    differences have std `sigma_d`: n = (z_0.975 + z_0.8)^2 sigma_d^2 / delta^2, rounded up (the
    normal approximation of a paired t-test). inf when |delta| <= tol (0, or rounding noise:
    `noise_tolerance`); at least 2."""
    if abs(delta) <= tol:
        return math.inf
    z = NormalDist().inv_cdf(1 - (1 - CONFIDENCE) / 2) + NormalDist().inv_cdf(POWER)
    return float(max(2, math.ceil(z * z * sigma_d * sigma_d / (delta * delta))))


@dataclass
class Difference:
    """arm - baseline for one metric: mean difference, its 95% interval, P(improvement), seeds for
    80% power; paired tells whether the seeds were paired (`pairs` of them) or the arms compared as
    independent samples."""

    paired: bool
    pairs: int
    delta: float | None
    low: float | None = None
    high: float | None = None
    p_improve: float | None = None
    seeds_needed: float | None = None
    tol: float = 0.0

    @property
    def verdict(self) -> str:
        """ "1 seed: no interval", "not distinguishable at this budget" (the interval holds 0, within
        the rounding tolerance `tol`), or "higher" / "lower" (the arm's value than the baseline's, the
        interval excluding 0), marked "higher† (n < 5: indicative)" from fewer than FEW_SEEDS pairs: with
        2 pairs the interval is exactly [min d, max d], so two positive differences read "higher" with
        chance 1/4 under no effect (Agarwal et al. 2021, arXiv:2108.13264, §3: few runs)."""
        if self.low is None or self.high is None:
            return "1 seed: no interval" if self.delta is not None else "no data"
        if self.low <= self.tol and self.high >= -self.tol:
            return "not distinguishable at this budget"
        word = "higher" if self.low > 0 else "lower"
        return f"{word}{FEW_MARK} (n < {FEW_SEEDS}: indicative)" if self.pairs < FEW_SEEDS else word


def difference(arm: dict[int, float], base: dict[int, float], paired: bool) -> Difference:
    """arm - baseline for one metric, from {seed: value} of each.

    paired: the arms saw the same prompts at each (seed, step), so seed s of one is compared with seed
    s of the other: the interval bootstraps the mean of the per-seed differences d_s over the common
    seeds, sigma_d is their sample std. Unpaired: the difference of the two means, bootstrapped as two
    independent samples, sigma_d^2 = s_arm^2 + s_base^2. Under two values per side: no interval."""
    a = {s: v for s, v in arm.items() if v is not None and math.isfinite(v)}
    b = {s: v for s, v in base.items() if v is not None and math.isfinite(v)}
    tol = noise_tolerance(a.values(), b.values())
    if paired:
        common = sorted(set(a) & set(b))
        d = np.asarray([a[s] - b[s] for s in common])
        if not len(d):
            return Difference(True, 0, None)
        out = Difference(
            True,
            len(d),
            float(d.mean()),
            p_improve=probability_of_improvement(list(a.values()), list(b.values())),
            tol=tol,
        )
        if len(d) >= 2:
            out.low, out.high = _bootstrap((d,), _mean_stat)
            out.seeds_needed = seeds_needed(float(d.std(ddof=1)), out.delta, tol)
        return out
    x, y = np.asarray(list(a.values())), np.asarray(list(b.values()))
    if not len(x) or not len(y):
        return Difference(False, 0, None)
    out = Difference(
        False,
        min(len(x), len(y)),
        float(x.mean() - y.mean()),
        p_improve=probability_of_improvement(list(x), list(y)),
        tol=tol,
    )
    if len(x) >= 2 and len(y) >= 2:
        out.low, out.high = _bootstrap((x, y), lambda p, q, axis=-1: np.mean(p, axis=axis) - np.mean(q, axis=axis))
        out.seeds_needed = seeds_needed(math.sqrt(x.var(ddof=1) + y.var(ddof=1)), out.delta, tol)
    return out
