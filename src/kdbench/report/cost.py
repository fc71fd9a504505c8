"""What the runs' students cost beside their scores: the records' measured `cost`
(kdbench.measure.cost)
as a table and an accuracy-vs-latency plot, one point per (task, teacher, student shape,
objective, init), seeds as error bars."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from kdbench.report.figures import colour_of, safe_name, save_png
from kdbench.report.frames import COST_COLS, natural_key
from kdbench.report.task_names import task_title
from kdbench.report.text import md_escape, md_row

POINT_COLS = ["task", "teacher", "student", "objective", "init"]
MARKERS = ("o", "s", "^", "D", "v")  # one per student shape; the colour is the objective's
ABOUT = (
    "Measured on the machine that ran each job (`kdbench.measure.cost`): parameters, FLOPs per "
    "example at the task's median length, latency at batch 1, throughput at batch 32; "
    "speed-up = the "
    "teacher's latency / the student's (batch 1) and the student's throughput / the teacher's "
    "(batch 32), means over seeds."
)
HEAD = [
    "Task",
    "Teacher",
    "Student",
    "Objective",
    "Init",
    "Score",
    "Params (S / T)",
    "GFLOPs (S / T)",
    "Latency ms (S / T)",
    "Speed-up b1",
    "Speed-up b32",
]


def sample_std(scores: pd.Series) -> float:
    return scores.std(ddof=1) if len(scores) > 1 else np.nan


def cost_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per point: the score's mean, std over seeds and n, and the mean of every cost column."""
    if "student_latency_ms" not in frame or frame["student_latency_ms"].isna().all():
        return pd.DataFrame(columns=[*POINT_COLS, "mean", "std", "n", *COST_COLS, "teacher_score"])
    groups = frame.dropna(subset=["student_latency_ms"]).groupby(POINT_COLS, sort=False)
    table = groups["score"].agg(mean="mean", std=sample_std, n="count")
    table = table.join(groups[[*COST_COLS, "teacher_score"]].mean()).reset_index()
    order = table.apply(lambda r: [natural_key(r[c]) for c in POINT_COLS], axis=1)
    return table.loc[order.sort_values().index].reset_index(drop=True)


def cost_row(r: pd.Series, digits: int) -> str:
    score = f"{r['mean']:.{digits}f}" + ("" if pd.isna(r["std"]) else f" ± {r['std']:.{digits}f}")
    return md_row(
        [
            md_escape(task_title(r["task"])),
            *(md_escape(r[c]) for c in POINT_COLS[1:]),
            f"{score} (n={r['n']})",
            f"{r['student_params'] / 1e6:.2f}M / {r['teacher_params'] / 1e6:.2f}M",
            f"{r['student_flops'] / 1e9:.3f} / {r['teacher_flops'] / 1e9:.3f}",
            f"{r['student_latency_ms']:.2f} / {r['teacher_latency_ms']:.2f}",
            f"{r['speedup_latency']:.2f}x",
            f"{r['speedup_throughput']:.2f}x",
        ]
    )


def cost_markdown(table: pd.DataFrame, digits: int, plots: list[Path]) -> list[str]:
    """The cost section of tables.md (nothing when no run measured its cost)."""
    if table.empty:
        return []
    rows = [cost_row(r, digits) for _, r in table.iterrows()]
    images = [f"![accuracy vs cost]({path.name})" for path in plots]
    return [
        "## Cost",
        "",
        ABOUT,
        "",
        md_row(HEAD),
        md_row(["---"] * len(HEAD)),
        *rows,
        "",
        *images,
        "",
    ]


def plot_cost(table: pd.DataFrame, out: Path) -> list[Path]:
    """Per task, the score against the latency at batch 1 (log scale): one point per student shape,
    objective and init, seeds as error bars; each teacher a black star."""
    written = []
    for task, part in table.groupby("task", sort=False):
        fig = Figure(figsize=(6, 4))
        ax = fig.add_subplot()
        shapes = {
            student: MARKERS[i % len(MARKERS)]
            for i, student in enumerate(dict.fromkeys(part["student"]))
        }
        for _, r in part.iterrows():
            spread = 0 if pd.isna(r["std"]) else r["std"]
            ax.errorbar(
                r["student_latency_ms"],
                r["mean"],
                yerr=spread,
                fmt=shapes[r["student"]],
                capsize=3,
                color=colour_of("objective", r["objective"]),
                label=f"{r['student']} {r['objective']} ({r['init']})",
            )
        for teacher, mine in part.groupby("teacher", sort=False):
            ax.scatter(
                mine["teacher_latency_ms"].mean(),
                mine["teacher_score"].mean(),
                marker="*",
                s=120,
                color="black",
                label=f"teacher {teacher}",
            )
        ax.set(
            xscale="log",
            xlabel="latency at batch 1 (ms, log scale)",
            ylabel="dev score, mean ± std over seeds",
            title=f"{task_title(task)}: accuracy vs cost",
        )
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out / f"cost_{safe_name(task)}.png"
        save_png(fig, path)
        written.append(path)
    return written
