"""Does a trainer setting change the scores? `python experiments/setting_effect.py A B [--names a b]
[--out F]`.

A and B are two sweep folders of the same design that differ in one setting (e.g. mini_table1 with
`stages.<stage>.group_by_length` on and off). Their completed runs are paired by (task, objective,
init, seed), and kdbench's report statistics test the paired differences A - B: over every pair, and
per objective with Holm's correction. Also the median stage times of each side. Prints (or writes to
F) a markdown summary.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from kdbench.report.stats import holm, paired_effect, paired_ttest, seeds_needed

TIMES = ("intermediate_s", "prediction_s")
# the same times in records written before the stages were named (the committed results' records)
EARLIER_TIMES = {"intermediate_s": "stage1_s", "prediction_s": "stage2_s"}


def stage_seconds(record: dict, name: str) -> float:
    """A record's seconds under the timing key `name`, or its earlier name."""
    timing = record["timing"]
    return timing[name] if name in timing else timing[EARLIER_TIMES[name]]


def runs(folder: Path) -> dict[tuple, dict]:
    found = (json.loads(p.read_text()) for p in sorted(folder.glob("*/result.json")))
    return {
        (r["task"], r["objective"], str(r["init"]), r["seed"]): r
        for r in found
        if r["status"] == "completed"
    }


def test_row(label: str, a: list[float], b: list[float]) -> dict:
    effect = paired_effect(a, b)
    return {
        "label": label,
        "n": len(a),
        "mean_a": statistics.mean(a),
        "mean_b": statistics.mean(b),
        "p": paired_ttest(a, b)[1],
        "seeds": seeds_needed(effect["effect"], 0.05),
    } | effect


def line(row: dict) -> str:
    p_holm = f" | {row['p_holm']:.3f}" if "p_holm" in row else " | "
    return (
        f"| {row['label']} | {row['n']} | {row['mean_a']:.2f} | {row['mean_b']:.2f} | "
        f"{row['diff']:+.2f} "
        f"[{row['ci_low']:+.2f}, {row['ci_high']:+.2f}] | {row['effect']:+.2f} | "
        f"{row['p']:.3f}{p_holm} "
        f"| {row['seeds']:.0f} |"
    )


def summary(a_dir: Path, b_dir: Path, names: tuple[str, str]) -> str:
    a_runs, b_runs = runs(a_dir), runs(b_dir)
    pairs = sorted(a_runs.keys() & b_runs.keys())
    if len(pairs) < 2:
        raise SystemExit(
            f"setting_effect: {len(pairs)} paired runs between {a_dir} and {b_dir}; need at least 2"
        )
    score = lambda runs_, keys: [runs_[k]["score"] for k in keys]  # noqa: E731
    overall = test_row("every pair", score(a_runs, pairs), score(b_runs, pairs))
    objectives = sorted({k[1] for k in pairs})
    per = [
        test_row(o, score(a_runs, keys), score(b_runs, keys))
        for o in objectives
        for keys in [[k for k in pairs if k[1] == o]]
    ]
    for row, p_holm in zip(per, holm([r["p"] for r in per]), strict=True):
        row["p_holm"] = float(p_holm)
    a, b = names
    lines = [
        f"{len(pairs)} paired runs ({a}: `{a_dir.name}`, {b}: `{b_dir.name}`); difference = {a} - "
        f"{b}, "
        "95% t interval, "
        "d_z, paired t-test p (Holm over objectives), pairs for 80% power at the observed d_z.",
        "",
        f"| pairs | n | mean {a} | mean {b} | {a} - {b} [95% CI] | d_z | p | p (Holm) | pairs for "
        "80% power |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        line(overall),
        *map(line, per),
        "",
        f"| median seconds per run | {a} | {b} | {a} / {b} |",
        "|---|---:|---:|---:|",
    ]
    for name in TIMES:
        ta, tb = (
            statistics.median(stage_seconds(r, name) for k, r in runs_.items() if k in pairs)
            for runs_ in (a_runs, b_runs)
        )
        lines.append(f"| {name} | {ta:.1f} | {tb:.1f} | {ta / tb:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--names", nargs=2, default=("A", "B"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    text = summary(args.a, args.b, tuple(args.names))
    if args.out:
        args.out.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
