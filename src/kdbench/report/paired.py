"""The arithmetic of paired t-tests: the test, Holm's adjustment within a family, the effect size,
the equivalence test (TOST), and the pairs a test needs for a given power.

Paired differences without spread (all equal, to float rounding: `without_spread`) leave the t
statistic degenerate, its standard error 0, so the exact sign test stands in for it: n equal
non-zero differences give the two-sided p 2^(1 - n), and n equal differences strictly inside a TOST
margin the p 2^(-n); the (1 - alpha) interval is the order statistics' [d, d], whose coverage is
1 - 2^(1 - n), where that reaches 1 - alpha, and (-inf, +inf), no distribution-free interval at
that level, where it does not.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import numpy as np
from scipy import integrate, special, stats

POWER = 0.8  # the power at which `seeds_needed` detects a pair's observed difference
MAX_SEEDS = 1000  # seeds_needed above this is reported as this bound
# Scores are ratios of counts, so equal paired differences differ by float rounding alone: a
# standard error below this x max(1, |mean difference|) is no spread at all.
SPREAD_TOLERANCE = 1e-9
TAIL = 1e-16  # the mass of each tail of the sample std's law that the power's integral leaves out


def without_spread(diff: float, se: float) -> bool:
    """Whether paired differences of mean ``diff`` and standard error ``se`` are all equal, to the
    float rounding of ``SPREAD_TOLERANCE``."""
    return se < SPREAD_TOLERANCE * max(1.0, abs(diff))


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


def _sign_p(n: int) -> float:
    """The exact two-sided sign test's p of n equal non-zero differences: 2^(1 - n)."""
    return float(stats.binomtest(n, n).pvalue)


def _differences(x, y) -> tuple[int, float, float]:
    """The pairs, the mean difference x - y and its standard error (sample std / sqrt(n)); without
    spread the standard error is 0, and the mean 0 too where it is 0 to the same rounding."""
    d = np.asarray(x, dtype=float) - np.asarray(y, dtype=float)
    if len(d) < 2:
        return len(d), float(np.mean(d)) if len(d) else math.nan, math.nan
    mean, se = float(d.mean()), float(d.std(ddof=1)) / math.sqrt(len(d))
    if without_spread(mean, se):
        return len(d), 0.0 if abs(mean) < SPREAD_TOLERANCE else mean, 0.0
    return len(d), mean, se


