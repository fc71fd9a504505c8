"""The paper's conclusions as data, each judged from the runs that stand for its table (``claims.md``).

A :class:`Claim` is a statement of Wang et al. (2023) (Section 5, the table captions) and the comparisons it
asserts: ``a > b``, ``a ~ b`` (not significantly different) or ``a != b`` (significantly different, either
way), between two objectives at one paper init or two paper inits of one objective. Each comparison is read from
the pooled paired t-test (task ``ALL``) of :func:`kdbench.report.stats.paired_tests`, run on the runs that stand
for the claim's table (:func:`kdbench.report.paper.runs_for_table`) restricted to that table's objectives and
inits, one (setting, teacher, student) group at a time.

Verdict of a comparison (``p`` is Holm-adjusted within its family, ``alpha`` the report's level):

* ``a > b``: supported when p < alpha and mean a > mean b; contradicted when p < alpha and mean a < mean b.
* ``a ~ b``: contradicted when p < alpha; supported when an equivalence test shows the two within the claim's
  margin (TOST: two one-sided paired t-tests of the pooled mean difference against -margin and +margin, both at
  alpha; :data:`TIE_MARGIN` by default); otherwise inconclusive (neither different nor shown equivalent).
* ``a != b``: supported when p < alpha (the direction is another claim's business).
* otherwise inconclusive: too few seeds (n_pairs < 2), untestable (every paired difference is 0), or the effect
  is not significant; not covered when one side has no run.

Power advice for an inconclusive comparison: for ``a > b`` and ``a != b`` the pairs a two-sided paired t-test
needs to detect the observed effect with 80% power, only when the observed effect is in the claimed direction
(``a > b`` observed below says so instead); for ``a ~ b`` the pairs TOST needs to show the observed difference
equivalent, only when it lies inside the margin.

Verdict of a group, and of a claim over its groups: contradicted if any part is contradicted, else supported if
every part is supported, else not covered if any part is not covered, else inconclusive.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import Counter
from dataclasses import dataclass

import pandas as pd

from kdbench.report.collapse import COLLAPSED
from kdbench.report.findings import study_findings
from kdbench.report.paper import PAPER_CITE, PAPER_DESIGNS, runs_for_table
from kdbench.report.stats import (
    ALL,
    GROUP_COLS,
    equivalence_p,
    equivalence_pairs,
    natural_key,
    paired_tests,
)
from kdbench.report.text import fmt, format_p, md_escape, md_row, seeds_text

SUPPORTED, CONTRADICTED, INCONCLUSIVE, NOT_COVERED = "supported", "contradicted", "inconclusive", "not covered"
GREATER, TIE, DIFFER = ">", "~", "!="
TOO_FEW = "too few seeds (n_pairs < 2)"
UNTESTABLE = "untestable (every paired difference is 0)"
NOT_SIGNIFICANT = "effect not significant"
OPPOSITE = "effect not significant, observed in the opposite direction"
EQUIVALENT = "equivalent within the margin (TOST)"
NOT_EQUIVALENT = "neither significantly different nor shown equivalent (TOST)"
# The default margin of a claimed tie, in score points (accuracy / F1 / MCC x 100): the paper's four named ties in
# Table 1 differ by 0.0-0.5 points in Avg and its per-cell seed std averages 0.39 points, so 1 point is twice the
# largest gap it calls a tie and about 2.5 of its seed stds; a gap under 1 point is also below what changes the
# choice of an objective in practice.
TIE_MARGIN = 1.0
NO_RUNS = "runs missing"
ALL_COLLAPSED = "every run collapsed to one class: no comparison made"
_SEVERITY = (CONTRADICTED, NOT_COVERED, INCONCLUSIVE, SUPPORTED)  # the order reasons are tallied in

ATTENTION = ("att_mse", "att_mse+hid_seq", "att_kl", "att_kl+hid_seq", "att_kl+val_kl")
NON_ATTENTION = ("vanilla_kd", "hid_cls_contrast", "hid_cls", "hid_seq")
EVERY_KTH, SPREAD, BOTTOM = "4,8,12", "1,8,12", "1,2,3"
# Each paper table's design: its objectives (kdbench names) and the paper's inits.
TABLE_DESIGNS = {
    1: (NON_ATTENTION + ATTENTION, (EVERY_KTH,)),
    2: (("vanilla_kd", "hid_cls", "hid_seq") + ATTENTION, ("random",)),
    3: (NON_ATTENTION + ("att_kl", "att_mse"), (EVERY_KTH, SPREAD, BOTTOM)),
    4: (("vanilla_kd", "hid_cls", "hid_seq", "att_mse"), ("random", "first 6")),
}


# ---------------------------------------------------------------------------------------------- the claims


@dataclass(frozen=True)
class Assertion:
    """One asserted comparison: objectives ``a`` and ``b`` at paper init ``fixed`` (factor ``objective``), or
    paper inits ``a`` and ``b`` of objective ``fixed`` (factor ``init``)."""

    factor: str
    fixed: str
    a: str
    b: str
    relation: str

    def runs(self) -> tuple[tuple[str, str], tuple[str, str]]:
        """The two (objective, paper init) run sets it compares."""
        if self.factor == "objective":
            return (self.a, self.fixed), (self.b, self.fixed)
        return (self.fixed, self.a), (self.fixed, self.b)

    def label(self) -> str:
        return f"{self.fixed}: {self.a} {self.relation} {self.b}"


@dataclass(frozen=True)
class Claim:
    id: str
    table: int
    statement: str  # the paper's words (or their gist)
    tested_as: str  # how the assertions read the statement
    assertions: tuple[Assertion, ...]
    margin: float = TIE_MARGIN  # a claimed tie holds when the difference is shown within +-margin points


def _greater(factor: str, fixed: str, winners, losers) -> tuple[Assertion, ...]:
    return tuple(Assertion(factor, fixed, a, b, GREATER) for a in winners for b in losers if a != b)


def _ties_else_differ(fixed: str, objectives, ties) -> tuple[Assertion, ...]:
    """Every pair of ``objectives`` at ``fixed``: the ``ties`` not significantly different, the rest different."""
    tied = {frozenset(pair) for pair in ties}
    return tuple(Assertion("objective", fixed, a, b, TIE if {a, b} in tied else DIFFER)
                 for a, b in itertools.combinations(objectives, 2))


_T1_TIES = (("att_kl", "att_mse"), ("att_kl", "att_kl+hid_seq"), ("att_kl", "att_mse+hid_seq"),
            ("att_mse", "att_mse+hid_seq"))
_LOWER_FIRST = ((BOTTOM, SPREAD), (SPREAD, EVERY_KTH), (BOTTOM, EVERY_KTH))
_T2_OTHERS = tuple(o for o in TABLE_DESIGNS[2][0] if o != "att_mse")
_T4_OTHERS = tuple(o for o in TABLE_DESIGNS[4][0] if o != "att_mse")

CLAIMS = (
    Claim(
        "T1.attention_best", 1,
        "In the task-specific setting, attention transfer is the best choice with initialisation from every k-th "
        "teacher layer (Table 1: attention based objectives consistently outperform hidden states transfer and "
        "vanilla KD).",
        "at paper init 4,8,12, every attention objective > every non-attention objective, tasks pooled "
        f"({len(ATTENTION) * len(NON_ATTENTION)} comparisons)",
        _greater("objective", EVERY_KTH, ATTENTION, NON_ATTENTION),
    ),
    Claim(
        "T1.attention_variants_tie", 1,
        "For Table 1, all the pairs of objectives are statistically significant (p < 0.05) except four: "
        "(Att-KL, Att-MSE), (Att-KL, Att-KL + Hid-Seq), (Att-KL, Att-MSE + Hid-Seq), (Att-MSE, Att-MSE + Hid-Seq).",
        f"at paper init 4,8,12, the four named pairs are equivalent within +-{TIE_MARGIN} points (~) and every "
        "other pair of the nine objectives differs significantly, in either direction (!=; which side wins is "
        "T1.attention_best's question)",
        _ties_else_differ(EVERY_KTH, TABLE_DESIGNS[1][0], _T1_TIES),
    ),
    Claim(
        "T3.lower_layers_help", 3,
        "The performance of vanilla KD and hidden states transfer was significantly improved when initialising "
        "from lower layers of the teacher; the three initialisation choices differ significantly.",
        "for vanilla_kd, hid_cls_contrast, hid_cls and hid_seq: paper init 1,2,3 > 1,8,12 > 4,8,12, every pair, "
        "tasks pooled",
        tuple(Assertion("init", objective, a, b, GREATER) for objective in NON_ATTENTION for a, b in _LOWER_FIRST),
    ),
    Claim(
        "T3.attention_robust_to_init", 3,
        "All three initialisation choices are significantly different for all the objectives, except the pair "
        "(1,8,12, 1,2,3) for Att-KL and Att-MSE, which indicates the robustness of attention transfer.",
        f"for att_kl and att_mse: paper init 1,8,12 ~ 1,2,3 (equivalent within +-{TIE_MARGIN} points)",
        tuple(Assertion("init", objective, SPREAD, BOTTOM, TIE) for objective in ("att_kl", "att_mse")),
    ),
    Claim(
        "T2.att_mse_best_agnostic", 2,
        "In the task-agnostic setting (random init), Att-MSE performs the best among all the objectives.",
        "at paper init random, att_mse > every other objective of Table 2, over the tasks (each task's best "
        "fine-tuning grid point)",
        _greater("objective", "random", ("att_mse",), _T2_OTHERS),
    ),
    Claim(
        "T4.attention_best_both_inits", 4,
        "Attention transfer performs the best in both initialisation settings (random weights and the first 6 "
        "teacher layers).",
        "at paper inits random and first 6, att_mse > vanilla_kd, hid_cls and hid_seq, over the tasks (each "
        "task's best fine-tuning grid point)",
        _greater("objective", "random", ("att_mse",), _T4_OTHERS)
        + _greater("objective", "first 6", ("att_mse",), _T4_OTHERS),
    ),
)


# ------------------------------------------------------------------------------------- the runs of a table


@dataclass(frozen=True)
class TableRuns:
    """One (setting, teacher, student) group's runs that stand for a paper table: the (objective, paper init)
    run sets it has, the measured init of each paper init, and its paired tests."""

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


def table_runs(frame: pd.DataFrame, table: int, alpha: float) -> list[TableRuns]:
    """The runs standing for ``table``, restricted to its objectives and paper inits, one entry per group."""
    objectives, inits = TABLE_DESIGNS[table]
    runs = runs_for_table(frame, table)  # its paper_init names an own-design 1,2,3,4,5,6 "first 6"
    runs = runs[runs["objective"].isin(objectives) & runs["paper_init"].isin(inits)]
    return [_group_runs(group, part, alpha) for group, part in runs.groupby(GROUP_COLS, sort=True)]


def _group_runs(group: tuple, part: pd.DataFrame, alpha: float) -> TableRuns:
    measured: dict[str, str] = {}
    for paper_init, init in sorted(zip(part["paper_init"], part["init"]), key=lambda pair: natural_key(pair[1])):
        measured.setdefault(paper_init, init)  # a paper init measured under two labels: the first, naturally
    part = part[[measured[p] == i for p, i in zip(part["paper_init"], part["init"])]]
    return TableRuns(tuple(group), bool(part["paper_table"].notna().any()), measured,
                     frozenset(zip(part["objective"], part["paper_init"])), paired_tests(part, alpha),
                     len(part), int((part["collapse"] == COLLAPSED).sum()))


# -------------------------------------------------------------------------------------------- the verdicts


@dataclass(frozen=True)
class Evidence:
    """One assertion judged on one group's runs: the pooled paired test it rests on and its verdict."""

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


