"""Each claim of :mod:`kdbench.report.claims` judged from the runs that stand for its table.

Each comparison of two run sets is read from the pooled paired t-test (task ``ALL``) of
:func:`kdbench.report.stats.paired_tests`, run on the runs that stand for the claim's table
(:func:`kdbench.report.paper.runs_for_table`) restricted to that table's objectives and inits, one
(setting, teacher, student) group at a time; each interaction from
:func:`kdbench.report.interaction.interaction_tests` on the same runs.

Verdict of a comparison (``p`` is Holm-adjusted within its family, ``alpha`` the report's level; the
rules and their levels are :mod:`kdbench.report.rules`'):

* ``a > b`` (and an interaction's ``< 0``): supported when p < alpha in the claimed direction;
  contradicted when p < alpha the other way.
* ``a ~ b``: supported when an equivalence test shows the two within the claim's margin (TOST: two
  one-sided paired t-tests of the pooled mean difference against -margin and +margin, both at
  alpha; the exact sign test where the differences are all equal, all 0 included), significant or
  not; contradicted when the difference's (1 - alpha / m) interval lies wholly outside the margin;
  otherwise inconclusive. The margin is a number of dev examples of each task
  (:mod:`kdbench.report.margins`), recorded with the verdict.
* ``a != b``: supported when p < alpha (the direction is another claim's business).
* otherwise inconclusive: too few seeds (n_pairs < 2), untestable (every paired difference is 0: a
  difference claimed), or the effect is not significant; not covered when one side has no run.

Power advice for an inconclusive comparison: the pairs a two-sided paired t-test at alpha / m (m the
testable pairs of its family: the level Holm holds it to whatever the others show) needs to detect
the observed effect with 80% power, only when the observed effect is in the claimed direction; for
``a ~ b`` the pairs TOST needs to show a difference inside the margin equivalent, or the pairs that
put an interval outside it.

Verdict of a group, and of a claim over its groups: contradicted if any part is contradicted, else
supported if every part is supported, else not covered if any part is not covered, else
inconclusive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from kdbench.report.claims import CLAIMS, TABLE_DESIGNS, TIE, Assertion, Claim, Interaction
from kdbench.report.collapse import COLLAPSED
from kdbench.report.frames import ALL, GROUP_COLS, natural_key
from kdbench.report.interaction import interaction_tests
from kdbench.report.margins import Margin, dev_sizes, pooled_margin, stated_margin
from kdbench.report.paired import equivalence_p, interval
from kdbench.report.paper import runs_for_table
from kdbench.report.rules import (
    ALL_COLLAPSED,
    INCONCLUSIVE,
    NO_RUNS,
    NOT_COVERED,
    PairedResult,
    combine,
    seeds_to_settle,
    verdict,
)
from kdbench.report.stats import FAMILY_COLS, paired_tests

# ------------------------------------------------------------------------------ the runs of a table


@dataclass(frozen=True)
class TableRuns:
    """One (setting, teacher, student) group's runs that stand for a paper table: the (objective,
    paper init) run sets it has, the measured init of each paper init, its runs, their paired tests
    and each task's dev set size."""

    group: tuple[str, str, str]
    replica: bool
    measured_init: dict[str, str]
    present: frozenset[tuple[str, str]]
    pvalues: pd.DataFrame
    n_runs: int = 0
    n_collapsed: int = 0  # runs that predict one class (kdbench.report.collapse)
    runs: pd.DataFrame | None = None
    dev_sizes: dict | None = None

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
        measured.setdefault(paper_init, init)  # measured under two labels: the first, naturally
    part = part[[measured[p] == i for p, i in zip(part["paper_init"], part["init"])]]
    return TableRuns(
        tuple(group),
        bool(part["paper_table"].notna().any()),
        measured,
        frozenset(zip(part["objective"], part["paper_init"])),
        paired_tests(part, alpha),
        len(part),
        int((part["collapse"] == COLLAPSED).sum()),
        part,
        dev_sizes(part),
    )


# ------------------------------------------------------------------------------------- the verdicts


@dataclass(frozen=True)
class Evidence:
    """One assertion judged on one group's runs: the test it rests on and its verdict. For an
    interaction, ``mean_a`` and ``mean_b`` are the two init effects it contrasts (absolute, for a
    contrast of magnitudes)."""

    assertion: Assertion | Interaction
    verdict: str
    reason: str
    n_pairs: int = 0
    mean_a: float = math.nan
    mean_b: float = math.nan
    p_holm: float = math.nan
    seeds_needed: float = math.nan  # for an inconclusive comparison: pairs that would settle it
    missing: tuple[tuple[str, str], ...] = ()
    p_equivalence: float = math.nan  # TOST p of a claimed tie
    margin: Margin | None = None  # a claimed tie's margin
    ci: tuple[float, float] = (math.nan, math.nan)  # the difference's family-level interval
    ci_level: float = math.nan  # its confidence, 1 - alpha / m

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


