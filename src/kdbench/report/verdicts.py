"""Each claim of :mod:`kdbench.report.claims` judged from the runs that stand for its table.

Each comparison is read from the pooled paired t-test (task ``ALL``) of
:func:`kdbench.report.stats.paired_tests`, run on the runs that stand for the claim's table
(:func:`kdbench.report.paper.runs_for_table`) restricted to that table's objectives and inits, one
(setting, teacher, student) group at a time.

Verdict of a comparison (``p`` is Holm-adjusted within its family, ``alpha`` the report's level):

* ``a > b``: supported when p < alpha and mean a > mean b; contradicted when p < alpha and mean a <
  mean b.
* ``a ~ b``: contradicted when p < alpha; supported when an equivalence test shows the two within
  the claim's margin (TOST: two one-sided paired t-tests of the pooled mean difference against
  -margin and +margin, both at alpha; :data:`kdbench.report.claims.TIE_MARGIN` by default);
  otherwise inconclusive (neither different nor shown equivalent).
* ``a != b``: supported when p < alpha (the direction is another claim's business).
* otherwise inconclusive: too few seeds (n_pairs < 2), untestable (every paired difference is 0), or
  the effect is not significant; not covered when one side has no run.

Power advice for an inconclusive comparison: for ``a > b`` and ``a != b`` the pairs a two-sided
paired t-test needs to detect the observed effect with 80% power, only when the observed effect is
in the claimed direction (``a > b`` observed below says so instead); for ``a ~ b`` the pairs TOST
needs to show the observed difference equivalent, only when it lies inside the margin.

Verdict of a group, and of a claim over its groups: contradicted if any part is contradicted, else
supported if every part is supported, else not covered if any part is not covered, else
inconclusive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from kdbench.report.claims import CLAIMS, DIFFER, GREATER, TABLE_DESIGNS, TIE, Assertion, Claim
from kdbench.report.collapse import COLLAPSED
from kdbench.report.frames import ALL, GROUP_COLS, natural_key
from kdbench.report.paired import equivalence_p, equivalence_pairs
from kdbench.report.paper import runs_for_table
from kdbench.report.stats import paired_tests

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
NOT_EQUIVALENT = "neither significantly different nor shown equivalent (TOST)"
NO_RUNS = "runs missing"
ALL_COLLAPSED = "every run collapsed to one class: no comparison made"
SEVERITY = (CONTRADICTED, NOT_COVERED, INCONCLUSIVE, SUPPORTED)  # the order reasons are tallied in


# ------------------------------------------------------------------------------ the runs of a table


@dataclass(frozen=True)
class TableRuns:
    """One (setting, teacher, student) group's runs that stand for a paper table: the (objective,
    paper init) run sets it has, the measured init of each paper init, and its paired tests."""

    group: tuple[str, str, str]
    replica: bool
    measured_init: dict[str, str]
    present: frozenset[tuple[str, str]]
    pvalues: pd.DataFrame
    n_runs: int = 0
    n_collapsed: int = 0  # runs that predict one class (kdbench.report.collapse)

    @property
    def all_collapsed(self) -> bool:
        return self.n_runs > 0 and self.n_collapsed == self.n_runs

    @property
    def name(self) -> str:
        setting, teacher, student = self.group
        return f"{setting} {teacher} -> {student}"


def table_runs(frame: pd.DataFrame, table: int, alpha: float) -> list[TableRuns]:
    """The runs standing for ``table``, only its objectives and paper inits, one entry per group."""
    objectives, inits = TABLE_DESIGNS[table]
    runs = runs_for_table(frame, table)  # its paper_init names an own-design 1,2,3,4,5,6 "first 6"
    runs = runs[runs["objective"].isin(objectives) & runs["paper_init"].isin(inits)]
    return [_group_runs(group, part, alpha) for group, part in runs.groupby(GROUP_COLS, sort=True)]


def _group_runs(group: tuple, part: pd.DataFrame, alpha: float) -> TableRuns:
    measured: dict[str, str] = {}
    for paper_init, init in sorted(
        zip(part["paper_init"], part["init"]), key=lambda pair: natural_key(pair[1])
    ):
        measured.setdefault(
            paper_init, init
        )  # a paper init measured under two labels: the first, naturally
    part = part[[measured[p] == i for p, i in zip(part["paper_init"], part["init"])]]
    return TableRuns(
        tuple(group),
        bool(part["paper_table"].notna().any()),
        measured,
        frozenset(zip(part["objective"], part["paper_init"])),
        paired_tests(part, alpha),
        len(part),
        int((part["collapse"] == COLLAPSED).sum()),
    )


# ------------------------------------------------------------------------------------- the verdicts


@dataclass(frozen=True)
class Evidence:
    """One assertion judged on one group's runs: the pooled paired test it rests on and its
    verdict."""

    assertion: Assertion
    verdict: str
    reason: str
    n_pairs: int = 0
    mean_a: float = math.nan
    mean_b: float = math.nan
    p_holm: float = math.nan
    seeds_needed: float = math.nan  # for an inconclusive comparison: pairs that would settle it
    missing: tuple[tuple[str, str], ...] = ()
    p_equivalence: float = math.nan  # TOST p of a claimed tie
    margin: float = math.nan  # a claimed tie's margin

    @property
    def diff(self) -> float:
        return self.mean_a - self.mean_b


@dataclass(frozen=True)
class GroupVerdict:
    runs: TableRuns | None  # None: no run stands for the table
    verdict: str
    evidence: tuple[Evidence, ...]


@dataclass(frozen=True)
class Judgement:
    claim: Claim
    verdict: str
    groups: tuple[GroupVerdict, ...]


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


def comparison_verdict(
    relation: str,
    n_pairs: int,
    mean_a: float,
    mean_b: float,
    p_holm: float,
    alpha: float,
    p_equivalence: float = math.nan,
) -> tuple[str, str]:
    """(verdict, reason) of one asserted comparison from its pooled paired test (and, for a claimed
    tie, the TOST p-value of its equivalence test)."""
    if n_pairs < 2:
        return INCONCLUSIVE, TOO_FEW
    if math.isnan(p_holm):
        return INCONCLUSIVE, UNTESTABLE
    significant = p_holm < alpha
    if relation == TIE:
        if significant:
            return CONTRADICTED, "claimed tie is significant"
        return (SUPPORTED, EQUIVALENT) if p_equivalence < alpha else (INCONCLUSIVE, NOT_EQUIVALENT)
    if not significant:
        return (
            INCONCLUSIVE,
            OPPOSITE if relation == GREATER and mean_a < mean_b else NOT_SIGNIFICANT,
        )
    if relation == DIFFER or mean_a > mean_b:
        return SUPPORTED, "significant" + (
            ", as claimed" if relation == DIFFER else ", in the claimed direction"
        )
    return CONTRADICTED, "significant in the opposite direction"


def _pooled_test(runs: TableRuns, assertion: Assertion) -> dict:
    """The task-ALL test between the assertion's run sets, oriented a - b: n_pairs, mean_a, mean_b,
    se (of the mean difference), p_holm, seeds_needed."""
    if assertion.factor == "objective":
        fixed, a, b = runs.measured_init[assertion.fixed], assertion.a, assertion.b
    else:
        fixed, a, b = (
            assertion.fixed,
            runs.measured_init[assertion.a],
            runs.measured_init[assertion.b],
        )
    tests = runs.pvalues
    tests = tests[
        (tests["factor"] == assertion.factor) & (tests["fixed"] == fixed) & (tests["task"] == ALL)
    ]
    forward = tests[(tests["a"] == a) & (tests["b"] == b)]
    row = forward.iloc[0] if len(forward) else tests[(tests["a"] == b) & (tests["b"] == a)].iloc[0]
    flip = not len(forward)
    return {
        "n_pairs": int(row["n_pairs"]),
        "mean_a": float(row["mean_b" if flip else "mean_a"]),
        "mean_b": float(row["mean_a" if flip else "mean_b"]),
        "se": float(row["se"]),
        "p_holm": float(row["p_holm"]),
        "seeds_needed": float(row["seeds_needed"]),
    }


def _seeds_to_settle(test: dict, reason: str, margin: float, alpha: float) -> float:
    """Pairs that would settle an inconclusive comparison: detect a not-significant effect in the
    claimed direction, or show a tie inside the margin equivalent; NaN otherwise."""
    if reason == NOT_SIGNIFICANT:
        return test["seeds_needed"]
    if reason == NOT_EQUIVALENT:
        sd = test["se"] * math.sqrt(test["n_pairs"])
        return equivalence_pairs(test["mean_a"] - test["mean_b"], sd, margin, alpha)
    return math.nan


def _evidence(
    runs: TableRuns | None, assertion: Assertion, margin: float, alpha: float
) -> Evidence:
    present = runs.present if runs is not None else frozenset()
    missing = tuple(run for run in assertion.runs() if run not in present)
    if missing:
        return Evidence(assertion, NOT_COVERED, NO_RUNS, missing=missing)
    if runs.all_collapsed:
        return Evidence(assertion, INCONCLUSIVE, ALL_COLLAPSED)
    test = _pooled_test(runs, assertion)
    tie = assertion.relation == TIE
    p_equivalence = math.nan
    if tie:
        p_equivalence = equivalence_p(
            test["mean_a"] - test["mean_b"], test["se"], test["n_pairs"], margin
        )
    verdict, reason = comparison_verdict(
        assertion.relation,
        test["n_pairs"],
        test["mean_a"],
        test["mean_b"],
        test["p_holm"],
        alpha,
        p_equivalence,
    )
    return Evidence(
        assertion,
        verdict,
        reason,
        test["n_pairs"],
        test["mean_a"],
        test["mean_b"],
        test["p_holm"],
        _seeds_to_settle(test, reason, margin, alpha),
        p_equivalence=p_equivalence,
        margin=margin if tie else math.nan,
    )


def _judge_group(claim: Claim, runs: TableRuns | None, alpha: float) -> GroupVerdict:
    evidence = tuple(
        _evidence(runs, assertion, claim.margin, alpha) for assertion in claim.assertions
    )
    return GroupVerdict(runs, combine(e.verdict for e in evidence), evidence)


def judge_claims(frame: pd.DataFrame, alpha: float = 0.05, claims=CLAIMS) -> list[Judgement]:
    """Every claim judged on each group of runs that stands for its table (no group: not
    covered)."""
    by_table = {
        table: table_runs(frame, table, alpha)
        for table in sorted({claim.table for claim in claims})
    }
    judgements = []
    for claim in claims:
        groups = tuple(_judge_group(claim, runs, alpha) for runs in by_table[claim.table] or [None])
        judgements.append(Judgement(claim, combine(g.verdict for g in groups), groups))
    return judgements


def missing_runs(judgement: Judgement) -> list[str]:
    """The run sets a claim lacks, by name (objective, paper init, table, group), in table order."""
    table = judgement.claim.table
    objectives, inits = TABLE_DESIGNS[table]
    names = []
    for group in judgement.groups:
        where = "" if group.runs is None else f" in {group.runs.name}"
        missing = {run for evidence in group.evidence for run in evidence.missing}
        for objective, init in sorted(
            missing, key=lambda run: (objectives.index(run[0]), inits.index(run[1]))
        ):
            names.append(f"{objective} at paper init {init} (Table {table}){where}")
    return names
