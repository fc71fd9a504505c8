"""The figures a README's spans stand for (`kdbench.report.prose`): each computed from a study's
committed records as the report computes it. :data:`FIGURES` names them and their arguments."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from kdbench.report.claims import DIFFERENCE, MAGNITUDE, Interaction
from kdbench.report.claims_md import summary_lines, verdict_why
from kdbench.report.collapse import COLLAPSED
from kdbench.report.evidence import ALL_RUNS, evidence_tests, interaction_example_test
from kdbench.report.frames import (
    ALL,
    AVG,
    drop_duplicates,
    natural_key,
    split_designs,
    to_frame,
)
from kdbench.report.grids import best_of_grid
from kdbench.report.interaction import contrast_values
from kdbench.report.load import load_records
from kdbench.report.paired import MAX_SEEDS, equivalence_p, paired_effect, paired_ttest
from kdbench.report.stats import paired_tests, summarise
from kdbench.report.tables import body_cells, build_tables
from kdbench.report.text import level_text, md_escape, md_head, md_row, signed
from kdbench.report.verdicts import judge_claims


@dataclass
class Study:
    """A study's report, as the report computes it, from its committed records."""

    runs: Path
    alpha: float = 0.05
    frame: pd.DataFrame = field(init=False)

    def __post_init__(self) -> None:
        loaded = load_records(self.runs)
        frame, _ = best_of_grid(to_frame(loaded.records), loaded.excluded)
        frame, _ = drop_duplicates(frame)
        self.frame, _ = split_designs(frame)

    @cached_property
    def pvalues(self) -> pd.DataFrame:
        return paired_tests(self.frame, self.alpha)

    @cached_property
    def judgements(self) -> dict:
        return {j.claim.id: j for j in judge_claims(self.frame, self.alpha)}

    @cached_property
    def evidence(self) -> pd.DataFrame:
        return evidence_tests(self.frame, self.runs.parent, self.alpha, ALL_RUNS)

    def pooled(self, factor: str, a: str | None = None, b: str | None = None, task: str = ALL):
        """The tests of ``factor`` pooled over tasks (or of one ``task``), only those of the pair
        (a, b) when given."""
        tests = self.pvalues[(self.pvalues["task"] == task) & (self.pvalues["factor"] == factor)]
        if a is None:
            return tests
        return tests[tests["a"].isin([a, b]) & tests["b"].isin([a, b])]

    def pair(self, factor: str, fixed: str, a: str, b: str, task: str = ALL) -> dict:
        """The test of a - b at ``fixed``, pooled over tasks or of one ``task``: n, diff, its
        (1 - alpha) interval, se, d_z, p (Holm)."""
        tests = self.pooled(factor, a, b, task)
        row = tests[tests["fixed"] == fixed].iloc[0]
        sign = 1.0 if row["a"] == a else -1.0
        low, high = sorted((sign * row["ci_low"], sign * row["ci_high"]))
        return {
            "n": int(row["n_pairs"]),
            "diff": sign * float(row["diff"]),
            "ci": (low, high),
            "se": float(row["se"]),
            "effect": sign * float(row["effect"]),
            "p_holm": float(row["p_holm"]),
        }


def _p(p: float) -> str:
    return f"{p:.2g}"


def _points(diff: float, ci: tuple[float, float], n: int, p: str, alpha: float = 0.05) -> str:
    """A difference with its (1 - alpha) interval, labelled with its level."""
    ci_text = f"{signed(ci[0], 2)} to {signed(ci[1], 2)}"
    return f"{signed(diff, 2)} points ({level_text(alpha)} CI {ci_text}; n = {n}; {p})"


def _pair(study: Study, factor: str, fixed: str, a: str, b: str, task: str = ALL) -> str:
    test = study.pair(factor, fixed, a, b, task)
    p = f"Holm p {_p(test['p_holm'])}"
    return _points(test["diff"], test["ci"], test["n"], p, study.alpha)


def _examples(study: Study, factor: str, fixed: str, a: str, b: str, task: str) -> str:
    """The example-level test of a - b on ``task``: the paired bootstrap over dev examples."""
    tests = study.evidence
    match = (tests["task"] == task) & (tests["factor"] == factor) & (tests["fixed"] == fixed)
    row = tests[match & tests["a"].isin([a, b]) & tests["b"].isin([a, b])].iloc[0]
    sign = 1.0 if row["a"] == a else -1.0
    low, high = sorted((sign * row["example_ci_low"], sign * row["example_ci_high"]))
    p = f"Holm p {_p(row['example_p_holm'])}"
    return _points(sign * row["example_diff"], (low, high), int(row["n_examples"]), p)


