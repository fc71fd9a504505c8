"""``claims.md``: the study's findings, then every claim of :mod:`kdbench.report.claims` with its
verdict and the evidence of each comparison (:mod:`kdbench.report.verdicts`)."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass

import pandas as pd

from kdbench.report.claims import TABLE_DESIGNS, TIE_EXAMPLES, Claim
from kdbench.report.findings import study_findings
from kdbench.report.paper import PAPER_CITE, PAPER_DESIGNS
from kdbench.report.rules import NOT_COVERED, SEVERITY, SUPPORTED
from kdbench.report.text import fmt, format_p, md_escape, md_row, seeds_text, signed
from kdbench.report.verdicts import (
    Evidence,
    GroupVerdict,
    Judgement,
    judge_claims,
    missing_runs,
)

_CAVEATS = [
    "## When not to trust a verdict",
    "",
    "- Few seeds: with 2-4 seeds per cell a test has little power; `inconclusive` mostly means the "
    "runs cannot tell, not that the claim fails. Where an effect in the claimed direction is not "
    "significant, `Why` gives the number of pairs a paired t-test would need to detect the "
    "observed standardised effect (mean difference / std of the differences) with 80% power at "
    "alpha / m, the level Holm holds a test of a family of m to whatever the others show; where it "
    "is in the opposite direction, more seeds would not support the claim and `Why` says so. For a "
    "tie left open, `Why` gives the pairs TOST would need to show a difference inside the margin "
    "equivalent, or the pairs that would put the interval of one outside it wholly outside "
    "(each the fewest pairs whose test reaches 80% power, computed exactly for normal "
    "differences of the observed spread; the sign test's where the differences have none). A "
    "rough guide: the observed effect of a few seeds is itself noisy.",
    "- Scaled replicas: a replica (smaller teacher, student, data or budget) shows whether the "
    "pattern holds at its scale, not whether the paper's numbers reproduce.",
    "- Several claims on the same runs: Holm corrects within one family only; nothing corrects "
    "across families or across claims, and claims share runs, so their verdicts are not "
    "independent and some significant comparisons are expected by chance alone.",
    "- The metric is the report's primary score per task (`score` in result.json, as in "
    "tables.md), which need not be the paper's column (its Tables 1 and 3 CoLA column is most "
    "likely accuracy). Pooling over tasks mixes tasks of different scale and noise: one task can "
    "carry a pooled effect (see pvalues.csv for per-task tests).",
    "- Tables 2 and 4 report one best fine-tuning grid point per task, so their pairs are mostly "
    "tasks.",
    "",
]


def _header(alpha: float) -> list[str]:
    """The title, what a section is, how to read a verdict and when not to trust one."""
    return (
        [
            f"# Claims of {PAPER_CITE}, judged from these runs",
            "",
            "Each section is a conclusion of the paper (Section 5 and the table captions; stored "
            "in "
            "`kdbench/report/claims.py`) with its verdict: `supported`, `contradicted`, "
            "`inconclusive` "
            "or `not covered`. Its runs are those that stand for its table: the paper's own design "
            "(setting, teacher, student) or a preset whose `paper_analogue` names the table, with "
            "the "
            "measured inits mapped to the paper's; only the table's objectives and inits take "
            "part.",
            "",
        ]
        + _how_to_read(alpha)
        + _CAVEATS
    )


def _how_to_read(alpha: float) -> list[str]:
    return [
        "## How to read a verdict",
        "",
        "- A claim is a set of comparisons between two run sets: two objectives at one paper init, "
        "or two paper inits of one objective. Each is a two-sided paired t-test pooled over the "
        "tasks: runs paired by (task, seed), the report's task `ALL`; `n` is the number of pairs.",
        "- `p (Holm)`: Holm-adjusted within the family of `paired_tests` (setting, teacher, "
        "student, factor, fixed level, task ALL) over the table's measured objectives and inits, "
        "so it can differ from pvalues.csv, whose families hold every measured level. "
        f"Significant: p (Holm) < alpha = {alpha}.",
        "- `a > b` is supported when significant with mean a > mean b, contradicted when "
        "significant the other way. `a ~ b` (a claimed tie) is supported when an equivalence test "
        "(TOST: two one-sided paired t-tests at alpha against the margin; `p (TOST)`) shows the "
        "pooled mean difference within the margin, even when the difference is significant (a "
        "real difference smaller than the margin) and also when every paired difference is 0 (the "
        "exact sign test, p 2^-n); contradicted only when the difference's "
        "interval (the `a - b` column) lies wholly outside the margin; else inconclusive: not "
        "significant is not equivalent. The margin is a number of dev examples of each task "
        f"({TIE_EXAMPLES} unless the claim states another; `kdbench.report.margins`), in points in "
        "`Why` with "
        "where it comes from. `a != b` is supported when significant in either direction. Anything "
        "else is inconclusive: too few seeds (n < 2), untestable (every paired difference is 0), "
        "or effect not significant. Not covered: a run set it needs has no run (named below).",
        "- `a - b`: the pooled mean difference and its t interval at 1 - alpha / m (its level "
        "shown), m the testable pairs of its family: simultaneous over the family (Bonferroni), "
        "the level Holm's first step reads it at.",
        "- An interaction compares how a change of init moves two objectives, each effect d = "
        "score at the lower init - score at the upper, paired by (task, seed) over the seeds all "
        "four run sets share: `(a: lower - upper) - (b: lower - upper) < 0` (a difference of "
        "differences) or `|a: lower - upper| < |b: lower - upper|` (a contrast of magnitudes, "
        "each effect signed by its observed mean). `Mean a` and `Mean b` are then the two effects "
        "(absolute, for magnitudes); a one-sample t-test of the per-pair contrast, Holm-adjusted "
        "over the claim's interactions in the group; supported when significant below 0, "
        "contradicted when significant above.",
        "- A claim (and each group of runs within it): contradicted if any comparison is "
        "contradicted, else supported if all are supported, else not covered if runs are missing, "
        "else inconclusive. When several groups stand for one table (the paper's design, a scaled "
        "replica), each gets a verdict and the claim's verdict combines them by the same rule.",
        "",
    ]


def summary_lines(judgements: list[Judgement]) -> list[str]:
    """The covered claims' verdicts as a table, the claims no run covers in one line."""
    covered = [j for j in judgements if j.verdict != NOT_COVERED]
    lines = [md_row(["Claim", "Table", "Verdict", "Why"]), "|---|---:|---|---|"] if covered else []
    for judgement in covered:
        claim, why = judgement.claim, md_escape(verdict_why(judgement))
        lines.append(md_row([claim.id, str(claim.table), judgement.verdict, why]))
    return lines + [""] + not_covered_line(judgements)


