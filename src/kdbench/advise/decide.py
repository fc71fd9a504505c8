"""The pilot's decision rule, a pure function of its runs (the report's frame of their records),
written into the pilot's design before its first job:

- the cells are the pilot's (objective, init) pairs, each scored on the dev set over seeds; the best
  is the highest mean;
- every pair of cells is compared by a paired t-test over the seeds both ran
  (`kdbench.report.paired`), and by an equivalence test (TOST) within the margin, each family (the
  design's every pair) Holm-adjusted;
- a cell is equivalent to the best when the TOST shows their difference within the margin (even
  when it is significant: a real difference smaller than the margin is a tie, as in the report's
  claims), else below it when the t-test shows it significantly lower;
- the best cell is the answer when every other cell is below it;
- else, when every other cell is either below the best or equivalent to it, the answer is the
  cheapest of the best and those equivalent to it: no intermediate stage first, then the shortest
  training measured;
- else there is no decision within the budget: each open pair (neither significantly different nor
  equivalent) needs the seeds, from its observed spread, that detect the larger of its difference
  and the smallest difference worth acting on at the Holm level, or that show it equivalent where
  its difference lies inside the margin; the largest of these is the seeds that would decide it,
  and none is estimated where an open pair shares fewer than 2 seeds (its spread is unknown).
  The student shipped then is the cheapest cell no test put below the best, marked provisional.

A pilot whose first seeds have all collapsed to one class (`kdbench.report.collapse`: no student
learned the task at the pilot's size) stops there, before any decision: its scores compare no
methods.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from kdbench.records.predictions import read_predictions
from kdbench.report.collapse import COLLAPSED
from kdbench.report.margins import dev_sizes
from kdbench.report.paired import (
    equivalence_p,
    equivalence_pairs,
    holm,
    paired_effect,
    paired_ttest,
    seeds_needed,
)

ALPHA = 0.05
WINNER, CHEAPEST, UNDECIDED = "winner", "cheapest equivalent", "undecided"
BELOW, EQUIVALENT, OPEN = "below", "equivalent", "open"


@dataclass(frozen=True)
class Cell:
    """A cell of the pilot: its scores' mean and std over its seeds, and what its training cost."""

    objective: str
    init: str
    mean: float
    std: float
    seeds: int
    staged: bool  # an intermediate stage before the prediction stage
    train_s: float  # the median job's seconds of training (its stages)
    job_s: float  # the median job's wall time

    @property
    def name(self) -> str:
        return f"{self.objective}@{self.init}"

    @property
    def cost_key(self) -> tuple:
        """Cheaper first: no intermediate stage, then the shorter training; a tie goes to the
        higher mean."""
        return (self.staged, self.train_s, -self.mean, self.name)


@dataclass(frozen=True)
class Pair:
    """The best cell against another: the paired difference best - other over their seeds."""

    best: str
    other: str
    n_pairs: int
    diff: float
    sd: float  # the paired differences' sample std
    ci_low: float
    ci_high: float
    p: float
    p_holm: float
    tost_p: float
    tost_p_holm: float
    verdict: str  # BELOW, EQUIVALENT or OPEN


@dataclass(frozen=True)
class Decision:
    kind: str  # WINNER, CHEAPEST or UNDECIDED
    chosen: str  # the cell shipped (provisional when UNDECIDED)
    best: str
    cells: tuple[Cell, ...]
    pairs: tuple[Pair, ...]
    alpha: float
    margin: float  # points
    min_effect: float  # points
    family: int  # the pairs Holm adjusts over
    seeds_run: int  # the fewest seeds a cell has
    # UNDECIDED: the seeds per cell that would decide it and the wall time they would add; None
    # where an open pair shares fewer than 2 seeds with the best (no spread to size them from)
    seeds_needed: int | None = None
    more_s: float | None = None

    def cell(self, name: str) -> Cell:
        return next(cell for cell in self.cells if cell.name == name)


def cell_name(objective: str, init: str) -> str:
    return f"{objective}@{init}"


def scores(frame: pd.DataFrame) -> dict[str, dict[int, float]]:
    """{cell: {seed: score}} of the pilot's runs."""
    found: dict[str, dict[int, float]] = {}
    for run in frame.itertuples(index=False):
        found.setdefault(cell_name(run.objective, run.init), {})[int(run.seed)] = float(run.score)
    return found


def _seconds(timing, *names: str) -> float:
    timing = timing if isinstance(timing, dict) else {}
    return sum(float(timing.get(name) or 0.0) for name in names)


def cells_of(frame: pd.DataFrame) -> list[Cell]:
    """The pilot's cells, in the frame's order."""
    cells = []
    for (objective, init), runs in frame.groupby(["objective", "init"], sort=False):
        score = runs["score"].astype(float)
        staged = runs["timing"].map(lambda t: _seconds(t, "intermediate_s") > 0)
        trained = runs["timing"].map(lambda t: _seconds(t, "intermediate_s", "prediction_s"))
        cells.append(
            Cell(
                objective,
                init,
                float(score.mean()),
                float(score.std(ddof=1)) if len(score) > 1 else math.nan,
                len(score),
                bool(staged.any()),
                float(trained.median()),
                float(runs["wall_s"].astype(float).median()),
            )
        )
    return cells