def _example_interaction(
    study: Study, a: str, b: str, lower: str, upper: str, task: str, kind=DIFFERENCE
) -> str:
    """The example-level test of the interaction (or, ``kind`` MAGNITUDE, of the contrast of
    magnitudes) on ``task``: the bootstrap over its dev examples."""
    interaction = Interaction(kind, a, b, lower, upper)
    test = interaction_example_test(study.frame, interaction, task, study.runs.parent)
    ci, p = (test["ci_low"], test["ci_high"]), f"p {_p(test['p'])}"
    return _points(test["diff"], ci, int(test["n_examples"]), p)


def _example_magnitude(study: Study, a: str, b: str, lower: str, upper: str, task: str) -> str:
    return _example_interaction(study, a, b, lower, upper, task, MAGNITUDE)


def _tost(
    study: Study, factor: str, fixed: str, a: str, b: str, margin: str, task: str = ALL
) -> str:
    test, points = study.pair(factor, fixed, a, b, task), float(margin)
    p = equivalence_p(test["diff"], test["se"], test["n"], points)
    return f"TOST p {_p(p)} against +-{points:g} point{'' if points == 1 else 's'}"


def _interaction(
    study: Study, a: str, b: str, lower: str, upper: str, task: str = ALL, kind=DIFFERENCE
) -> str:
    """The difference of the two objectives' init effects (measured inits), paired by task and
    seed (of one ``task``), or the difference of their magnitudes (``kind`` MAGNITUDE)."""
    identity = {lower: lower, upper: upper}
    interaction = Interaction(kind, a, b, lower, upper)
    frame = study.frame if task == ALL else study.frame[study.frame["task"] == task]
    values, _, _ = contrast_values(frame, interaction, identity)
    shape = paired_effect(values, np.zeros(len(values)))
    p = paired_ttest(values, np.zeros(len(values)))[1]
    return _points(shape["diff"], (shape["ci_low"], shape["ci_high"]), len(values), f"p {_p(p)}")


def _magnitude(study: Study, a: str, b: str, lower: str, upper: str, task: str = ALL) -> str:
    return _interaction(study, a, b, lower, upper, task, MAGNITUDE)


def _sd(study: Study, factor: str, fixed: str, a: str, b: str) -> str:
    """The standard deviation of the paired differences and the standardised effect d_z (infinite
    for equal non-zero differences)."""
    test = study.pair(factor, fixed, a, b)
    sd = test["se"] * test["n"] ** 0.5
    return f"sd {sd:.2f} points (d_z {abs(test['effect']):.2f})"


def _family(study: Study, factor: str, fixed: str) -> str:
    tests = study.pooled(factor)
    tests = tests[tests["fixed"] == fixed]
    significant = int((tests["p_holm"] < study.alpha).sum())
    return f"{int(tests['p'].notna().sum())} paired tests, {significant} significant after Holm"


def _seeds(study: Study, factor: str, fixed: str) -> str:
    """The range of the pairs the family's open comparisons need (80% power, Holm's level)."""
    tests = study.pooled(factor)
    tests = tests[tests["fixed"] == fixed]
    seeds = tests["seeds_needed"].dropna()
    low, high = int(seeds.min()), int(seeds.max())
    high_text = f"over {MAX_SEEDS}" if high >= MAX_SEEDS else str(high)
    text = f"{low} pairs" if low == high else f"{low} to {high_text} pairs"
    zero = int((tests["diff"] == 0).sum())
    whose = "pair's mean difference is" if zero == 1 else "pairs' mean differences are"
    zeros = f" ({zero} {whose} exactly 0 on these seeds: no observed effect to power a test for)"
    return text + (zeros if zero else "")


def _holm(study: Study, factor: str, a: str, b: str) -> str:
    values = study.pooled(factor, a, b)["p_holm"].dropna()
    low, high = _p(values.min()), _p(values.max())
    return f"Holm p {low}" if low == high else f"Holm p {low} to {high}"


def _significant(study: Study, factor: str, a: str, b: str) -> str:
    """The held levels at which a and b differ significantly, with a - b and its Holm p."""
    tests = study.pooled(factor, a, b)
    found = []
    for fixed in tests[tests["p_holm"] < study.alpha]["fixed"]:
        test = study.pair(factor, fixed, a, b)
        found.append(f"{fixed} ({signed(test['diff'], 1)} points, Holm p {_p(test['p_holm'])})")
    return ", ".join(found) or "none"


def _diffs(study: Study, factor: str, a: str, b: str, *held: str) -> str:
    """The range of the pooled mean differences a - b over the held levels (``held``, else all)."""
    tests = study.pooled(factor, a, b)
    levels = held or tuple(tests["fixed"])
    diffs = [study.pair(factor, fixed, a, b)["diff"] for fixed in levels]
    return f"{signed(min(diffs), 1)} to {signed(max(diffs), 1)} points"


def _std(study: Study, init: str) -> str:
    """The range of the cells' standard deviations over seeds at ``init``."""
    summary = summarise(study.frame)
    stds = summary[(summary["init"] == init) & (summary["task"] != AVG)]["std"]
    return f"{stds.min():.1f} to {stds.max():.1f} points"