def _pooled_row(runs: TableRuns, assertion: Assertion) -> tuple[pd.Series, bool, pd.DataFrame]:
    """The task-ALL row of the assertion's pair, whether it is oriented b - a, and its family."""
    if assertion.factor == "objective":
        fixed, a, b = runs.measured_init[assertion.fixed], assertion.a, assertion.b
    else:
        fixed, a, b = (
            assertion.fixed,
            runs.measured_init[assertion.a],
            runs.measured_init[assertion.b],
        )
    tests = runs.pvalues
    tests = tests[(tests["factor"] == assertion.factor) & (tests["fixed"] == fixed)]
    pair = ((tests["a"] == a) & (tests["b"] == b)) | ((tests["a"] == b) & (tests["b"] == a))
    row = tests[pair & (tests["task"] == ALL)].iloc[0]
    return row, row["a"] != a, tests[pair & (tests["task"] != ALL)]


def _margin(claim: Claim, runs: TableRuns, per_task: pd.DataFrame) -> Margin:
    if claim.margin is not None:
        return stated_margin(claim.margin)
    pairs = dict(zip(per_task["task"], per_task["n_pairs"].astype(int)))
    return pooled_margin(pairs, runs.dev_sizes or {}, claim.tie_examples)


def _comparison(runs: TableRuns, claim: Claim, assertion: Assertion, alpha: float) -> Evidence:
    row, flip, per_task = _pooled_row(runs, assertion)
    pvalues = runs.pvalues
    family = pvalues[(pvalues[FAMILY_COLS] == row[FAMILY_COLS]).all(axis=1)]
    m = int(family["p"].notna().sum())
    sign = -1.0 if flip else 1.0
    n, diff, se = int(row["n_pairs"]), sign * float(row["diff"]), float(row["se"])
    margin = _margin(claim, runs, per_task) if assertion.relation == TIE else None
    points = margin.points if margin is not None else math.nan
    test = PairedResult(
        n,
        diff,
        se,
        float(row["p_holm"]),
        max(m, 1),
        interval(diff, se, n, alpha / max(m, 1)),
        sign * float(row["effect"]),
        points,
        equivalence_p(diff, se, n, points) if margin is not None else math.nan,
    )
    outcome, reason = verdict(assertion.relation, test, alpha)
    mean_a, mean_b = (row["mean_b"], row["mean_a"]) if flip else (row["mean_a"], row["mean_b"])
    return Evidence(
        assertion,
        outcome,
        reason,
        n,
        float(mean_a),
        float(mean_b),
        test.p_holm,
        seeds_to_settle(test, reason, alpha, float(row["seeds_needed"])),
        p_equivalence=test.p_equivalence,
        margin=margin,
        ci=test.ci,
        ci_level=1 - alpha / test.m,
    )


def _interaction(
    test: PairedResult, effects: tuple, interaction: Interaction, alpha: float
) -> Evidence:
    effect_a, effect_b, needed = effects
    outcome, reason = verdict(interaction.relation, test, alpha)
    return Evidence(
        interaction,
        outcome,
        reason,
        test.n_pairs,
        effect_a,
        effect_b,
        test.p_holm,
        seeds_to_settle(test, reason, alpha, needed),
        ci=test.ci,
        ci_level=1 - alpha / test.m,
    )


def _judge_group(claim: Claim, runs: TableRuns | None, alpha: float) -> GroupVerdict:
    present = runs.present if runs is not None else frozenset()
    missing = {a: tuple(r for r in a.runs() if r not in present) for a in claim.assertions}
    covered = [a for a in claim.assertions if not missing[a]]
    if runs is not None and runs.all_collapsed:
        evidence = [Evidence(a, INCONCLUSIVE, ALL_COLLAPSED) for a in covered]
    else:
        interactions = [a for a in covered if isinstance(a, Interaction)]
        tests = (
            {}
            if not interactions
            else interaction_tests(runs.runs, interactions, runs.measured_init, alpha)
        )
        evidence = [
            _interaction(tests[a][0], tests[a][1:], a, alpha)
            if isinstance(a, Interaction)
            else _comparison(runs, claim, a, alpha)
            for a in covered
        ]
    done = dict(zip(covered, evidence))
    evidence = tuple(
        done.get(a) or Evidence(a, NOT_COVERED, NO_RUNS, missing=missing[a])
        for a in claim.assertions
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