def not_covered_line(judgements: list[Judgement]) -> list[str]:
    """One line naming the claims these runs do not cover (their sections list the runs)."""
    missing = [j.claim for j in judgements if j.verdict == NOT_COVERED]
    if not missing:
        return []
    names = ", ".join(f"{claim.id} (Table {claim.table})" for claim in missing)
    return [f"Not covered by these runs (a run set they compare has no run): {names}.", ""]


def verdict_why(judgement: Judgement) -> str:
    """A one-line reason: the tally of comparison outcomes, and the missing runs when not
    covered."""
    evidence = [e for group in judgement.groups for e in group.evidence]
    if judgement.verdict == NOT_COVERED:
        missing = missing_runs(judgement)
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        return "missing: " + "; ".join(missing[:3]) + more
    ranked = sorted(evidence, key=lambda e: SEVERITY.index(e.verdict))
    tally = Counter(e.reason if e.verdict != SUPPORTED else SUPPORTED for e in ranked)
    shown = (
        [SUPPORTED]
        if judgement.verdict == SUPPORTED
        else [reason for reason in tally if reason != SUPPORTED]
    )
    return "; ".join(
        f"{tally[reason]} of {len(evidence)} comparisons: {reason}" for reason in shown
    )


def _group_lines(claim: Claim, group: GroupVerdict, digits: int) -> list[str]:
    if group.runs is None:
        setting, teacher, student = PAPER_DESIGNS[claim.table]
        return [
            f"No run stands for Table {claim.table} (the paper's design {setting} {teacher} -> "
            f"{student}, "
            f"or a preset with `paper_analogue` table {claim.table}): **{group.verdict}**.",
            "",
        ]
    runs = group.runs
    kind = (
        f"scaled replica (paper_analogue Table {claim.table})"
        if runs.replica
        else "the paper's design"
    )
    order = TABLE_DESIGNS[claim.table][1]
    inits = "; ".join(
        f"{paper} ({runs.measured_init[paper]})" for paper in order if paper in runs.measured_init
    )
    collapsed = (
        f" {runs.n_collapsed} of its {runs.n_runs} runs collapsed to one class."
        if runs.n_collapsed
        else ""
    )
    lines = [
        f"### {runs.name}: {group.verdict}",
        "",
        f"{kind}; paper init (measured): {inits}.{collapsed}",
        "",
    ]
    return lines + _evidence_table(group.evidence, digits)


