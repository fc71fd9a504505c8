"""``evidence.md`` / ``evidence.csv``: beside every per-task seed-level paired t-test, the
example-level test (`kdbench.report.examples`) where the runs keep their per-example predictions,
whether the two agree, the collapse rate per cell, and the cells and tests without collapsed runs.

Example-level p values are Holm-adjusted within the seed-level test's family (setting, teacher,
student, factor, held value, task). A pair is tested at the example level when every matched seed
of both sides has a predictions file on the split its score is of, all with the same gold labels.
The verdicts agree when both tests are significant with the same sign, or neither is.
`interaction_example_test` is the example-level test of an interaction on one task (a README's
figure, `kdbench.report.prose`)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from kdbench.records.predictions import read_predictions
from kdbench.report.claims import MAGNITUDE
from kdbench.report.collapse import COLLAPSED, _split
from kdbench.report.examples import NO_TEST, contrast_bootstrap, metric_of, paired_bootstrap
from kdbench.report.frames import ALL, GROUP_COLS
from kdbench.report.paired import holm
from kdbench.report.stats import FAMILY_COLS, families, paired_tests, summarise
from kdbench.report.text import fmt, format_p, md_escape, md_row, signed
from kdbench.runtime.storage import atomic_write_text

EVIDENCE_COLS = FAMILY_COLS + [
    "runs",
    "a",
    "b",
    "n_pairs",
    "diff",
    "p_holm",
    "example_diff",
    "example_ci_low",
    "example_ci_high",
    "example_p",
    "example_p_holm",
    "n_examples",
    "agreement",
]
ALL_RUNS, WITHOUT_COLLAPSED = "all", "without collapsed"
SEED_ONLY = "seed-level only"


def _side_runs(frame: pd.DataFrame, row, level: str) -> dict[int, pd.Series]:
    """{seed: run} of one side of a per-task pair."""
    held = "init" if row.factor == "objective" else "objective"
    match = (frame["task"] == row.task) & (frame[row.factor] == level) & (frame[held] == row.fixed)
    for column in GROUP_COLS:
        match &= frame[column] == getattr(row, column)
    return {int(run.seed): run for _, run in frame[match].iterrows()}


def _loaded(run: pd.Series, root: Path) -> tuple | None:
    """(predicted, gold) of the split the run's score is of, in the split's order (runs evaluate
    in their own length order); None without a predictions file."""
    if not isinstance(run.get("predictions"), str):
        return None
    splits = read_predictions(root / run["predictions"])
    arrays = (splits or {}).get(_split(run["score_metric"]))
    if arrays is None:
        return None
    order = np.argsort(arrays["example"], kind="stable")
    return arrays["predicted"][order], arrays["gold"][order]


def _predictions_of(sides: list[list[pd.Series]], root: Path) -> tuple | None:
    """(metric, each side's runs as (predicted, gold)) when every run of every side has a
    predictions file on its score's split, all with the same gold labels; else None."""
    if not sides or not all(sides):
        return None
    metric = metric_of(sides[0][0]["score_metric"])
    if metric is None:
        return None
    loaded = [[_loaded(run, root) for run in side] for side in sides]
    every = [run for side in loaded for run in side]
    if any(run is None for run in every):
        return None
    gold = every[0][1]
    if any(len(g) != len(gold) or (g != gold).any() for _, g in every):
        return None
    return metric, loaded


def example_test(frame: pd.DataFrame, row, root: Path) -> dict:
    """The example-level test of one per-task pair; `NO_TEST` where its runs lack predictions."""
    side_a, side_b = _side_runs(frame, row, row.a), _side_runs(frame, row, row.b)
    seeds = sorted(set(side_a) & set(side_b))
    found = _predictions_of([[side_a[s] for s in seeds], [side_b[s] for s in seeds]], root)
    if found is None:
        return NO_TEST | {"n_examples": math.nan}
    metric, (runs_a, runs_b) = found
    return paired_bootstrap(metric, runs_a, runs_b)


def interaction_example_test(frame: pd.DataFrame, interaction, task: str, root: Path) -> dict:
    """The example-level test of an interaction on one task: the bootstrap of the contrast of its
    four cells (objectives a and b at inits lower and upper) over the seeds all four share, a
    difference of differences weighing them +1, -1, -1, +1; a contrast of magnitudes signs each
    effect by its mean over those seeds, as the seed-level test. `NO_TEST` without predictions."""
    runs = frame[frame["task"] == task]
    sides = [runs[(runs["objective"] == o) & (runs["init"] == i)] for o, i in interaction.runs()]
    by_seed = [{int(run.seed): run for _, run in side.iterrows()} for side in sides]
    seeds = sorted(set.intersection(*(set(side) for side in by_seed)))
    found = _predictions_of([[side[s] for s in seeds] for side in by_seed], root)
    if found is None:
        return NO_TEST | {"n_examples": math.nan}
    metric, loaded = found
    scores = [np.mean([side[s]["score"] for s in seeds]) for side in by_seed]
    signs = [1.0, 1.0]
    if interaction.kind == MAGNITUDE:
        signs = [1.0 if scores[0] >= scores[1] else -1.0, 1.0 if scores[2] >= scores[3] else -1.0]
    weights = [signs[0], -signs[0], -signs[1], signs[1]]
    return contrast_bootstrap(metric, list(zip(weights, loaded, strict=True)))


def agreement(row, alpha: float) -> str:
    """Whether the seed-level and the example-level verdicts agree (`SEED_ONLY` without the
    latter)."""
    if pd.isna(row["example_p_holm"]):
        return SEED_ONLY
    if pd.isna(row["p_holm"]):
        return "example-level only"
    seed, example = row["p_holm"] < alpha, row["example_p_holm"] < alpha
    if seed != example:
        return "disagree: " + ("seeds" if seed else "examples") + " significant only"
    if seed and math.copysign(1, row["diff"]) != math.copysign(1, row["example_diff"]):
        return "disagree: opposite signs"
    return "agree"


def evidence_tests(frame: pd.DataFrame, root: Path, alpha: float, runs: str) -> pd.DataFrame:
    """Every per-task pair of `paired_tests(frame)` with its example-level test and agreement."""
    pvalues = paired_tests(frame, alpha)
    per_task = pvalues[pvalues["task"] != ALL] if not pvalues.empty else pvalues
    rows = []
    for row in per_task.itertuples(index=False):
        test = example_test(frame, row, root)
        rows.append(
            {column: getattr(row, column) for column in FAMILY_COLS + ["a", "b", "n_pairs"]}
            | {"runs": runs, "diff": row.diff, "p_holm": row.p_holm}
            | {f"example_{key}": value for key, value in test.items() if key != "n_examples"}
            | {"n_examples": test["n_examples"]}
        )
    tests = pd.DataFrame(rows, columns=EVIDENCE_COLS)
    if tests.empty:
        return tests
    by_family = tests.groupby(FAMILY_COLS, sort=False)["example_p"]
    tests["example_p_holm"] = by_family.transform(lambda s: holm(s.to_numpy()))
    tests["n_examples"] = tests["n_examples"].astype("Int64")
    tests["agreement"] = [agreement(r, alpha) for _, r in tests.iterrows()]
    return tests


def evidence(frame: pd.DataFrame, root: Path, alpha: float) -> pd.DataFrame:
    """The tests on every run and on the runs that have not collapsed."""
    healthy = frame[frame["collapse"] != COLLAPSED]
    parts = [evidence_tests(frame, root, alpha, ALL_RUNS)]
    parts += [evidence_tests(healthy, root, alpha, WITHOUT_COLLAPSED)]
    return pd.concat([p for p in parts if not p.empty] or parts[:1], ignore_index=True)


def collapse_rates(frame: pd.DataFrame) -> pd.DataFrame:
    """Per cell (group, objective, init, task): runs, collapsed runs, their share, the mean score of
    every run and of the runs that have not collapsed."""
    cells = summarise(frame)
    cells = cells[cells["task"] != "Avg"].copy()
    healthy = summarise(frame[frame["collapse"] != COLLAPSED])
    keys = GROUP_COLS + ["objective", "init", "task"]
    cells = cells.merge(
        healthy[keys + ["mean", "n"]].rename(columns={"mean": "mean_ok", "n": "n_ok"}),
        on=keys,
        how="left",
    )
    cells["rate"] = cells["collapsed"].astype(float) / cells["n"].astype(float)
    return cells


def evidence_markdown(tests: pd.DataFrame, rates: pd.DataFrame, frame, alpha, digits) -> str:
    """The page of example-level evidence and collapsed runs."""
    kept = int(frame["predictions"].map(lambda p: isinstance(p, str)).sum())
    out = ["# Example-level evidence and collapsed runs", "", _intro(alpha), ""]
    if kept == 0:
        out += [
            "**These runs have seed-level evidence only**: their records keep no per-example "
            "predictions, so no example-level test is run; each pair's verdict is its seed-level "
            "paired t-test's.",
            "",
        ]
    else:
        out += [f"{kept} of {len(frame)} runs keep their per-example predictions.", ""]
    out += _tests_section("Seed-level and example-level tests", tests, ALL_RUNS, alpha, digits)
    out += _rates_section(rates, digits)
    if not (frame["collapse"] == COLLAPSED).any():
        out += ["No run collapsed: the cells and tests without collapsed runs are those above.", ""]
    else:
        title = "Tests without collapsed runs"
        out += _tests_section(title, tests, WITHOUT_COLLAPSED, alpha, digits)
    return "\n".join(out).rstrip() + "\n"


def _intro(alpha: float) -> str:
    return (
        "Per task, each seed-level paired t-test (significance.md) beside the example-level test: "
        "a paired bootstrap over dev examples (2000 resamples) of the difference of the score's "
        "metric, each side averaged over its matched seeds, every run scored on the same "
        "resampled examples. The seed-level test asks whether the difference outlasts the "
        "training seeds on this dev set; the example-level test whether it outlasts the dev "
        "set's sample for these trained models. Both are Holm-adjusted within the same family; "
        f"a test is significant when p (Holm) < {alpha}. *Agreement*: both significant with the "
        "same sign, or neither."
    )


def _tests_section(title: str, tests: pd.DataFrame, runs: str, alpha, digits) -> list[str]:
    part = tests[tests["runs"] == runs] if not tests.empty else tests
    out = [f"## {title}", ""]
    if part.empty:
        return out + ["No per-task comparison.", ""]
    for head, family in families(part):
        held = "init" if head["factor"] == "objective" else "objective"
        out += [
            f"### {head['setting']} / {head['teacher']} / {head['student']}: "
            f"{head['factor']} pairs at {held} = {md_escape(head['fixed'])}",
            "",
            md_row(["Task", "a", "b", "n", "a - b (seeds)", "p (Holm)"])
            + " a - b (examples) [95% CI] | p (Holm) | Agreement |",
            "|---|---|---|---:|---:|---:|---:|---:|---|",
        ]
        out += [md_row(_cells(row, digits)) for row in family.itertuples(index=False)]
        out.append("")
    return out


def _cells(row, digits: int) -> list[str]:
    interval = ""
    if not pd.isna(row.example_ci_low):
        interval = f" [{signed(row.example_ci_low, digits)}, {signed(row.example_ci_high, digits)}]"
    return [
        md_escape(row.task),
        md_escape(row.a),
        md_escape(row.b),
        str(row.n_pairs),
        signed(row.diff, digits),
        format_p(row.p_holm),
        signed(row.example_diff, digits) + interval,
        format_p(row.example_p_holm),
        row.agreement,
    ]


def _rates_section(rates: pd.DataFrame, digits: int) -> list[str]:
    out = [
        "## Collapse rate per cell",
        "",
        "Runs whose student predicts one class for at least 95% of the dev examples, or scores at "
        "chance on a regression (collapse.py), per cell; the mean over every run and over the runs "
        "that have not collapsed.",
        "",
        md_row(["Setting", "Teacher", "Student", "Objective", "Init", "Task", "Collapsed"])
        + " Rate | Mean | Mean without collapsed |",
        "|---|---|---|---|---|---|---:|---:|---:|---:|",
    ]
    for r in rates.itertuples(index=False):
        cells = [md_escape(getattr(r, c)) for c in GROUP_COLS + ["objective", "init", "task"]]
        ok = "" if pd.isna(r.mean_ok) else fmt(r.mean_ok, digits)
        rate = f"{r.rate:.0%}"
        out.append(md_row([*cells, f"{r.collapsed} of {r.n}", rate, fmt(r.mean, digits), ok]))
    return out + [""]


def write_evidence(frame: pd.DataFrame, root: Path, out: Path, alpha: float, digits: int) -> str:
    """``evidence.csv`` (every test, on all runs and without collapsed ones) and ``evidence.md``,
    whose text it returns; prediction files are read relative to `root`."""
    tests = evidence(frame, root, alpha)
    atomic_write_text(out / "evidence.csv", tests.to_csv(index=False))
    markdown = evidence_markdown(tests, collapse_rates(frame), frame, alpha, digits)
    atomic_write_text(out / "evidence.md", markdown)
    return markdown
