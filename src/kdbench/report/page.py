"""``report.html``: the report as one self-contained page (styles and plots inline, no script, no
network).

The findings first (claims.md's opening), then the claims and their verdicts; then per (setting,
teacher, student) study its design and provenance, the measured table (each cell linking to the
records behind it), its cost, the published numbers beside it, its captioned plots and its
significance tables; then the evidence of each claim, evidence.md (the example-level tests and the
collapses) and the excluded runs. The markdown parts are the same text as claims.md, tables.md,
significance.md and evidence.md, rendered by markdown-it.
"""

from __future__ import annotations

import base64
import html
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
from markdown_it import MarkdownIt

from kdbench.report.frames import GROUP_COLS, ROW_COLS, code_versions
from kdbench.report.significance import family_section, significance_intro
from kdbench.report.stats import families
from kdbench.report.tables import DESCRIPTION, Table, body_cells, short_note
from kdbench.report.text import column_head
from kdbench.runtime.storage import atomic_write_text

if TYPE_CHECKING:
    from kdbench.report.claims_md import ClaimsText

PAGE_FILE = "report.html"
STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 1.5em auto; padding: 0 1em; \
color: #222; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.25em; border-bottom: 1px solid \
#ccc; }
h3 { font-size: 1.05em; } .meta { color: #555; font-size: 0.9em; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.85em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
table.measured td, table.measured th { text-align: right; }
table.measured td:first-child, table.measured th:first-child { text-align: left; }
tr:nth-child(even) { background: #f7f7f7; }
.seeds { display: block; font-size: 0.75em; color: #777; } .seeds a { color: #557; margin-right: \
0.2em; }
img { max-width: 100%; height: auto; margin: 0.5em 0; display: block; }
figure { margin: 0.8em 0; } figcaption { font-size: 0.85em; color: #555; }
nav a { margin-right: 1em; } .verdict-supported { color: #117733; } .verdict-contradicted { \
color: #AA3377; }
"""
_MARKDOWN = MarkdownIt("commonmark").enable("table")
CAPTIONS = {
    "scores": (
        "every seed's score (a cross: a run that predicts one class for at least 95% of the dev "
        "set), the cell's mean (bar) and its 95% t interval (line at its right), the paper's "
        "value where a published cell stands for it (diamond; a pointer with its value at the "
        "edge when off the axis), the fine-tuned teacher (dashed) and the majority class "
        "(dotted), written at the edge when off the axis; objectives grouped by family, one "
        "colour per objective (or init) in every report; * a cell significantly below the best of"
        " its group (per-task paired t-test, Holm)."
    ),
    "differences": (
        "mean paired difference row - column pooled over tasks (task ALL), one matrix per "
        "compared factor and held level, all on one symmetric colour scale; * and a frame: "
        "significant after Holm."
    ),
}


@dataclass
class PageParts:
    """What the page shows, as the other report files hold it."""

    results_dir: Path
    out: Path
    frame: pd.DataFrame
    tables: list[Table]
    pvalues: pd.DataFrame
    claims: ClaimsText
    versus: list[
        tuple[tuple, list[str]]
    ]  # (group, markdown lines) of the published-vs-measured sections
    excluded: list[dict]
    plots: dict[tuple[str, str, str], list[Path]]  # by group
    alpha: float
    digits: int
    name: str = ""  # the study's name
    walltimes: dict[tuple, list[str]] = field(default_factory=dict)  # wall-time lines per table key
    evidence: str = ""  # evidence.md's text: the example-level tests and the collapses


def markdown(lines: list[str]) -> str:
    """Markdown lines as HTML, every heading one level down (the page's own headings are h1 and
    h2)."""
    return _MARKDOWN.render(
        "\n".join("#" + line if line.startswith("#") else line for line in lines)
    )


def inline_image(path: Path) -> str:
    """The plot inline in a figure with its caption (what it shows, from its file name's kind)."""
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    caption = CAPTIONS["scores" if path.stem.startswith("scores_") else "differences"]
    return (
        f'<figure><img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{html.escape(path.name)}: {html.escape(caption)}</figcaption></figure>"
    )


def _verdict_colours(text: str) -> str:
    """Colours the verdict words of a rendered claims table."""
    for verdict in ("supported", "contradicted"):
        text = text.replace(f"<td>{verdict}</td>", f'<td class="verdict-{verdict}">{verdict}</td>')
    return text


def relative_link(target: Path, out: Path) -> str:
    """`target` as a link from a page in `out` (forward slashes on every system)."""
    return Path(os.path.relpath(target, out)).as_posix()


def record_links(part: pd.DataFrame, results_dir: Path, out: Path) -> str:
    """Links to the result.json of each seed of a cell, relative to the page."""
    targets = [
        link if isinstance(link, str) else path
        for path, link in zip(part["path"], part["link"], strict=True)
    ]
    links = [
        f'<a href="{html.escape(relative_link(results_dir / target, out))}">{seed}</a>'
        for seed, target in sorted(zip(part["seed"], targets, strict=True))
    ]
    return f'<span class="seeds">seeds {" ".join(links)}</span>' if links else ""


def measured_table(parts: PageParts, table: Table) -> str:
    """The measured table as HTML, each task cell followed by links to its records."""
    runs = parts.frame[
        (parts.frame[GROUP_COLS] == pd.Series(table.key, index=GROUP_COLS)).all(axis=1)
    ]
    by_cell = {key: part for key, part in runs.groupby(ROW_COLS + ["task"])}
    head = "".join(
        f"<th>{html.escape(h)}</th>" for h in column_head(table.columns, table.show_init)
    )
    rows = []
    labels = 2 if table.show_init else 1
    for row, cells in zip(
        table.rows,
        body_cells(table, parts.digits, html.escape, pm="±", bold="<b>{}</b>"),
        strict=True,
    ):
        for i, task in enumerate(table.tasks):
            cell = by_cell.get((*row, task))
            if cell is not None:
                cells[labels + i] += record_links(cell, parts.results_dir, parts.out)
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    body = "".join(rows)
    return f'<table class="measured"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _notes(table: Table) -> str:
    """What the measured table's cells are, what its cells short of the design lack (as tables.md
    says it) and what its scores were chosen on."""
    return " ".join(filter(None, [DESCRIPTION, short_note(table), table.chosen]))


def study_section(parts: PageParts, table: Table, index: int) -> str:
    runs = parts.frame[
        (parts.frame[GROUP_COLS] == pd.Series(table.key, index=GROUP_COLS)).all(axis=1)
    ]
    notes = sorted(runs["paper_note"].dropna().unique())
    design = f"Stands for the paper's design: {'; '.join(notes)}. " if notes else ""
    code = f"; code {code_versions(runs)}" if len(runs) else ""
    out = [
        f'<section id="study-{index}"><h2>{html.escape(table.title)}</h2>',
        f'<p class="meta">{html.escape(design)}{len(runs)} runs{html.escape(code)}.</p>',
        "<h3>Measured</h3>",
        measured_table(parts, table),
        f'<p class="meta">{html.escape(_notes(table))}</p>',
        "<h3>Wall time</h3>",
        markdown(parts.walltimes.get(table.key, [])),
    ]
    out += [markdown(lines) for group, lines in parts.versus if group == table.key]
    plots = parts.plots.get(table.key, [])
    if plots:
        out += ["<h3>Plots</h3>", *(inline_image(p) for p in plots)]
    mine = (
        parts.pvalues[
            (parts.pvalues[GROUP_COLS] == pd.Series(table.key, index=GROUP_COLS)).all(axis=1)
        ]
        if not parts.pvalues.empty
        else parts.pvalues
    )
    if not mine.empty:
        lines = [significance_intro(parts.alpha), ""]
        for head, part in families(mine):
            lines += [
                "#" + line
                if line.startswith("#")
                else line  # under the page's "Significance" heading
                for line in family_section(head, part, parts.alpha, parts.digits)
            ]
        out += ["<h3>Significance</h3>", markdown(lines)]
    return "\n".join(out) + "</section>"


def render_page(parts: PageParts) -> str:
    studies = [study_section(parts, table, i) for i, table in enumerate(parts.tables, start=1)]
    nav = " ".join(
        f'<a href="#study-{i}">{html.escape(t.title)}</a>'
        for i, t in enumerate(parts.tables, start=1)
    )
    excluded = [f"- `{row['path']}` ({row['kind']}): {row['reason']}" for row in parts.excluded]
    body = [
        f"<h1>kdbench report: {html.escape(parts.name)}</h1>",
        f'<p class="meta">{len(parts.frame)} runs; code '
        f"{html.escape(code_versions(parts.frame))}. The same numbers are in tables.md, claims.md, "
        "significance.md "
        "and the csv files beside this page.</p>",
        f'<nav><a href="#findings">Findings</a> <a href="#claims">Claims</a> {nav} '
        '<a href="#claims-detail">Evidence per claim</a> '
        '<a href="#evidence">Per-example evidence</a></nav>',
        '<section id="findings"><h2>Findings</h2>',
        markdown(parts.claims.findings[1:]),
        "</section>",
        '<section id="claims"><h2>The paper\'s claims, judged from these runs</h2>',
        _verdict_colours(markdown(parts.claims.summary)),
        '<p class="meta">How each verdict is reached, and when not to trust one: '
        '<a href="#claims-detail">below</a>.</p></section>',
        *studies,
        '<section id="claims-detail">',
        _verdict_colours(markdown(parts.claims.header + parts.claims.details)),
        "</section>",
        '<section id="evidence">',
        markdown(parts.evidence.splitlines()),
        "</section>",
    ]
    if excluded:
        body += ['<section id="excluded"><h2>Excluded runs</h2>', markdown(excluded), "</section>"]
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>kdbench report: {html.escape(parts.name)}</title><style>{STYLE}</style></head>"
        "<body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


LEAD = re.compile(r'<section id="lead">.*?</section>\n', re.S)


def add_lead(page: Path, title: str, lines: list[str]) -> None:
    """`page` (a written report.html) opening with a section of markdown `lines` under `title`,
    right after the page's own title (in place of one added before): the answer a caller drew from
    the report, such as `kdbench.advise`'s."""
    text = LEAD.sub("", page.read_text(encoding="utf-8"))
    head, title_end, rest = text.partition("</h1>\n")
    section = f'<section id="lead"><h2>{html.escape(title)}</h2>\n{markdown(lines)}</section>\n'
    atomic_write_text(page, head + title_end + section + rest)