def _interval(e: Evidence, digits: int) -> str:
    """The difference with its family-level interval and the interval's level."""
    if math.isnan(e.diff):
        return ""
    text = signed(e.diff, digits)
    if math.isnan(e.ci[0]):
        return text
    return f"{text} [{signed(e.ci[0], digits)}, {signed(e.ci[1], digits)}] {100 * e.ci_level:.4g}%"


def _why_cell(e: Evidence) -> str:
    """A comparison's reason, its margin and where it comes from, and the pairs that would settle
    it."""
    if e.missing:
        return "no runs of " + ", ".join(f"{o} at {i}" for o, i in e.missing)
    why = e.reason
    if e.margin is not None:
        points = "" if not e.margin.known else f"+-{e.margin.points:.2f} points: "
        why += f" (margin {points}{e.margin.source})"
    if not math.isnan(e.seeds_needed):
        goal = "at the observed effect, at alpha / m"
        if e.margin is not None:
            inside = abs(e.diff) < e.margin.points
            goal = "to show equivalence" if inside else "to place the interval outside the margin"
        why += f"; {seeds_text(e.seeds_needed)} for 80% power {goal}"
    return why


def _evidence_table(evidence: tuple[Evidence, ...], digits: int) -> list[str]:
    head = ["Asserted", "Mean a", "Mean b", "n", "a - b [interval]", "p (Holm)", "p (TOST)"]
    lines = [md_row(head + ["Verdict", "Why"]), "|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for e in evidence:
        means = ["" if math.isnan(m) else fmt(m, digits) for m in (e.mean_a, e.mean_b)]
        n = "" if e.verdict == NOT_COVERED else str(e.n_pairs)
        cells = [
            md_escape(e.assertion.label()),
            *means,
            n,
            _interval(e, digits),
            format_p(e.p_holm),
            format_p(e.p_equivalence),
            e.verdict,
            md_escape(_why_cell(e)),
        ]
        lines.append(md_row(cells))
    return lines + [""]


def _claim_section(judgement: Judgement, digits: int) -> list[str]:
    claim = judgement.claim
    missing = missing_runs(judgement)
    why = (
        f"{len(missing)} run set(s) missing, listed below"
        if judgement.verdict == NOT_COVERED
        else verdict_why(judgement)
    )
    lines = [
        f"## {claim.id}: {judgement.verdict}",
        "",
        f"> {md_escape(claim.statement)}",
        "",
        f"Table {claim.table}. Tested as: {md_escape(claim.tested_as)}. Why: {md_escape(why)}.",
        "",
    ]
    if missing:
        lines += ["Missing runs:", "", *[f"- {md_escape(name)}" for name in missing], ""]
    for group in judgement.groups:
        lines += _group_lines(claim, group, digits)
    return lines


@dataclass(frozen=True)
class ClaimsText:
    """claims.md in parts: the title and how to read it, the summary table (its lines, no heading),
    the evidence of each claim."""

    header: list[str]
    summary: list[str]
    details: list[str]
    findings: list[str] = dataclasses.field(default_factory=list)  # the findings that open the page

    def markdown(self) -> str:
        lines = self.findings + self.header + ["## Summary", ""] + self.summary + self.details
        return "\n".join(lines).rstrip() + "\n"


def render_claims(
    judgements: list[Judgement], alpha: float, digits: int = 1, findings: list[str] | None = None
) -> ClaimsText:
    details = [line for judgement in judgements for line in _claim_section(judgement, digits)]
    return ClaimsText(_header(alpha), summary_lines(judgements), details, findings or [])


def claims_text(
    frame: pd.DataFrame,
    alpha: float = 0.05,
    digits: int = 1,
    pvalues: pd.DataFrame | None = None,
    name: str = "",
) -> ClaimsText:
    """``claims.md``: the findings of study ``name`` (from ``pvalues``, the report's paired tests),
    then every claim of :data:`CLAIMS` judged from ``frame`` (the report's usable runs)."""
    judgements = judge_claims(frame, alpha)
    findings = [f"# Findings{': ' + md_escape(name) if name else ''}", ""]
    if pvalues is not None:
        findings += study_findings(frame, pvalues, alpha, digits)
    findings += ["Claims of the paper: see the summary below; " + _verdict_tally(judgements), ""]
    return render_claims(judgements, alpha, digits, findings)


def _verdict_tally(judgements: list[Judgement]) -> str:
    counts = Counter(j.verdict for j in judgements)
    return ", ".join(f"{counts[v]} {v}" for v in SEVERITY[::-1] if counts[v]) + "."
