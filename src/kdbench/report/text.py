"""Text shared by the rendered outputs: number formats, column headings and markdown table lines."""

from __future__ import annotations

import pandas as pd

from kdbench.report.paired import MAX_SEEDS
from kdbench.report.task_names import task_title


def fmt(value: float, digits: int) -> str:
    return f"{_rounded(value, digits):.{digits}f}"


def signed(value: float, digits: int) -> str:
    """`value` with its sign ("+0.4", "-1.2"); empty where it is missing."""
    return "" if pd.isna(value) else f"{_rounded(value, digits):+.{digits}f}"


def _rounded(value: float, digits: int) -> float:
    """`value` rounded to `digits`, a zero always positive (what the format's `z` option of
    Python 3.11 does): a difference that rounds to zero reads 0.0, never -0.0."""
    return round(value, digits) + 0.0


def level_text(alpha: float) -> str:
    """The confidence level of an interval at ``alpha`` as a percentage: 95% at 0.05."""
    return f"{100 * (1 - alpha):.4g}%"


def format_p(p: float) -> str:
    if pd.isna(p):
        return ""
    if p < 0.001:
        return "<0.001"
    return f"{p:.3f}"


def seeds_text(n: float) -> str:
    """``stats.seeds_needed`` as words: "12 pairs", or "over 1000 pairs" at its bound."""
    return f"over {MAX_SEEDS} pairs" if n >= MAX_SEEDS else f"{int(n)} pairs"


def md_escape(text: str) -> str:
    return str(text).replace("|", "\\|")


def md_row(cells) -> str:
    """One markdown table line from already escaped cells."""
    return "| " + " | ".join(cells) + " |"


def column_head(columns: list[str], show_init: bool) -> list[str]:
    """A score table's heading: the row labels, then each task's display name (other columns as they
    are)."""
    return ["Objective"] + (["Init"] if show_init else []) + [task_title(c) for c in columns]


def md_head(columns: list[str], show_init: bool) -> list[str]:
    """The heading and alignment lines of a markdown score table (labels left, numbers right)."""
    align = ["---"] * (2 if show_init else 1) + ["---:"] * len(columns)
    return [
        md_row(md_escape(h) for h in column_head(columns, show_init)),
        "|" + "|".join(align) + "|",
    ]
