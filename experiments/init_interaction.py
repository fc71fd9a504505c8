"""Does the init change one objective more than another? A paired test of the init x objective
interaction in a committed runs.jsonl.

Usage: python experiments/init_interaction.py results/NAME/runs.jsonl OBJ_A OBJ_B INIT_1 INIT_2

Per seed, the init effect of an objective is its score at INIT_1 minus its score at INIT_2; the
interaction is OBJ_A's effect minus OBJ_B's, tested with a two-sided paired t-test over the seeds
(scipy). Also printed: each objective's own init effect with its paired t-test and 95% interval.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from scipy import stats


def scores(path: Path) -> dict[tuple[str, str, int], float]:
    """(objective, init, seed) -> score of every completed record."""
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record.get("status") == "completed":
            key = (record["objective"], str(record["init"]), int(record["seed"]))
            found[key] = float(record["score"])
    return found


def effect(values: np.ndarray, label: str) -> None:
    """The mean of paired differences, its 95% t interval and the two-sided p value."""
    mean, sem = values.mean(), stats.sem(values)
    low, high = stats.t.interval(0.95, len(values) - 1, loc=mean, scale=sem)
    p = stats.ttest_1samp(values, 0.0).pvalue
    interval = f"95% CI {low:+.2f} to {high:+.2f}"
    print(f"{label}: {mean:+.2f} points ({interval}; n={len(values)}, p={p:.3g})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("objectives", nargs=2)
    parser.add_argument("inits", nargs=2)
    args = parser.parse_args()
    found = scores(args.runs)
    (a, b), (first, second) = args.objectives, args.inits
    seeds = sorted(
        seed
        for objective, init, seed in found
        if all((o, i, seed) in found for o in (a, b) for i in (first, second))
        and (objective, init) == (a, first)
    )
    if len(seeds) < 2:
        raise SystemExit(
            f"{args.runs}: {len(seeds)} seed(s) have all four cells; a paired test needs 2"
        )
    deltas = {
        objective: np.array(
            [found[objective, first, s] - found[objective, second, s] for s in seeds]
        )
        for objective in (a, b)
    }
    for objective in (a, b):
        effect(deltas[objective], f"{objective}: init {first} - init {second}")
    effect(deltas[a] - deltas[b], f"interaction: ({a}'s init effect) - ({b}'s)")


if __name__ == "__main__":
    main()
