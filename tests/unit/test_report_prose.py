"""The figures written in the READMEs and docs are their reports' (kdbench.report.prose): every span
regenerates to what it holds, no p value or interval is written outside a span, and a span that
drifts from its report is found and rewritten; a figure of one task and of its dev examples."""

from __future__ import annotations

import re
from itertools import product
from pathlib import Path

import numpy as np
import pytest

from kdbench.records.predictions import split_arrays, write_predictions
from kdbench.report.prose import FIGURES, SPAN, figure, loose_figures, main, rewrite
from kdbench.report.prose_figures import Study
from tests.unit.report_helpers import write_run

ROOT = Path(__file__).resolve().parents[2]
PROSE = [ROOT / "README.md", ROOT / "docs" / "studies.md"]
PROSE += sorted(ROOT.glob("results/*/README.md"))
BLOCKS = {"table", "grid", "claims"}  # figures that are a table: on lines of their own
STUDIES: dict = {}  # each study's report, computed once for the module


@pytest.mark.parametrize("path", PROSE, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_figure_in_the_prose_is_its_reports(path: Path):
    text = path.read_text(encoding="utf-8")
    assert rewrite(text, ROOT, STUDIES) == text
    assert loose_figures(text) == []


@pytest.mark.parametrize("path", PROSE, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_figure_inside_a_paragraph_does_not_start_a_line(path: Path):
    """A line that starts with an HTML comment would end the paragraph in markdown."""
    for line in path.read_text(encoding="utf-8").splitlines():
        start = re.match(r"\s*<!-- kdbench [a-z0-9_.-]+: (\w+)", line)
        assert start is None or start[1] in BLOCKS, line


def test_the_study_reports_behind_the_readmes_with_figures_are_committed():
    named = {m["study"] for path in PROSE for m in SPAN.finditer(path.read_text(encoding="utf-8"))}
    assert named == {"mini_table1", "mini_table2", "mini_table3", "table3_power", "table3_general"}
    assert all((ROOT / "results" / name / "runs.jsonl").is_file() for name in named)


def test_a_drifted_figure_is_found_and_rewritten(tmp_path: Path, capsys):
    study = tmp_path / "results" / "mini"
    study.mkdir(parents=True)
    records = (ROOT / "results" / "table3_power" / "runs.jsonl").read_text(encoding="utf-8")
    (study / "runs.jsonl").write_text(records, encoding="utf-8")
    readme = study / "README.md"
    span = "<!-- kdbench mini: pair init vanilla_kd 1,2,3 2,4,6 -->"
    readme.write_text(f"Gain {span}+1.00 points<!-- /kdbench -->, p 0.5 by hand.\n")
    assert main([str(readme), "--check", "--root", str(tmp_path)]) == 1
    found = capsys.readouterr().out
    assert "stale figure pair init vanilla_kd 1,2,3 2,4,6" in found and "p 0.5" in found
    assert main([str(readme), "--root", str(tmp_path)]) == 0
    fixed = f"{span}+0.83 points (95% CI +0.41 to +1.25; n = 12; Holm p 0.0011)"
    assert fixed in readme.read_text()


def test_figures_are_documented_by_name():
    assert set(FIGURES) >= BLOCKS | {"pair", "tost", "interaction", "claim"}


def write_two_task_study(root: Path) -> None:
    """results/two/runs.jsonl: att_kl and vanilla_kd from 1,2,3 and 2,4,6 on rte and mrpc, seeds
    1-4; vanilla_kd at 1,2,3 scores seed + 2 more than the other cells on rte, 1 more on mrpc; on
    20 dev examples att_kl at 1,2,3 predicts all right, vanilla_kd at 1,2,3 the first 10."""
    study = root / "results" / "two"
    gold = np.zeros(20)
    lines = []
    for task, gain in (("rte", 2.0), ("mrpc", 1.0)):
        for objective, init, seed in product(
            ("att_kl", "vanilla_kd"), ("1,2,3", "2,4,6"), range(1, 5)
        ):
            lifted = objective == "vanilla_kd" and init == "1,2,3"
            folder = f"runs/{task}-{objective}-{init}-{seed}"
            path = write_run(
                study,
                task=task,
                objective=objective,
                init=init,
                seed=seed,
                name=folder,
                score=60.0 + seed + (gain + seed if lifted else 0.0),
                predictions="p.npz",
                score_metric="accuracy",
                run_dir=folder,
                student="3x384",
                teacher="minilm_l6",
            )
            right = np.arange(20) < (10 if lifted else 20)
            outputs = np.stack([right, ~right], axis=1).astype(float)
            write_predictions(path.parent / "p.npz", {"": split_arrays(outputs, gold)})
            lines.append(path.read_text())
    (study / "runs.jsonl").write_text("\n".join(lines) + "\n")


def test_a_figure_of_one_task_and_of_its_dev_examples(tmp_path: Path):
    write_two_task_study(tmp_path)
    study = Study(tmp_path / "results" / "two" / "runs.jsonl")
    one = figure(study, "pair init vanilla_kd 1,2,3 2,4,6 rte")
    assert one.startswith("+4.50 points (95% CI ") and "n = 4;" in one
    assert figure(study, "pair init vanilla_kd 1,2,3 2,4,6").startswith("+4.00 points")
    assert "n = 8;" in figure(study, "pair init vanilla_kd 1,2,3 2,4,6")
    assert figure(study, "interaction att_kl vanilla_kd 1,2,3 2,4,6 mrpc").startswith("-3.50")
    examples = figure(study, "examples init vanilla_kd 1,2,3 2,4,6 rte")
    assert examples.startswith("-50.00 points (95% CI ") and "n = 20;" in examples
    interaction = figure(study, "example_interaction att_kl vanilla_kd 1,2,3 2,4,6 rte")
    assert interaction.startswith("+50.00 points (95% CI ") and "n = 20;" in interaction


def test_a_mean_difference_of_exactly_0_is_not_called_no_effect(tmp_path: Path):
    for seed, (a, b) in enumerate(((70.0, 71.0), (72.0, 71.0), (70.5, 70.0), (70.0, 70.5)), 1):
        write_run(tmp_path, objective="att_kl", seed=seed, score=a)
        write_run(tmp_path, objective="hid_seq", seed=seed, score=b)
        write_run(tmp_path, objective="vanilla_kd", seed=seed, score=b - 3 + seed % 2)
    lines = [path.read_text() for path in sorted(tmp_path.rglob("result.json"))]
    (tmp_path / "runs.jsonl").write_text("\n".join(lines) + "\n")
    study = Study(tmp_path / "runs.jsonl")
    pooled = study.pvalues[study.pvalues["task"] == "ALL"]
    assert (pooled["diff"] == 0).sum() == 1 and (pooled["se"] > 0).all()
    text = figure(study, "seeds objective 4,8,12")
    assert "no effect)" not in text and "differs by exactly 0" not in text
    assert "1 pair's mean difference is exactly 0 on these seeds" in text


def test_the_sd_figure_of_equal_differences_gives_an_infinite_d_z(tmp_path: Path):
    for seed in range(1, 5):
        write_run(tmp_path, objective="att_kl", seed=seed, score=70.0 + seed)
        write_run(tmp_path, objective="hid_seq", seed=seed, score=69.0 + seed)
    lines = [path.read_text() for path in sorted(tmp_path.rglob("result.json"))]
    (tmp_path / "runs.jsonl").write_text("\n".join(lines) + "\n")
    study = Study(tmp_path / "runs.jsonl")
    assert figure(study, "sd objective 4,8,12 att_kl hid_seq") == "sd 0.00 points (d_z inf)"