def comparison_verdict(relation: str, n_pairs: int, mean_a: float, mean_b: float, p_holm: float,
                       alpha: float, p_equivalence: float = math.nan) -> tuple[str, str]:
    """(verdict, reason) of one asserted comparison from its pooled paired test (and, for a claimed tie, the
    TOST p-value of its equivalence test)."""
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
        return INCONCLUSIVE, OPPOSITE if relation == GREATER and mean_a < mean_b else NOT_SIGNIFICANT
    if relation == DIFFER or mean_a > mean_b:
        return SUPPORTED, "significant" + (", as claimed" if relation == DIFFER else ", in the claimed direction")
    return CONTRADICTED, "significant in the opposite direction"


def _pooled_test(runs: TableRuns, assertion: Assertion) -> dict:
    """The task-ALL test between the assertion's run sets, oriented a - b: n_pairs, mean_a, mean_b, se (of the
    mean difference), p_holm, seeds_needed."""
    if assertion.factor == "objective":
        fixed, a, b = runs.measured_init[assertion.fixed], assertion.a, assertion.b
    else:
        fixed, a, b = assertion.fixed, runs.measured_init[assertion.a], runs.measured_init[assertion.b]
    tests = runs.pvalues
    tests = tests[(tests["factor"] == assertion.factor) & (tests["fixed"] == fixed) & (tests["task"] == ALL)]
    forward = tests[(tests["a"] == a) & (tests["b"] == b)]
    row = forward.iloc[0] if len(forward) else tests[(tests["a"] == b) & (tests["b"] == a)].iloc[0]
    flip = not len(forward)
    return {"n_pairs": int(row["n_pairs"]), "mean_a": float(row["mean_b" if flip else "mean_a"]),
            "mean_b": float(row["mean_a" if flip else "mean_b"]), "se": float(row["se"]),
            "p_holm": float(row["p_holm"]), "seeds_needed": float(row["seeds_needed"])}


