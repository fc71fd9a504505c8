"""The committed reports regenerate from their runs.jsonl alone, and no output names a path of the
machine.

Every file regenerates byte for byte except the CSV files' unrounded floats, compared to 1e-9
relative: the example-level bootstrap's sums are matrix products, which BLAS rounds in the last
bits differently on CPUs of different vector widths (its full-split differences moved by 1e-15
relative between two machines of the same commit). What a reader sees (the tables, the pages, the
plots) is rounded and regenerates byte for byte."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from kdbench.report.cli import main

RESULTS = Path(__file__).resolve().parents[2] / "results"
KEPT = {
    "README.md",
    "DESIGN.md",
    "runs.jsonl",
    "runs",
}  # written by hand (DESIGN.md before the first job), or by experiments/runs_from_*.py (runs/:
# the per-example predictions its records name)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mini_table1", "table3_power", "table3_general"])
def test_a_committed_report_regenerates_from_its_runs_jsonl(name: str, tmp_path: Path):
    folder = RESULTS / name
    out = tmp_path / name  # the same name (the page's title is the study's), the records beside it
    out.mkdir()
    shutil.copy(folder / "runs.jsonl", out)
    if (folder / "runs").is_dir():
        shutil.copytree(folder / "runs", out / "runs")
    assert main([str(out / "runs.jsonl"), "--out", str(out), "--paper"]) == 0
    committed = sorted(p.name for p in folder.iterdir() if p.name not in KEPT)
    assert sorted(p.name for p in out.iterdir() if p.name not in KEPT) == committed
    for file in committed:  # PNGs too: the plots are drawn without timestamps, byte-stable
        if file.endswith(".csv"):
            regenerated, kept = pd.read_csv(out / file), pd.read_csv(folder / file)
            pd.testing.assert_frame_equal(regenerated, kept, check_exact=False, rtol=1e-9, obj=file)
        else:
            assert (out / file).read_bytes() == (folder / file).read_bytes(), file


@pytest.mark.parametrize(
    "name",
    [
        "mini_table1",
        "mini_table2",
        "mini_table3",
        "table3_power",
        "table3_general",
        "advise_paraphrase",
    ],
)
def test_no_committed_output_names_an_absolute_path(name: str):
    for path in (RESULTS / name).rglob("*"):
        if path.suffix in {".md", ".csv", ".html", ".tex", ".json", ".jsonl"}:
            text = path.read_text(encoding="utf-8")
            assert not re.search(r"(?<![\w.])/(work|tmp|home|root|Users)/", text), path


def test_no_generated_output_names_an_absolute_path(tmp_path: Path):
    from tests.unit.report_helpers import write_three_objectives

    results = write_three_objectives(tmp_path / "results")
    out = tmp_path / "out"
    assert main([str(results), "--out", str(out)]) == 0
    for path in out.iterdir():
        if path.suffix != ".png":
            assert str(tmp_path) not in path.read_text(encoding="utf-8"), path