def paired_ttest(x, y) -> tuple[float, float]:
    """``scipy.stats.ttest_rel`` as floats; NaN below 2 pairs. Differences without spread take the
    exact sign test: p 2^(1 - n) and t +-inf for a common non-zero difference, NaN when every
    difference is 0."""
    n, mean, se = _differences(x, y)
    if n < 2 or (se == 0 and mean == 0):
        return math.nan, math.nan
    if se == 0:
        return math.copysign(math.inf, mean), _sign_p(n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = stats.ttest_rel(np.asarray(x, dtype=float), np.asarray(y, dtype=float))
    return float(result.statistic), float(result.pvalue)


def paired_effect(x, y, confidence: float = 0.95) -> dict:
    """The mean paired difference x - y, its standard error (sample std of the differences /
    sqrt(n), 0 without spread), its two-sided ``confidence`` interval (`interval`) and the
    standardised effect d_z (mean difference / sample std of the differences); NaN for fewer than 2
    pairs, d_z NaN when every difference is 0 and infinite when they are equal and non-zero."""
    n, mean, se = _differences(x, y)
    if n < 2:
        nan = math.nan
        return {"diff": mean, "se": nan, "ci_low": nan, "ci_high": nan, "effect": nan}
    low, high = interval(mean, se, n, 1 - confidence)
    sd = se * math.sqrt(n)
    effect = mean / sd if sd > 0 else (math.nan if mean == 0 else math.copysign(math.inf, mean))
    return {"diff": mean, "se": se, "ci_low": low, "ci_high": high, "effect": effect}


def equivalence_p(diff: float, se: float, n_pairs: int, margin: float) -> float:
    """The p-value of two one-sided paired t-tests (TOST) that the true mean difference lies within
    (-margin, +margin): the larger of the p-values of ``diff > -margin`` and ``diff < +margin``,
    each a t-test with n - 1 degrees of freedom. Differences without spread take the exact sign
    test: 2^(-n) when their common value lies strictly inside the margin, else 1; NaN for fewer
    than 2 pairs."""
    if n_pairs < 2 or math.isnan(se):
        return math.nan
    if without_spread(diff, se):
        inside = n_pairs if abs(diff) < margin else 0  # the differences on the margin's inner side
        return float(stats.binomtest(inside, n_pairs, alternative="greater").pvalue)
    above = stats.t.sf((diff + margin) / se, n_pairs - 1)
    below = stats.t.cdf((diff - margin) / se, n_pairs - 1)
    return float(max(above, below))


def interval(diff: float, se: float, n_pairs: int, alpha: float) -> tuple[float, float]:
    """The two-sided (1 - alpha) t confidence interval of a mean paired difference; NaN for fewer
    than 2 pairs. Without spread, the sign test's: [diff, diff] where 2^(1 - n) <= alpha, else
    (-inf, +inf)."""
    if n_pairs < 2 or math.isnan(se):
        return math.nan, math.nan
    if without_spread(diff, se):
        return (diff, diff) if _sign_p(n_pairs) <= alpha else (-math.inf, math.inf)
    half = float(stats.t.ppf(1 - alpha / 2, n_pairs - 1)) * se
    return diff - half, diff + half


def _over_spread(n: int, rejects: Callable[[float], float], reach: float = math.inf) -> float:
    """The mean of ``rejects(u)``, a test's rejection probability given u = s / sd (s the sample
    std of n normal differences of std sd), over u's law ((n - 1) u^2 ~ chi2(n - 1)) up to
    ``reach``, beyond which the test never rejects. The range leaves out ``TAIL`` of u's mass at
    each end and splits at u's mode, near 1: over an unbounded range ``quad`` misses the narrow
    peak of u's density at many pairs."""
    df = n - 1
    law = stats.chi(df, scale=1 / math.sqrt(df))
    low, high = float(law.isf(1 - TAIL)), min(reach, float(law.isf(TAIL)))
    if high <= low:
        return 0.0
    points = [1.0] if low < 1.0 < high else None
    value, _ = integrate.quad(
        lambda u: rejects(u) * law.pdf(u), low, high, points=points, limit=200
    )
    return float(value)


def equivalence_power(diff: float, sd: float, margin: float, alpha: float, n: int) -> float:
    """The exact power of TOST at ``alpha`` with n pairs whose differences are N(diff, sd^2): given
    u = s / sd it shows equivalence when -margin + c u sd / sqrt(n) < mean < margin - c u sd /
    sqrt(n), c = t_(1-alpha, n-1); for sd 0, whether the sign test's p 2^(-n) is below alpha."""
    if sd == 0:
        return float(equivalence_p(diff, 0.0, n, margin) < alpha)
    se, c = sd / math.sqrt(n), float(stats.t.ppf(1 - alpha, n - 1))

    def rejects(u: float) -> float:
        inner = special.ndtr((margin - diff) / se - c * u)
        outer = special.ndtr((-margin - diff) / se + c * u)
        return max(0.0, float(inner - outer))

    return _over_spread(n, rejects, reach=margin / (c * se))


def beyond_power(diff: float, sd: float, margin: float, level: float, n: int) -> float:
    """The exact probability that the two-sided (1 - level) interval of n pairs whose differences
    are N(diff, sd^2) lies wholly outside (-margin, +margin): given u = s / sd, mean - c u sd /
    sqrt(n) > margin or mean + c u sd / sqrt(n) < -margin, c = t_(1-level/2, n-1); for sd 0,
    whether the sign test's interval [diff, diff] holds at that level and lies outside."""
    if sd == 0:
        low, high = interval(diff, 0.0, n, level)
        return float(low > margin or high < -margin)
    se, c = sd / math.sqrt(n), float(stats.t.ppf(1 - level / 2, n - 1))

    def rejects(u: float) -> float:
        above = special.ndtr((diff - margin) / se - c * u)
        below = special.ndtr((-margin - diff) / se - c * u)
        return float(above + below)

    return _over_spread(n, rejects)


def _fewest_pairs(power_at: Callable[[int], float], power: float, limit: int) -> float:
    """The fewest pairs n >= 2 at which ``power_at(n)`` reaches ``power``, a binary search since
    the power grows with n; ``limit`` when none up to it does."""
    if power_at(limit) < power:
        return float(limit)
    low, high = 2, limit
    while low < high:
        mid = (low + high) // 2
        low, high = (mid + 1, high) if power_at(mid) < power else (low, mid)
    return float(low)


def beyond_pairs(
    diff: float,
    sd: float,
    margin: float,
    alpha: float,
    power: float = POWER,
    limit: int = MAX_SEEDS,
) -> float:
    """The fewest pairs n >= 2 that put the two-sided (1 - alpha) interval of a true difference
    ``diff`` (the differences' std ``sd``) wholly outside (-margin, +margin) with ``power``
    (`beyond_power`, exact), ``limit`` when none up to it does; NaN when |diff| is not outside the
    margin."""
    if math.isnan(diff) or math.isnan(sd) or abs(diff) <= margin:
        return math.nan
    return _fewest_pairs(lambda n: beyond_power(diff, sd, margin, alpha, n), power, limit)


def equivalence_pairs(
    diff: float,
    sd: float,
    margin: float,
    alpha: float,
    power: float = POWER,
    limit: int = MAX_SEEDS,
) -> float:
    """The fewest pairs n >= 2 whose TOST at ``alpha`` shows equivalence within ``margin`` with
    ``power`` when the true difference is ``diff`` and the differences' std is ``sd``
    (`equivalence_power`, exact), ``limit`` when none up to it does; NaN when |diff| is not inside
    the margin (no number of pairs shows it equivalent)."""
    if math.isnan(diff) or math.isnan(sd) or abs(diff) >= margin:
        return math.nan
    return _fewest_pairs(lambda n: equivalence_power(diff, sd, margin, alpha, n), power, limit)


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
    ``limit`` when none up to it does, NaN for a zero or undefined effect. An infinite effect
    (equal non-zero differences) takes the sign test: the fewest pairs whose p 2^(1 - n) is below
    ``alpha``."""
    if math.isnan(effect) or effect == 0:
        return math.nan
    if math.isinf(effect):
        return _fewest_pairs(lambda n: float(_sign_p(n) < alpha), power, limit)
    return _fewest_pairs(lambda n: paired_power(effect, n, alpha), power, limit)