def _seeds_to_settle(test: dict, reason: str, margin: float, alpha: float) -> float:
    """Pairs that would settle an inconclusive comparison: detect a not-significant effect in the claimed
    direction, or show a tie inside the margin equivalent; NaN otherwise."""
    if reason == NOT_SIGNIFICANT:
        return test["seeds_needed"]
    if reason == NOT_EQUIVALENT:
        sd = test["se"] * math.sqrt(test["n_pairs"])
        return equivalence_pairs(test["mean_a"] - test["mean_b"], sd, margin, alpha)
    return math.nan


def _evidence(runs: TableRuns | None, assertion: Assertion, margin: float, alpha: float) -> Evidence:
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
        p_equivalence = equivalence_p(test["mean_a"] - test["mean_b"], test["se"], test["n_pairs"], margin)
    verdict, reason = comparison_verdict(assertion.relation, test["n_pairs"], test["mean_a"], test["mean_b"],
                                         test["p_holm"], alpha, p_equivalence)
    return Evidence(assertion, verdict, reason, test["n_pairs"], test["mean_a"], test["mean_b"], test["p_holm"],
                    _seeds_to_settle(test, reason, margin, alpha), p_equivalence=p_equivalence,
                    margin=margin if tie else math.nan)


def _judge_group(claim: Claim, runs: TableRuns | None, alpha: float) -> GroupVerdict:
    evidence = tuple(_evidence(runs, assertion, claim.margin, alpha) for assertion in claim.assertions)
    return GroupVerdict(runs, combine(e.verdict for e in evidence), evidence)


