"""Figures of a committed report written into prose, so that a README cannot drift from its report.

Usage::

    python -m kdbench.report.prose FILE.md ... [--check] [--root DIR]

A span ``<!-- kdbench NAME: FIGURE ARGS -->text<!-- /kdbench -->`` in a markdown file stands for a
figure of study NAME (a results folder's name, in lower case), whose records are
``results/NAME/runs.jsonl`` under the root (the current folder by default): the text between the two
comments is regenerated from those records, as the report computes it (:data:`FIGURES` lists the
figures and their arguments). ``--check`` rewrites nothing: it lists every span whose text differs
from its figure, and every p value or confidence interval written outside a span, and exits 1 when
it finds any.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from kdbench.report.prose_figures import FIGURES, Study
from kdbench.runtime.storage import atomic_write_text

SPAN = re.compile(
    r"<!-- kdbench (?P<study>[a-z0-9_.-]+): (?P<figure>[^>]*?) -->(?P<text>.*?)<!-- /kdbench -->",
    re.S,
)
# A p value or a confidence interval written as a number: outside a span, a figure by hand.
LOOSE = re.compile(
    r"\b(?:p(?:_holm| \((?:Holm|TOST)\))?|CI)(?:\s*[=<]\s*|\s+)[<+-]?\d*\.?\d+(?:e-?\d+)?\b"
)


def figure(study: Study, spec: str) -> str:
    name, *args = spec.split()
    return FIGURES[name](study, *args)


def rewrite(text: str, root: Path, studies: dict | None = None) -> str:
    """``text`` with every span's text regenerated from its study's records under ``root``."""
    studies = {} if studies is None else studies

    def regenerate(match: re.Match) -> str:
        name = match["study"]
        if name not in studies:
            studies[name] = Study(root / "results" / name / "runs.jsonl")
        head = match.group(0)[: match.start("text") - match.start()]
        return f"{head}{figure(studies[name], match['figure'])}<!-- /kdbench -->"

    return SPAN.sub(regenerate, text)


def loose_figures(text: str) -> list[str]:
    """The p values and intervals written outside the spans of ``text``."""
    return LOOSE.findall(SPAN.sub("", text))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kdbench.report.prose", description=__doc__)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="rewrite nothing; list differences")
    parser.add_argument("--root", type=Path, default=Path("."), help="the folder holding results/")
    args = parser.parse_args(argv)
    studies: dict = {}
    problems = []
    for path in args.files:
        text = path.read_text(encoding="utf-8")
        fresh = rewrite(text, args.root, studies)
        if args.check:
            stale = [
                m["figure"]
                for m, n in zip(SPAN.finditer(text), SPAN.finditer(fresh))
                if m[0] != n[0]
            ]
            problems += [f"{path}: stale figure {s}" for s in stale]
            problems += [f"{path}: figure outside a span: {f}" for f in loose_figures(text)]
        elif fresh != text:
            atomic_write_text(path, fresh)
    print("\n".join(problems) or f"{len(args.files)} file(s): every figure is its report's")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
