"""kdbench.report.paired by hand: the exact sign test where paired differences have no spread, and
the exact power (and fewest pairs) of TOST and of an interval wholly outside the margin, against
closed forms and a fixed-seed simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from kdbench.report.paired import (
    beyond_pairs,
    beyond_power,
    equivalence_p,
    equivalence_pairs,
    equivalence_power,
    interval,
    paired_effect,
    paired_power,
    paired_ttest,
    seeds_needed,
)

# RTE's dev set has 277 examples: two seeds, each 3 examples apart, give equal differences
RTE_X = [100 * 183 / 277, 100 * 180 / 277]
RTE_Y = [100 * 180 / 277, 100 * 177 / 277]

# ----------------------------------------------------------------------- differences without spread


def test_equal_differences_take_the_two_sided_sign_test():
    assert paired_ttest([2.0, 3.0, 4.0], [1.0, 2.0, 3.0]) == (math.inf, 0.25)  # 2^(1 - 3)
    assert paired_ttest([1.0] * 5, [1.5] * 5) == (-math.inf, 2.0**-4)
    assert paired_ttest(RTE_X, RTE_Y) == (math.inf, 0.5)
    # differences equal but for float rounding (0.1 + 0.2 != 0.3): no spread either
    assert paired_ttest([0.1 + 0.2, 0.3, 0.3], [0.0, 0.0, 0.0]) == (math.inf, 0.25)
    t, p = paired_ttest([1.0, 2.0], [1.0, 2.0])  # every difference 0: nothing to test
    assert math.isnan(t) and math.isnan(p)


def test_equal_differences_inside_the_margin_give_tost_two_to_the_minus_n():
    assert equivalence_p(0.3, 0.0, 4, 1.0) == 2.0**-4
    assert equivalence_p(-0.3, 1e-15, 6, 1.0) == 2.0**-6  # no spread, to float rounding
    assert equivalence_p(0.0, 0.0, 3, 0.5) == 2.0**-3
    assert equivalence_p(1.0, 0.0, 8, 1.0) == 1.0  # on the margin: not strictly inside
    assert equivalence_p(-1.5, 0.0, 8, 1.0) == 1.0


def test_the_interval_of_equal_differences_is_the_sign_tests():
    # [d, d] covers with 1 - 2^(1 - n): at alpha 0.05 from n = 6 (1/32) on, not at n = 5 (1/16)
    assert interval(0.3, 0.0, 6, 0.05) == (0.3, 0.3)
    assert interval(0.3, 0.0, 5, 0.05) == (-math.inf, math.inf)
    assert interval(0.3, 0.0, 5, 2.0**-4) == (0.3, 0.3)  # coverage exactly 1 - alpha
    assert interval(-0.3, 0.0, 2, 0.5) == (-0.3, -0.3)
    effect = paired_effect(RTE_X, RTE_Y)
    assert effect["se"] == 0.0 and effect["effect"] == math.inf
    assert (effect["ci_low"], effect["ci_high"]) == (-math.inf, math.inf)
    six = paired_effect([2.0] * 6, [1.0] * 6, confidence=0.95)
    assert (six["ci_low"], six["ci_high"]) == (1.0, 1.0)


def test_an_infinite_effect_needs_the_pairs_of_its_sign_test():
    assert seeds_needed(math.inf, 0.05) == 6  # 2^-5 < 0.05 <= 2^-4
    assert seeds_needed(-math.inf, 0.05 / 3) == 7  # 2^-6 < 0.0167 <= 2^-5
    assert equivalence_pairs(0.2, 0.0, 1.0, 0.05) == 5  # 2^-5 < 0.05 <= 2^-4
    assert math.isnan(equivalence_pairs(1.2, 0.0, 1.0, 0.05))
    assert beyond_pairs(2.0, 0.0, 1.0, 0.05) == 6  # [d, d] at 95% from n = 6 on


# ------------------------------------------------------------------------------------ exact power


@pytest.mark.parametrize(
    ("diff", "sd", "level", "n"),
    [(0.5, 1.0, 0.05, 10), (1.3, 1.0, 0.0125, 4), (0.2, 1.0, 0.01, 200), (-3.0, 1.0, 0.05, 2)],
)
def test_an_interval_outside_a_zero_margin_is_the_two_sided_t_test(diff, sd, level, n):
    # with margin 0 "wholly outside" is the t-test's rejection: the noncentral t's power
    assert beyond_power(diff, sd, 0.0, level, n) == pytest.approx(
        paired_power(diff / sd, n, level), abs=1e-9
    )


@pytest.mark.parametrize(
    ("diff", "sd", "alpha", "n"),
    [(0.0, 1.0, 0.05, 20), (0.3, 0.5, 0.05, 9), (-0.4, 0.15, 0.01, 8), (0.6, 0.1, 0.05, 3)],
)
def test_tost_power_is_the_two_one_sided_tests_where_both_cannot_fail(diff, sd, alpha, n):
    # TOST rejects when both one-sided tests do; where the sample std cannot be large enough for
    # both to fail at once (its chance below 1e-12), P(both) = P(one) + P(other) - 1, each a
    # noncentral t
    margin, se, c = 1.0, sd / math.sqrt(n), stats.t.ppf(1 - alpha, n - 1)
    both_fail = stats.chi2.sf((margin / (c * se)) ** 2 * (n - 1), n - 1)
    assert both_fail < 1e-12
    above = stats.nct.sf(c, n - 1, (diff + margin) / se)
    below = stats.nct.cdf(-c, n - 1, (diff - margin) / se)
    assert equivalence_power(diff, sd, margin, alpha, n) == pytest.approx(
        above + below - 1, abs=1e-9
    )


def test_tost_power_matches_a_simulation_where_the_spread_can_defeat_it():
    # diff 0, sd = margin: 11 pairs, the sample std large enough to leave TOST unable to reject
    # with a real chance; a fixed-seed simulation of scipy's one-sided tests, 4 standard errors
    diff, sd, margin, alpha, n, draws = 0.0, 1.0, 1.0, 0.05, 11, 40000
    d = np.random.default_rng(5).normal(diff, sd, (draws, n))
    up = stats.ttest_1samp(d, -margin, axis=1, alternative="greater").pvalue
    down = stats.ttest_1samp(d, margin, axis=1, alternative="less").pvalue
    simulated = np.mean(np.maximum(up, down) < alpha)
    exact = equivalence_power(diff, sd, margin, alpha, n)
    assert abs(exact - simulated) < 4 * math.sqrt(exact * (1 - exact) / draws)


@pytest.mark.parametrize(
    ("diff", "sd", "margin", "alpha", "pairs"),
    [(0.0, 1.0, 1.0, 0.05, 11), (0.3, 0.5, 1.0, 0.05, 5), (0.1, 0.4, 0.46, 0.05 / 3, 14)],
)
def test_equivalence_pairs_are_the_fewest_reaching_80_percent(diff, sd, margin, alpha, pairs):
    assert equivalence_pairs(diff, sd, margin, alpha) == pairs
    assert equivalence_power(diff, sd, margin, alpha, pairs) >= 0.8
    assert equivalence_power(diff, sd, margin, alpha, pairs - 1) < 0.8


@pytest.mark.parametrize(
    ("diff", "sd", "margin", "level", "pairs"),
    [(1.5, 0.5, 0.46, 0.05 / 3, 6), (2.0, 1.0, 0.5, 0.05, 6), (-1.2, 0.8, 0.46, 0.05, 12)],
)
def test_beyond_pairs_are_the_fewest_reaching_80_percent(diff, sd, margin, level, pairs):
    assert beyond_pairs(diff, sd, margin, level) == pairs
    assert beyond_power(diff, sd, margin, level, pairs) >= 0.8
    assert beyond_power(diff, sd, margin, level, pairs - 1) < 0.8