def judge_claims(frame: pd.DataFrame, alpha: float = 0.05, claims=CLAIMS) -> list[Judgement]:
    """Every claim judged on each group of runs that stands for its table (no group: not covered)."""
    by_table = {table: table_runs(frame, table, alpha) for table in sorted({claim.table for claim in claims})}
    judgements = []
    for claim in claims:
        groups = tuple(_judge_group(claim, runs, alpha) for runs in by_table[claim.table] or [None])
        judgements.append(Judgement(claim, combine(g.verdict for g in groups), groups))
    return judgements


def missing_runs(judgement: Judgement) -> list[str]:
    """The run sets a claim needs and lacks, by name (objective, paper init, table, group), in table order."""
    table = judgement.claim.table
    objectives, inits = TABLE_DESIGNS[table]
    names = []
    for group in judgement.groups:
        where = "" if group.runs is None else f" in {_group_name(group.runs)}"
        missing = {run for evidence in group.evidence for run in evidence.missing}
        for objective, init in sorted(missing, key=lambda run: (objectives.index(run[0]), inits.index(run[1]))):
            names.append(f"{objective} at paper init {init} (Table {table}){where}")
    return names


# ------------------------------------------------------------------------------------------------ claims.md


def _header(alpha: float) -> list[str]:
    return [
        f"# Claims of {PAPER_CITE}, judged from these runs",
        "",
        "Each section is a conclusion of the paper (Section 5 and the table captions; stored in "
        "`kdbench/report/claims.py`) with its verdict: `supported`, `contradicted`, `inconclusive` or "
        "`not covered`. Its runs are those that stand for its table: the paper's own design (setting, teacher, "
        "student) or a preset whose `paper_analogue` names the table, with the measured inits mapped to the "
        "paper's; only the table's objectives and inits take part.",
        "",
        "## How to read a verdict",
        "",
        "- A claim is a set of comparisons between two run sets: two objectives at one paper init, or two "
        "paper inits of one objective. Each is a two-sided paired t-test pooled over the tasks: runs paired by "
        "(task, seed), the report's task `ALL`; `n` is the number of pairs.",
        f"- `p (Holm)`: Holm-adjusted within the family of `paired_tests` (setting, teacher, student, factor, "
        f"fixed level, task ALL) over the table's measured objectives and inits, so it can differ from "
        f"pvalues.csv, whose families hold every measured level. Significant: p (Holm) < alpha = {alpha}.",
        "- `a > b` is supported when significant with mean a > mean b, contradicted when significant the other "
        "way. `a ~ b` (a claimed tie) is contradicted when significant, supported only when an equivalence test "
        "(TOST: two one-sided paired t-tests at alpha against the claim's margin, +-1 point unless the claim "
        "states another; `p (TOST)`) shows the pooled mean difference within the margin, else inconclusive: "
        "not significant is not equivalent. "
        "`a != b` is supported when significant in either direction. Anything else is inconclusive: too few "
        "seeds (n < 2), untestable (every paired difference is 0), or effect not significant. Not covered: a run "
        "set it needs has no run (named below).",
        "- A claim (and each group of runs within it): contradicted if any comparison is contradicted, else "
        "supported if all are supported, else not covered if runs are missing, else inconclusive. When several "
        "groups stand for one table (the paper's design, a scaled replica), each gets a verdict and the claim's "
        "verdict combines them by the same rule.",
        "",
        "## When not to trust a verdict",
        "",
        "- Few seeds: with 2-4 seeds per cell a test has little power; `inconclusive` mostly means the runs "
        "cannot tell, not that the claim fails. Where an effect in the claimed direction is not significant, "
        "`Why` gives the number of pairs a paired t-test would need to detect the observed standardised effect "
        "(mean difference / std of the differences) with 80% power at alpha, before any Holm adjustment; where "
        "it is in the opposite direction, more seeds would not support the claim and `Why` says so. For a tie "
        "not shown equivalent, `Why` gives the pairs TOST would need (normal approximation) when the observed "
        "difference lies inside the margin. A rough guide: the observed effect of a few seeds is itself noisy.",
        "- Scaled replicas: a replica (smaller teacher, student, data or budget) shows whether the pattern holds "
        "at its scale, not whether the paper's numbers reproduce.",
        "- Several claims on the same runs: Holm corrects within one family only; nothing corrects across "
        "families or across claims, and claims share runs, so their verdicts are not independent and some "
        "significant comparisons are expected by chance alone.",
        "- The metric is the report's primary score per task (`score` in result.json, as in tables.md), which "
        "need not be the paper's column (its Tables 1 and 3 CoLA column is most likely accuracy). Pooling over "
        "tasks mixes tasks of different scale and noise: one task can carry a pooled effect (see pvalues.csv for "
        "per-task tests).",
        "- Tables 2 and 4 report one best fine-tuning grid point per task, so their pairs are mostly tasks.",
        "",
    ]


