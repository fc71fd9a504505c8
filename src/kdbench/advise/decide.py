"""The pilot's decision rule, a pure function of its runs (the report's frame of their records),
written into the pilot's design before its first job:

- the cells are the pilot's (objective, init) pairs, each scored on the dev set over the seeds every
  cell scored (a run whose seed some cell has no score for, its score not a finite number, is left
  out; no such seed at all stops the decision); the best is the highest mean over those seeds;
- every pair of cells is compared over those seeds by a paired t-test (`kdbench.report.paired`; a
  pair without any difference has p 1) and by an equivalence test (TOST) within the margin, each
  family (the design's every pair) Holm-adjusted;
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
  its difference lies inside the margin, each with 80% power; the largest of these is reported
  (an estimate for the difference worth acting on, not a promise: a smaller true difference takes
  more), and none is estimated with fewer than 2 seeds every cell scored (no spread is known).
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

from kdbench.errors import KdbenchError
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
    """A cell of the pilot: its scores' mean and std over the decision's seeds (`seeds` of them),
    and what its runs' training cost."""

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
    seeds_run: int  # the decision's seeds: those every cell scored
    seeds: tuple[int, ...]  # those seeds
    left_out: tuple[tuple[str, int], ...]  # the runs (cell, seed) of seeds some cell did not score
    # UNDECIDED: the seeds per cell that give each open pair 80% power (`seeds_to_decide`) and the
    # wall time they would add; None with fewer than 2 seeds every cell scored (no spread known)
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


def compared(
    frame: pd.DataFrame, names: list[str] | None = None
) -> tuple[dict[str, list[float]], list[int]]:
    """{cell: its scores on the decision's seeds, in seed order} and those seeds: the seeds every
    cell of `names` (the design's cells; None: the frame's) scored. No such seed is a KdbenchError
    naming each cell's scored seeds."""
    by_cell = scores(frame)
    names = list(by_cell if names is None else names)
    seeds = sorted(set.intersection(*(set(by_cell.get(name, {})) for name in names)))
    if not seeds:
        scored = "; ".join(f"{name}: {seeds_text(by_cell.get(name, {}))}" for name in names)
        raise KdbenchError(
            f"no seed was scored by every cell of the pilot (scored seeds: {scored}; a run whose "
            "score is not a finite number counts as unscored): the decision compares the cells "
            "on the seeds they all scored; python -m kdbench.report on the pilot's folder lists "
            "the runs it left out; run the advice without such cells (advise.candidates) into a "
            "new advise.out"
        )
    return {name: [by_cell[name][seed] for seed in seeds] for name in names}, seeds


def seeds_text(by_seed: dict[int, float]) -> str:
    """A cell's scored seeds: "1-3", "1,2,4", "none"."""
    seeds = sorted(by_seed)
    if not seeds:
        return "none"
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ",".join(map(str, seeds))


def cells_of(frame: pd.DataFrame, on_seeds: dict[str, list[float]]) -> list[Cell]:
    """The cells of `on_seeds` ({cell: its scores on the decision's seeds}), in its order, each
    with the cost of its runs in `frame`."""
    names = frame["objective"] + "@" + frame["init"]
    cells = []
    for name, values in on_seeds.items():
        runs = frame[names == name]
        staged = runs["timing"].map(lambda t: _seconds(t, "intermediate_s") > 0)
        trained = runs["timing"].map(lambda t: _seconds(t, "intermediate_s", "prediction_s"))
        cells.append(
            Cell(
                *name.split("@", 1),
                float(np.mean(values)),
                float(np.std(values, ddof=1)) if len(values) > 1 else math.nan,
                len(values),
                bool(staged.any()),
                float(trained.median()),
                float(runs["wall_s"].astype(float).median()),
            )
        )
    return cells


def pair_tests(on_seeds: dict[str, list[float]], margin: float, alpha: float = ALPHA):
    """Every pair of cells (a, b) of `on_seeds` ({cell: its scores on the decision's seeds}): the
    paired t-test of a - b with its (1 - `alpha`) interval (p 1 for a pair without any
    difference) and the TOST within +-`margin` points, each Holm-adjusted over the design's
    pairs."""
    rows = []
    for a, b in itertools.combinations(on_seeds, 2):
        x, y, n = on_seeds[a], on_seeds[b], len(on_seeds[a])
        effect = paired_effect(x, y, 1 - alpha)
        sd = effect["se"] * math.sqrt(n) if n > 1 else math.nan
        p = paired_ttest(x, y)[1]
        rows.append(
            {"a": a, "b": b, "n_pairs": n, **effect, "sd": sd}
            | {"p": 1.0 if n > 1 and math.isnan(p) else p}  # NaN: every difference is 0
            | {"tost_p": equivalence_p(effect["diff"], effect["se"], n, margin)}
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
    """The seeds that give an open pair 80% power at the test level `level` (alpha / the family's
    pairs), from its observed spread: to detect the larger of its difference and `min_effect`,
    or, its difference inside the margin, to show it equivalent if fewer; NaN for a pair with
    fewer than 2 seeds, whose spread is unknown."""
    if math.isnan(pair.sd):
        return math.nan
    target = max(abs(pair.diff), min_effect)
    effect = math.inf if pair.sd == 0 else target / pair.sd
    detect = seeds_needed(effect, level)
    equivalent = equivalence_pairs(pair.diff, pair.sd, margin, level)
    return float(np.nanmin([detect, equivalent]))


def decide(
    frame: pd.DataFrame,
    margin: float,
    min_effect: float,
    alpha: float = ALPHA,
    names: list[str] | None = None,
) -> Decision:
    """The decision rule (see the module) on the pilot's runs of the cells `names` (the design's;
    None: the frame's); `margin` and `min_effect` in score points."""
    on_seeds, common = compared(frame, names)
    cells = cells_of(frame, on_seeds)
    if len(cells) < 2:
        raise ValueError("the decision needs at least two cells")
    best = min(cells, key=lambda cell: (-cell.mean, cell.cost_key)).name
    tests = pair_tests(on_seeds, margin, alpha)
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
        seeds_run=len(common),
        seeds=tuple(common),
        left_out=tuple(
            (cell, seed)
            for cell, runs in scores(frame).items()
            if cell in on_seeds
            for seed in runs
            if seed not in common
        ),
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


def spread(frame: pd.DataFrame, names: list[str] | None = None) -> float:
    """The pilot's observed spread: the root mean square of every pair's std of paired
    differences over the seeds every cell of `names` (None: the frame's) scored (NaN with fewer
    than two)."""
    on_seeds = compared(frame, names)[0]
    sds = pair_tests(on_seeds, 1.0)["sd"].dropna() if len(on_seeds) > 1 else pd.Series([])
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