def _untestable(study: Study) -> str:
    """How many of the report's paired tests have no p value."""
    tests = study.pvalues
    return f"{int(tests['p'].isna().sum())} of the {len(tests)} pairs in pvalues.csv"


def _collapsed(study: Study) -> str:
    collapsed = int((study.frame["collapse"] == COLLAPSED).sum())
    return f"{collapsed} of the {len(study.frame)} runs"


def _claim(study: Study, claim_id: str) -> str:
    judgement = study.judgements[claim_id]
    return f"`{claim_id}` is **{judgement.verdict}** ({verdict_why(judgement)})"


def _claims(study: Study) -> str:
    lines = summary_lines(list(study.judgements.values()))
    return "\n" + "\n".join(line for line in lines if line.startswith("|")) + "\n"


def _table(study: Study) -> str:
    """The report's table of the study (tables.md's), best means in bold."""
    (table,) = build_tables(summarise(study.frame))
    lines = md_head(table.columns, table.show_init)
    lines += [md_row(c) for c in body_cells(table, 1, md_escape, pm="±", bold="**{}**")]
    return "\n" + "\n".join(lines) + "\n"


def _grid(study: Study, task: str) -> str:
    """Mean ± std on ``task``: a row per objective, a column per init."""
    summary = summarise(study.frame)
    summary = summary[summary["task"] == task]
    wide = summary.pivot(index="objective", columns="init", values=["mean", "std"])
    inits = sorted(summary["init"].unique(), key=natural_key)
    order = list(dict.fromkeys(summary["objective"]))
    lines = [md_row(["Objective", *inits]), "|---|" + "---:|" * len(inits)]
    for objective in order:
        cells = [
            f"{wide.at[objective, ('mean', i)]:.1f} ± {wide.at[objective, ('std', i)]:.1f}"
            for i in inits
        ]
        lines.append(md_row([md_escape(objective), *cells]))
    return "\n" + "\n".join(lines) + "\n"


def _spread(study: Study, init: str) -> str:
    """How far apart the objectives' means lie at ``init`` (one task)."""
    summary = summarise(study.frame)
    means = summary[(summary["init"] == init) & (summary["task"] != AVG)]["mean"]
    low, high = means.min(), means.max()
    return f"{high - low:.1f} points ({low:.1f} to {high:.1f})"


def _teacher(study: Study) -> str:
    return f"{study.frame['teacher_score'].mean():.1f}"


def _scores(study: Study) -> str:
    """The range of the runs' scores."""
    return f"{study.frame['score'].min():.1f} to {study.frame['score'].max():.1f}"


def _behind(study: Study) -> str:
    """How far the cells' means lie below the teacher's mean score."""
    summary = summarise(study.frame)
    gaps = study.frame["teacher_score"].mean() - summary[summary["task"] != AVG]["mean"]
    return f"{gaps.min():.1f} to {gaps.max():.1f} points below the teacher"


FIGURES = {
    # TASK, where it is optional, is one task's test; without it, the test pooled over tasks
    "pair": _pair,  # FACTOR FIXED A B [TASK]: a - b, its (1 - alpha) CI, n, Holm p
    "examples": _examples,  # FACTOR FIXED A B TASK: a - b over dev examples, 95% CI, Holm p
    "example_interaction": _example_interaction,  # A B LOWER UPPER TASK: over dev examples
    "example_magnitude": _example_magnitude,  # A B LOWER UPPER TASK: over dev examples
    "tost": _tost,  # FACTOR FIXED A B MARGIN [TASK]: TOST p of a - b within +-MARGIN points
    "interaction": _interaction,  # A B LOWER UPPER [TASK]: (A's LOWER - UPPER) - (B's)
    "magnitude": _magnitude,  # A B LOWER UPPER [TASK]: |A's LOWER - UPPER| - |B's|
    "sd": _sd,  # FACTOR FIXED A B: the sd of the paired differences a - b, and d_z
    "family": _family,  # FACTOR FIXED: the family's tests and how many are significant
    "seeds": _seeds,  # FACTOR FIXED: the range of pairs its open comparisons need
    "holm": _holm,  # FACTOR A B: the range of the pair's Holm p over the held levels
    "significant": _significant,  # FACTOR A B: where the pair differs significantly
    "diffs": _diffs,  # FACTOR A B [HELD ...]: the range of a - b over the held levels
    "std": _std,  # INIT: the range of the cells' standard deviations
    "untestable": _untestable,  # the paired tests without a p value
    "collapsed": _collapsed,  # the runs collapsed to one class
    "claim": _claim,  # ID: the claim's verdict and why
    "claims": _claims,  # the covered claims' summary table
    "table": _table,  # the report's table
    "grid": _grid,  # TASK: objectives x inits, mean ± std
    "spread": _spread,  # INIT: the range of the objectives' means
    "teacher": _teacher,  # the teacher's mean score
    "scores": _scores,  # the range of the runs' scores
    "behind": _behind,  # how far the cells' means lie below the teacher
}