def _summary(judgements: list[Judgement]) -> list[str]:
    """The covered claims' verdicts as a table, the claims no run covers in one line."""
    covered = [j for j in judgements if j.verdict != NOT_COVERED]
    lines = [md_row(["Claim", "Table", "Verdict", "Why"]), "|---|---:|---|---|"] if covered else []
    for judgement in covered:
        claim = judgement.claim
        lines.append(md_row([claim.id, str(claim.table), judgement.verdict, md_escape(_why(judgement))]))
    return lines + [""] + not_covered_line(judgements)


def not_covered_line(judgements: list[Judgement]) -> list[str]:
    """One line naming the claims these runs do not cover (their runs are listed in the claims' sections)."""
    missing = [j.claim for j in judgements if j.verdict == NOT_COVERED]
    if not missing:
        return []
    names = ", ".join(f"{claim.id} (Table {claim.table})" for claim in missing)
    return [f"Not covered by these runs (a run set they compare has no run): {names}.", ""]


def _why(judgement: Judgement) -> str:
    """A one-line reason: the tally of comparison outcomes, and the missing runs when not covered."""
    evidence = [e for group in judgement.groups for e in group.evidence]
    if judgement.verdict == NOT_COVERED:
        missing = missing_runs(judgement)
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        return "missing: " + "; ".join(missing[:3]) + more
    ranked = sorted(evidence, key=lambda e: _SEVERITY.index(e.verdict))
    tally = Counter(e.reason if e.verdict != SUPPORTED else SUPPORTED for e in ranked)
    shown = [SUPPORTED] if judgement.verdict == SUPPORTED else [reason for reason in tally if reason != SUPPORTED]
    return "; ".join(f"{tally[reason]} of {len(evidence)} comparisons: {reason}" for reason in shown)


def _group_name(runs: TableRuns) -> str:
    setting, teacher, student = runs.group
    return f"{setting} {teacher} -> {student}"


