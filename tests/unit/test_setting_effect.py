"""experiments/setting_effect.py pairs two sweeps' runs and tests their differences."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import experiment_script

NEW_TIMES = {"intermediate_s": 10.0, "prediction_s": 20.0}
EARLIER_TIMES = {"stage1_s": 10.0, "stage2_s": 20.0}  # the committed results' records


def _sweep(
    folder: Path,
    scores: dict[tuple[str, int], float],
    status: str = "completed",
    timing: dict = NEW_TIMES,
) -> Path:
    for (objective, seed), score in scores.items():
        run = folder / f"objective={objective},seed={seed}"
        run.mkdir(parents=True)
        record = {
            "status": status,
            "task": "sst2",
            "objective": objective,
            "init": "2,4,6",
            "seed": seed,
            "score": score,
            "timing": timing,
        }
        (run / "result.json").write_text(json.dumps(record))
    return folder


def test_runs_are_paired_by_objective_and_seed_and_their_differences_tested(tmp_path):
    a = _sweep(
        tmp_path / "a",
        {("att_kl", 1): 80.0, ("att_kl", 2): 81.0, ("hid_seq", 1): 79.0, ("hid_seq", 2): 78.5},
    )
    b = _sweep(
        tmp_path / "b",
        {
            ("att_kl", 1): 79.0,
            ("att_kl", 2): 80.5,
            ("hid_seq", 1): 78.0,
            ("hid_seq", 2): 78.0,
            ("hid_seq", 3): 50.0,
        },
        timing=EARLIER_TIMES,
    )  # unpaired: left out; records with the stages' earlier timing keys
    text = experiment_script("setting_effect").summary(a, b, ("grouped", "plain"))
    assert text.startswith("4 paired runs")
    overall = next(line for line in text.splitlines() if line.startswith("| every pair"))
    assert "| 4 | 79.62 | 78.88 | +0.75 " in overall  # mean differences 1.0, 0.5, 1.0, 0.5
    assert "| att_kl | 2 |" in text and "| intermediate_s | 10.0 | 10.0 | 1.00 |" in text
    assert "| prediction_s | 20.0 | 20.0 | 1.00 |" in text


def test_too_few_pairs_is_one_line(tmp_path):
    a = _sweep(tmp_path / "a", {("att_kl", 1): 80.0})
    b = _sweep(tmp_path / "b", {("att_kl", 1): 79.0})
    with pytest.raises(SystemExit, match="1 paired runs .* need at least 2"):
        experiment_script("setting_effect").summary(a, b, ("a", "b"))
