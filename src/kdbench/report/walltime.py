"""What each study's runs took beside what they scored: the student's parameter count and the wall
time per job and per stage (the median over a row's runs, from the records' ``timing``)."""

from __future__ import annotations

import pandas as pd

from kdbench.report.frames import GROUP_COLS, ROW_COLS
from kdbench.report.text import md_escape, md_row

NO_WALLTIME = "_Wall time: these records keep no wall times or parameter counts._"


def _median_seconds(timings: pd.Series, name: str) -> float | None:
    values = [t[name] for t in timings if isinstance(t, dict) and name in t]
    return float(pd.Series(values).median()) if values else None


def walltime_lines(frame: pd.DataFrame, key: tuple[str, str, str]) -> list[str]:
    """A markdown table per (objective, init) row of the study ``key``: parameters, jobs, median
    wall time per job and per timing entry (seconds), in the order the records name them."""
    runs = frame[(frame[GROUP_COLS] == pd.Series(key, index=GROUP_COLS)).all(axis=1)]
    if runs["wall_s"].isna().all() and runs["student_parameters"].isna().all():
        return [NO_WALLTIME, ""]
    names = list(dict.fromkeys(n for t in runs["timing"] if isinstance(t, dict) for n in t))
    head = ["Objective", "Init", "Student parameters", "Jobs", "Wall s per job"] + [
        n.removesuffix("_s") for n in names
    ]
    lines = [
        "Cost (median over the row's jobs, seconds of wall time; tables built or read from the "
        "cache):",
        "",
        md_row(head),
        "|---|---|" + "---:|" * (len(head) - 2),
    ]
    for (objective, init), part in runs.groupby(ROW_COLS, sort=False):
        parameters = part["student_parameters"].dropna()
        cells = [
            md_escape(objective),
            md_escape(init),
            f"{int(parameters.iloc[0]):,}" if len(parameters) else "",
            str(len(part)),
            _seconds(part["wall_s"].median()),
        ]
        cells += [_seconds(_median_seconds(part["timing"], name)) for name in names]
        lines.append(md_row(cells))
    return lines + [""]


def _seconds(value: float | None) -> str:
    return "" if value is None or pd.isna(value) else f"{value:.1f}"