def _group_lines(claim: Claim, group: GroupVerdict, digits: int) -> list[str]:
    if group.runs is None:
        setting, teacher, student = PAPER_DESIGNS[claim.table]
        return [f"No run stands for Table {claim.table} (the paper's design {setting} {teacher} -> {student}, "
                f"or a preset with `paper_analogue` table {claim.table}): **{group.verdict}**.", ""]
    runs = group.runs
    kind = f"scaled replica (paper_analogue Table {claim.table})" if runs.replica else "the paper's design"
    order = TABLE_DESIGNS[claim.table][1]
    inits = "; ".join(f"{paper} ({runs.measured_init[paper]})" for paper in order if paper in runs.measured_init)
    collapsed = f" {runs.n_collapsed} of its {runs.n_runs} runs collapsed to one class." if runs.n_collapsed else ""
    lines = [f"### {_group_name(runs)}: {group.verdict}", "",
             f"{kind}; paper init (measured): {inits}.{collapsed}", ""]
    return lines + _evidence_table(group.evidence, digits)


def _evidence_table(evidence: tuple[Evidence, ...], digits: int) -> list[str]:
    lines = [md_row(["Asserted", "Mean a", "Mean b", "n", "p (Holm)", "p (TOST)", "Verdict", "Why"]),
             "|---|---:|---:|---:|---:|---:|---|---|"]
    for e in evidence:
        means = ["" if math.isnan(m) else fmt(m, digits) for m in (e.mean_a, e.mean_b)]
        n = "" if e.verdict == NOT_COVERED else str(e.n_pairs)
        why = "no runs of " + ", ".join(f"{o} at {i}" for o, i in e.missing) if e.missing else e.reason
        if not math.isnan(e.margin):
            why += f" (margin +-{fmt(e.margin, digits)})"
        if not math.isnan(e.seeds_needed):
            goal = "to show equivalence" if e.reason == NOT_EQUIVALENT else "at the observed effect"
            why += f"; {seeds_text(e.seeds_needed)} for 80% power {goal}"
        cells = [md_escape(e.assertion.label()), *means, n, format_p(e.p_holm), format_p(e.p_equivalence),
                 e.verdict, md_escape(why)]
        lines.append(md_row(cells))
    return lines + [""]


def _claim_section(judgement: Judgement, digits: int) -> list[str]:
    claim = judgement.claim
    missing = missing_runs(judgement)
    why = f"{len(missing)} run set(s) missing, listed below" if judgement.verdict == NOT_COVERED else _why(judgement)
    lines = [f"## {claim.id}: {judgement.verdict}", "", f"> {md_escape(claim.statement)}", "",
             f"Table {claim.table}. Tested as: {md_escape(claim.tested_as)}. Why: {md_escape(why)}.", ""]
    if missing:
        lines += ["Missing runs:", "", *[f"- {md_escape(name)}" for name in missing], ""]
    for group in judgement.groups:
        lines += _group_lines(claim, group, digits)
    return lines


@dataclass(frozen=True)
class ClaimsText:
    """claims.md in parts: the title and how to read it, the summary table (its lines, no heading), the evidence of
    each claim."""

    header: list[str]
    summary: list[str]
    details: list[str]
    findings: list[str] = dataclasses.field(default_factory=list)  # the findings that open the page

    def markdown(self) -> str:
        lines = self.findings + self.header + ["## Summary", ""] + self.summary + self.details
        return "\n".join(lines).rstrip() + "\n"


def render_claims(judgements: list[Judgement], alpha: float, digits: int = 1,
                  findings: list[str] | None = None) -> ClaimsText:
    details = [line for judgement in judgements for line in _claim_section(judgement, digits)]
    return ClaimsText(_header(alpha), _summary(judgements), details, findings or [])


def claims_text(frame: pd.DataFrame, alpha: float = 0.05, digits: int = 1, pvalues: pd.DataFrame | None = None,
                name: str = "") -> ClaimsText:
    """``claims.md``: the findings of study ``name`` (from ``pvalues``, the report's paired tests), then every
    claim of :data:`CLAIMS` judged from ``frame`` (the report's usable runs)."""
    judgements = judge_claims(frame, alpha)
    findings = [f"# Findings{': ' + md_escape(name) if name else ''}", ""]
    if pvalues is not None:
        findings += study_findings(frame, pvalues, alpha, digits)
    findings += ["Claims of the paper: see the summary below; " + _verdict_tally(judgements), ""]
    return render_claims(judgements, alpha, digits, findings)


def _verdict_tally(judgements: list[Judgement]) -> str:
    counts = Counter(j.verdict for j in judgements)
    return ", ".join(f"{counts[v]} {v}" for v in _SEVERITY[::-1] if counts[v]) + "."
