"""The arithmetic of paired t-tests: the test, Holm's adjustment within a family, the effect size,
the equivalence test (TOST), and the pairs a test needs for a given power."""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy import stats

POWER = 0.8  # the power at which `seeds_needed` detects a pair's observed difference
MAX_SEEDS = 1000  # seeds_needed above this is reported as this bound


def holm(pvalues) -> np.ndarray:
    """Holm-Bonferroni step-down adjustment.

    Sort the finite p ascending; ``adjusted_i = max_{j <= i} min(1, (m - j) * p_(j))`` (0-based j),
    mapped back to the input order. NaN p values (untestable pairs) stay NaN and do not count in m.
    """
    p = np.asarray(pvalues, dtype=float)
    adjusted = np.full(p.shape, np.nan)
    valid = np.flatnonzero(~np.isnan(p))
    m = len(valid)
    if m == 0:
        return adjusted
    order = valid[np.argsort(p[valid], kind="stable")]
    steps = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted[order] = np.maximum.accumulate(steps)
    return adjusted


def paired_ttest(x, y) -> tuple[float, float]:
    """``scipy.stats.ttest_rel`` as floats; NaN below 2 pairs (scipy's NaN for zero variance)."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if len(x) < 2:
        return math.nan, math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = stats.ttest_rel(x, y)
    return float(result.statistic), float(result.pvalue)


def paired_effect(x, y, confidence: float = 0.95) -> dict:
    """The mean paired difference x - y, its standard error (sample std of the differences /
    sqrt(n)), its two-sided t confidence interval and the standardised effect d_z (mean difference /
    sample std of the differences); NaN for fewer than 2 pairs, d_z NaN when every difference is 0
    and infinite when they are equal and non-zero."""
    d = np.asarray(x, dtype=float) - np.asarray(y, dtype=float)
    if len(d) < 2:
        return {
            "diff": float(np.mean(d)) if len(d) else math.nan,
            "se": math.nan,
            "ci_low": math.nan,
            "ci_high": math.nan,
            "effect": math.nan,
        }
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    se = sd / math.sqrt(len(d))
    half = float(stats.t.ppf((1 + confidence) / 2, len(d) - 1)) * se
    effect = mean / sd if sd > 0 else (math.nan if mean == 0 else math.copysign(math.inf, mean))
    return {"diff": mean, "se": se, "ci_low": mean - half, "ci_high": mean + half, "effect": effect}


def equivalence_p(diff: float, se: float, n_pairs: int, margin: float) -> float:
    """The p-value of two one-sided paired t-tests (TOST) that the true mean difference lies within
    (-margin, +margin): the larger of the p-values of ``diff > -margin`` and ``diff < +margin``,
    each a t-test with n - 1 degrees of freedom. Equal differences (``se`` 0) give 0 inside the
    margin and 1 outside; NaN for fewer than 2 pairs."""
    if n_pairs < 2 or math.isnan(se):
        return math.nan
    if se == 0:
        return 0.0 if abs(diff) < margin else 1.0
    above = stats.t.sf((diff + margin) / se, n_pairs - 1)
    below = stats.t.cdf((diff - margin) / se, n_pairs - 1)
    return float(max(above, below))


def interval(diff: float, se: float, n_pairs: int, alpha: float) -> tuple[float, float]:
    """The two-sided (1 - alpha) t confidence interval of a mean paired difference; NaN for fewer
    than 2 pairs."""
    if n_pairs < 2 or math.isnan(se):
        return math.nan, math.nan
    half = float(stats.t.ppf(1 - alpha / 2, n_pairs - 1)) * se
    return diff - half, diff + half


def beyond_pairs(
    diff: float,
    sd: float,
    margin: float,
    alpha: float,
    power: float = POWER,
    limit: int = MAX_SEEDS,
) -> float:
    """About how many pairs put the two-sided (1 - alpha) interval of a true difference ``diff``
    wholly outside (-margin, +margin) with ``power``: the normal approximation n = ((z_(1-alpha/2)
    + z_power) sd / (|diff| - margin))^2, at least 2, ``limit`` at most; NaN when |diff| is not
    outside the margin."""
    if math.isnan(diff) or math.isnan(sd) or abs(diff) <= margin:
        return math.nan
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    return float(min(limit, max(2, math.ceil((z * sd / (abs(diff) - margin)) ** 2))))


def equivalence_pairs(
    diff: float,
    sd: float,
    margin: float,
    alpha: float,
    power: float = POWER,
    limit: int = MAX_SEEDS,
) -> float:
    """About how many pairs TOST at ``alpha`` needs to show equivalence within ``margin`` with
    ``power`` when the true difference is ``diff`` and the differences' std is ``sd``: the normal
    approximation n = ((z_(1-alpha) + z_power) sd / (margin - |diff|))^2, at least 2, ``limit`` at
    most; NaN when |diff| is not inside the margin (no number of pairs shows it equivalent)."""
    if math.isnan(diff) or math.isnan(sd) or abs(diff) >= margin:
        return math.nan
    z = stats.norm.ppf(1 - alpha) + stats.norm.ppf(power)
    return float(min(limit, max(2, math.ceil((z * sd / (margin - abs(diff))) ** 2))))


def paired_power(effect: float, n: int, alpha: float) -> float:
    """The power of a two-sided paired t-test at ``alpha`` with ``n`` pairs against a true
    standardised effect ``effect`` (d_z): the noncentral t with n - 1 degrees of freedom and
    noncentrality d_z sqrt(n)."""
    critical = stats.t.ppf(1 - alpha / 2, n - 1)
    shift = abs(effect) * math.sqrt(n)
    return float(stats.nct.sf(critical, n - 1, shift) + stats.nct.cdf(-critical, n - 1, shift))


def seeds_needed(
    effect: float, alpha: float, power: float = POWER, limit: int = MAX_SEEDS
) -> float:
    """The fewest pairs n >= 2 whose paired t-test at ``alpha`` detects ``effect`` with ``power``;
    ``limit`` when none up to it does, NaN for a zero or undefined effect, 2 for an infinite one
    (equal non-zero differences)."""
    if math.isnan(effect) or effect == 0:
        return math.nan
    if math.isinf(effect):
        return 2.0
    if paired_power(effect, limit, alpha) < power:
        return float(limit)
    low, high = 2, limit
    while low < high:  # the power grows with n
        mid = (low + high) // 2
        low, high = (mid + 1, high) if paired_power(effect, mid, alpha) < power else (low, mid)
    return float(low)
