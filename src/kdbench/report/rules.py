"""The rules that turn one comparison's tests into a verdict and a reason, and the pairs that would
settle a comparison they leave open (:mod:`kdbench.report.verdicts` applies them).

``p`` is Holm-adjusted within the comparison's family, ``alpha`` the report's level, ``m`` the
family's testable pairs. A family is read after Holm, so a claimed difference is significant when p
< alpha, and the interval that decides a claimed tie is the difference's (1 - alpha / m) t interval,
simultaneous over the family (Bonferroni, the level of Holm's first step). Equivalence (TOST, both
one-sided tests at alpha) needs no adjustment: a claim holds only when each of its comparisons does,
an intersection-union test, whose level is that of each part.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kdbench.report.claims import DIFFER, GREATER, LESS, TIE
from kdbench.report.paired import beyond_pairs, equivalence_pairs

SUPPORTED, CONTRADICTED, INCONCLUSIVE, NOT_COVERED = (
    "supported",
    "contradicted",
    "inconclusive",
    "not covered",
)
TOO_FEW = "too few seeds (n_pairs < 2)"
UNTESTABLE = "untestable (every paired difference is 0)"
NOT_SIGNIFICANT = "effect not significant"
OPPOSITE = "effect not significant, observed in the opposite direction"
EQUIVALENT = "equivalent within the margin (TOST)"
EQUIVALENT_AND_DIFFERENT = (
    "equivalent within the margin (TOST), though significantly different: a difference smaller "
    "than the margin"
)
OUTSIDE = "difference outside the margin (its family-level interval excludes the margin)"
NOT_EQUIVALENT = "neither significantly different nor shown equivalent (TOST)"
UNSETTLED = "significantly different, yet neither shown equivalent nor outside the margin"
NO_MARGIN = "no margin: the dev set's size is unknown; state one in the claim"
NO_RUNS = "runs missing"
ALL_COLLAPSED = "every run collapsed to one class: no comparison made"
SEVERITY = (CONTRADICTED, NOT_COVERED, INCONCLUSIVE, SUPPORTED)  # the order reasons are tallied in


@dataclass(frozen=True)
class PairedResult:
    """One comparison's tests, oriented as asserted (a - b): pairs, the mean difference and its
    standard error, the Holm p, the family's testable pairs ``m``, the difference's (1 - alpha / m)
    interval, its standardised effect (d_z) and, for a claimed tie, the margin and TOST p."""

    n_pairs: int
    diff: float
    se: float
    p_holm: float
    m: int
    ci: tuple[float, float]
    effect: float = math.nan
    margin: float = math.nan
    p_equivalence: float = math.nan

    @property
    def sd(self) -> float:
        return self.se * math.sqrt(self.n_pairs)


def combine(verdicts) -> str:
    """Contradicted if any, else supported if all, else not covered if any, else inconclusive."""
    verdicts = list(verdicts)
    if CONTRADICTED in verdicts:
        return CONTRADICTED
    if verdicts and all(v == SUPPORTED for v in verdicts):
        return SUPPORTED
    if NOT_COVERED in verdicts or not verdicts:
        return NOT_COVERED
    return INCONCLUSIVE


def verdict(relation: str, test: PairedResult, alpha: float) -> tuple[str, str]:
    """(verdict, reason) of one asserted comparison (``>``, ``<``, ``!=`` or a tie ``~``)."""
    if test.n_pairs < 2:
        return INCONCLUSIVE, TOO_FEW
    if relation == TIE:  # TOST decides, also where every paired difference is 0 (the sign test)
        return _tie(test, alpha)
    if math.isnan(test.p_holm):
        return INCONCLUSIVE, UNTESTABLE
    sign = {GREATER: 1.0, LESS: -1.0}.get(relation, 0.0)  # the claimed direction of a - b
    if test.p_holm >= alpha:
        return INCONCLUSIVE, OPPOSITE if sign * test.diff < 0 else NOT_SIGNIFICANT
    if relation == DIFFER:
        return SUPPORTED, "significant, as claimed"
    if sign * test.diff > 0:
        return SUPPORTED, "significant, in the claimed direction"
    return CONTRADICTED, "significant in the opposite direction"


def _tie(test: PairedResult, alpha: float) -> tuple[str, str]:
    """Supported when TOST shows the difference within the margin, contradicted when its
    family-level interval lies wholly outside it, else inconclusive."""
    if math.isnan(test.margin):
        return INCONCLUSIVE, NO_MARGIN
    significant = test.p_holm < alpha
    if test.p_equivalence < alpha:
        return SUPPORTED, EQUIVALENT_AND_DIFFERENT if significant else EQUIVALENT
    low, high = test.ci
    if low > test.margin or high < -test.margin:
        return CONTRADICTED, OUTSIDE
    return INCONCLUSIVE, UNSETTLED if significant else NOT_EQUIVALENT


def seeds_to_settle(test: PairedResult, reason: str, alpha: float, needed: float) -> float:
    """Pairs that would settle an open comparison: ``needed`` (the pairs its t-test needs at alpha /
    m) for an effect in the claimed direction; for a tie, the pairs TOST needs to show a difference
    inside the margin equivalent, or that put the family-level interval of one outside it wholly
    outside; NaN otherwise."""
    if reason == NOT_SIGNIFICANT:
        return needed
    if reason not in (NOT_EQUIVALENT, UNSETTLED):
        return math.nan
    if abs(test.diff) < test.margin:
        return equivalence_pairs(test.diff, test.sd, test.margin, alpha)
    return beyond_pairs(test.diff, test.sd, test.margin, alpha / test.m)
