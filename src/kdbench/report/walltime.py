"""What each study's runs took beside what they scored: the student's parameter count, the wall time
per job, the seconds of each phase and the examples per second of each stage (the median over a
row's runs, from the records' ``wall_s``, ``timing`` and ``throughput``)."""

from __future__ import annotations

import pandas as pd

from kdbench.records.rates import RATE_SUFFIX
from kdbench.report.frames import GROUP_COLS, ROW_COLS
from kdbench.report.text import md_escape, md_row

NO_WALLTIME = "_Wall time: these records keep no wall times or parameter counts._"


def _median_of(entries: pd.Series, name: str) -> float | None:
    values = [t[name] for t in entries if isinstance(t, dict) and name in t]
    return float(pd.Series(values).median()) if values else None


def _names(entries: pd.Series) -> list[str]:
    """The entries' names in the order the records name them."""
    return list(dict.fromkeys(n for t in entries if isinstance(t, dict) for n in t))


def walltime_lines(frame: pd.DataFrame, key: tuple[str, str, str]) -> list[str]:
    """A markdown table per (objective, init) row of the study ``key``: parameters, jobs, median
    wall time per job, median seconds per phase (``timing``) and examples per second per stage
    (``throughput``), each unit in its column's heading."""
    runs = frame[(frame[GROUP_COLS] == pd.Series(key, index=GROUP_COLS)).all(axis=1)]
    if runs["wall_s"].isna().all() and runs["student_parameters"].isna().all():
        return [NO_WALLTIME, ""]
    phases, rates = _names(runs["timing"]), _names(runs["throughput"])
    head = ["Objective", "Init", "Student parameters", "Jobs", "Wall s per job"]
    head += [f"{n.removesuffix('_s')} s" for n in phases]
    head += [f"{n.removesuffix(RATE_SUFFIX).removesuffix('_examples')} examples/s" for n in rates]
    lines = [
        "Cost (median over the row's jobs: a job's wall time and each phase's in seconds, each "
        "stage's throughput in examples per second; tables built or read from the cache):",
        "",
        md_row(md_escape(h) for h in head),
        "|---|---|" + "---:|" * (len(head) - 2),
    ]
    for (objective, init), part in runs.groupby(ROW_COLS, sort=False):
        parameters = part["student_parameters"].dropna()
        cells = [
            md_escape(objective),
            md_escape(init),
            f"{int(parameters.iloc[0]):,}" if len(parameters) else "",
            str(len(part)),
            _number(part["wall_s"].median()),
        ]
        cells += [_number(_median_of(part["timing"], name)) for name in phases]
        cells += [_number(_median_of(part["throughput"], name)) for name in rates]
        lines.append(md_row(cells))
    return lines + [""]


def _number(value: float | None) -> str:
    return "" if value is None or pd.isna(value) else f"{value:.1f}"
