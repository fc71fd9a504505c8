"""The tests of a claim's interactions (:class:`kdbench.report.claims.Interaction`) on one group's
runs.

Each objective's init effect is paired by (task, seed) over the keys all four run sets share: d =
score at the lower init - score at the upper. A difference of differences is d_a - d_b per key; a
contrast of magnitudes is s_a d_a - s_b d_b per key, each effect signed by its observed mean (s =
+1 or -1), whose mean is |mean d_a| - |mean d_b|. Either is tested by a two-sided one-sample t-test
of its per-key values against 0 (the paired t-test of the two effects); the p values of a claim's
interactions in one group are Holm-adjusted together, and each interval is at 1 - alpha / m over
those m tests. The signs make the magnitude contrast conditional on the observed directions: an
effect whose mean is near 0 has an uncertain sign, and its |mean| is biased up, against a claim that
it is the smaller one.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from kdbench.report.claims import MAGNITUDE, Interaction
from kdbench.report.paired import holm, interval, paired_effect, paired_ttest, seeds_needed
from kdbench.report.rules import PairedResult


def init_effect(runs: pd.DataFrame, objective: str, lower: str, upper: str) -> pd.Series:
    """Per (task, seed): ``objective``'s score at measured init ``lower`` minus at ``upper``, over
    the keys both have."""
    mine = runs[runs["objective"] == objective].set_index(["task", "seed"])
    at_lower = mine[mine["init"] == lower]["score"]
    at_upper = mine[mine["init"] == upper]["score"]
    return (at_lower - at_upper).dropna()


def contrast_values(
    runs: pd.DataFrame, interaction: Interaction, measured: dict[str, str]
) -> tuple[np.ndarray, float, float]:
    """The per-key values the interaction tests, and the two effects it contrasts (their means, or
    for a magnitude contrast their absolute means), over the keys all four run sets share."""
    lower, upper = measured[interaction.lower], measured[interaction.upper]
    d_a = init_effect(runs, interaction.a, lower, upper)
    d_b = init_effect(runs, interaction.b, lower, upper)
    keys = sorted(set(d_a.index) & set(d_b.index))
    d_a, d_b = d_a.loc[keys].to_numpy(float), d_b.loc[keys].to_numpy(float)
    if not keys:
        return np.array([]), math.nan, math.nan
    if interaction.kind == MAGNITUDE:
        s_a, s_b = (1.0 if d.mean() >= 0 else -1.0 for d in (d_a, d_b))
        return s_a * d_a - s_b * d_b, abs(d_a.mean()), abs(d_b.mean())
    return d_a - d_b, float(d_a.mean()), float(d_b.mean())


def interaction_tests(
    runs: pd.DataFrame, interactions: list[Interaction], measured: dict[str, str], alpha: float
) -> dict[Interaction, tuple[PairedResult, float, float, float]]:
    """Per interaction: its test, the two effects it contrasts, and the pairs a t-test at alpha / m
    needs to detect its observed effect with 80% power."""
    found = {}
    for interaction in interactions:
        values, effect_a, effect_b = contrast_values(runs, interaction, measured)
        zeros = np.zeros(len(values))
        found[interaction] = (values, paired_ttest(values, zeros)[1], effect_a, effect_b)
    adjusted = holm([p for _, p, _, _ in found.values()])
    m = max(int(np.sum(~np.isnan(adjusted))), 1)
    tests = {}
    for (interaction, (values, _, effect_a, effect_b)), p_holm in zip(
        found.items(), adjusted, strict=True
    ):
        shape = paired_effect(values, np.zeros(len(values)))
        level = alpha / m
        test = PairedResult(
            len(values),
            shape["diff"],
            shape["se"],
            float(p_holm),
            m,
            interval(shape["diff"], shape["se"], len(values), level),
            shape["effect"],
        )
        tests[interaction] = (test, effect_a, effect_b, seeds_needed(shape["effect"], level))
    return tests