def pair_tests(frame: pd.DataFrame, margin: float, alpha: float = ALPHA) -> pd.DataFrame:
    """Every pair of cells (a, b): the paired t-test of a - b over their common seeds with its
    (1 - `alpha`) interval and the TOST within +-`margin` points, each Holm-adjusted over the
    design's pairs."""
    by_cell, rows = scores(frame), []
    for a, b in itertools.combinations(by_cell, 2):
        common = sorted(set(by_cell[a]) & set(by_cell[b]))
        x = [by_cell[a][seed] for seed in common]
        y = [by_cell[b][seed] for seed in common]
        effect = paired_effect(x, y, 1 - alpha)
        sd = effect["se"] * math.sqrt(len(common)) if len(common) > 1 else math.nan
        rows.append(
            {"a": a, "b": b, "n_pairs": len(common), **effect, "sd": sd}
            | {"p": paired_ttest(x, y)[1]}
            | {"tost_p": equivalence_p(effect["diff"], effect["se"], len(common), margin)}
        )
    tests = pd.DataFrame(rows)
    if not tests.empty:
        tests["p_holm"] = holm(tests["p"].to_numpy())
        tests["tost_p_holm"] = holm(tests["tost_p"].to_numpy())
    return tests


def against_best(tests: pd.DataFrame, best: str, alpha: float) -> list[Pair]:
    """The pairs of the best cell, as best - other, each with its verdict."""
    pairs = []
    for row in tests[(tests["a"] == best) | (tests["b"] == best)].itertuples(index=False):
        sign = 1.0 if row.a == best else -1.0
        low, high = sorted((sign * row.ci_low, sign * row.ci_high))
        diff = sign * row.diff
        if row.tost_p_holm < alpha:  # a real difference within the margin is a tie
            verdict = EQUIVALENT
        elif row.p_holm < alpha and diff > 0:
            verdict = BELOW
        else:
            verdict = OPEN
        other = row.b if row.a == best else row.a
        values = (row.n_pairs, diff, row.sd, low, high, row.p, row.p_holm)
        pairs.append(Pair(best, other, *values, row.tost_p, row.tost_p_holm, verdict))
    return pairs


def seeds_to_decide(pair: Pair, min_effect: float, margin: float, level: float) -> float:
    """The seeds that would decide an open pair at the test level `level` (alpha / the family's
    pairs), from its observed spread: those detecting the larger of its difference and
    `min_effect`, or, its difference inside the margin, those showing it equivalent if fewer; NaN
    for a pair with fewer than 2 common seeds, whose spread is unknown."""
    if math.isnan(pair.sd):
        return math.nan
    target = max(abs(pair.diff), min_effect)
    effect = math.inf if pair.sd == 0 else target / pair.sd
    detect = seeds_needed(effect, level)
    equivalent = equivalence_pairs(pair.diff, pair.sd, margin, level)
    return float(np.nanmin([detect, equivalent]))


def decide(frame: pd.DataFrame, margin: float, min_effect: float, alpha: float = ALPHA) -> Decision:
    """The decision rule (see the module) on the pilot's runs; `margin` and `min_effect` in score
    points."""
    cells = cells_of(frame)
    if len(cells) < 2:
        raise ValueError("the decision needs at least two cells")
    best = min(cells, key=lambda cell: (-cell.mean, cell.cost_key)).name
    tests = pair_tests(frame, margin, alpha)
    pairs = against_best(tests, best, alpha)
    verdicts = {pair.verdict for pair in pairs}
    head = dict(
        best=best,
        cells=tuple(cells),
        pairs=tuple(pairs),
        alpha=alpha,
        margin=margin,
        min_effect=min_effect,
        family=len(tests),
        seeds_run=min(cell.seeds for cell in cells),
    )
    if verdicts == {BELOW}:
        return Decision(WINNER, best, **head)
    keep = [best] + [pair.other for pair in pairs if pair.verdict != BELOW]
    cheapest = min((c for c in cells if c.name in keep), key=lambda c: c.cost_key).name
    if OPEN not in verdicts:
        return Decision(CHEAPEST, cheapest, **head)
    level = alpha / len(tests)
    needed = [seeds_to_decide(p, min_effect, margin, level) for p in pairs if p.verdict == OPEN]
    if any(map(math.isnan, needed)):
        return Decision(UNDECIDED, cheapest, **head)
    seeds = max(int(max(needed)), head["seeds_run"] + 1)  # the seeds run did not decide it
    more = max(0, seeds - head["seeds_run"]) * sum(cell.job_s for cell in cells)
    return Decision(UNDECIDED, cheapest, **head, seeds_needed=seeds, more_s=more)


def spread(frame: pd.DataFrame) -> float:
    """The pilot's observed spread: the root mean square of every pair's std of paired
    differences (NaN with fewer than two common seeds)."""
    sds = pair_tests(frame, 1.0)["sd"].dropna() if len(scores(frame)) > 1 else pd.Series([])
    return float(np.sqrt((sds**2).mean())) if len(sds) else math.nan


def none_learned(frame: pd.DataFrame) -> bool:
    """Whether every run of `frame` has collapsed to one class (`kdbench.report.collapse`): such a
    pilot compares no methods, whatever its tests say."""
    return len(frame) > 0 and bool((frame["collapse"] == COLLAPSED).all())


def dev_examples(frame: pd.DataFrame, root: Path) -> int:
    """The size of the pilot's dev set: from the records' gold label counts, else (a regression)
    from a run's per-example predictions (`root`: where the records' paths start)."""
    sizes = set(dev_sizes(frame).values())
    if len(sizes) == 1:
        return sizes.pop()
    for path in frame["predictions"].dropna():
        splits = read_predictions(root / path)
        if splits:
            return len(next(iter(splits.values()))["gold"])
    raise ValueError("the pilot's records name no dev set size")


def in_points(examples: float, dev: int) -> float:
    """`examples` dev examples in score points on a dev set of `dev` examples."""
    return 100.0 * examples / dev
