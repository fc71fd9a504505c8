"""`python -m kdbench.advise` end to end on a user's CSV with the tiny teacher: the calibration, the
design printed and written before the pilot's first job, the pilot's sweep, the decision, and the
answer shipped as a student that loads with `pipeline`, its model card carrying the evidence."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from datetime import datetime

import pytest

from kdbench.advise.decide import CHEAPEST, UNDECIDED, WINNER
from kdbench.advise.pages import CARD_HEADING
from kdbench.report.collapse import HEALTHY, collapse_status
from tests.helpers import write_user_data

pytestmark = pytest.mark.slow


def advise(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "kdbench.advise", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=dict(os.environ, HYDRA_FULL_ERROR="0"),
        timeout=900,
    )


def started(record: dict) -> float:
    stamp = record["provenance"]["started_at"]
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S%z").timestamp()


def test_a_pilot_on_a_user_csv_decides_and_ships_the_answer(tmp_path):
    from transformers import pipeline

    data = write_user_data(tmp_path / "data", train=40, dev=40)
    out = tmp_path / "advice"
    command = (
        "task=custom",
        f"task.train_file={data['csv']}",
        f"task.validation_file={data['csv_dev']}",
        "task.text_columns=[review]",
        "task.label_column=sentiment",
        "teacher=tiny",
        "student=tiny",
        "trainer=smoke",
        # a teacher and students that learn the reviews in a few steps (at smoke's one epoch
        # and the task's lr every pilot run predicts one class, and the pilot stops)
        "task.lr=1e-2",
        "stages.teacher.epochs=6",
        "stages.prediction.epochs=4",
        "advise.budget=20m",
        "advise.candidates=[vanilla_kd@every_kth,att_kl+val_kl@every_kth]",
        "advise.max_seeds=3",
        f"advise.out={out}",
    )
    result = advise(*command, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "calibration: one short job per objective on 40 examples, timed" in result.stdout
    plan = result.stdout.split("kdbench.advise: the pilot for custom, tiny -> tiny")[1]
    assert "cells (2): vanilla_kd@2,4, att_kl+val_kl@2,4" in plan
    assert "pilot: 40 of 40 training examples" in plan and "projected: " in plan

    records = [json.loads(p.read_text()) for p in (out / "pilot").glob("*/result.json")]
    cells = {(r["objective"], r["init"]) for r in records}
    assert cells == {("vanilla_kd", "2,4"), ("att_kl+val_kl", "2,4")}
    assert sorted(r["seed"] for r in records) == [1, 1, 2, 2, 3, 3]
    assert all(
        r["status"] == "completed" and r["config"]["data"]["train_limit"] == 40 for r in records
    )
    learned = [collapse_status(r["metrics"], r["score_metric"]) == HEALTHY for r in records]
    assert any(learned)  # the pilot compares runs that learned the task
    # the design and its rule, written before the pilot's first job
    design = out / "DESIGN.md"
    assert "## Decision rule" in design.read_text()
    assert design.stat().st_mtime <= min(map(started, records)) + 1
    ledger = [json.loads(line) for line in (out / "ledger.jsonl").read_text().splitlines()]
    (registered,) = [entry for entry in ledger if entry["step"] == "design"]
    assert registered["sha256"] == hashlib.sha256(design.read_bytes()).hexdigest()

    decision = json.loads((out / "decision.json").read_text())
    assert decision["kind"] in (WINNER, CHEAPEST, UNDECIDED)
    objective, init = decision["chosen"].split("@")
    (final,) = (out / "final").glob("*/result.json")
    shipped = json.loads(final.read_text())
    assert (shipped["objective"], shipped["init"], shipped["config"]["data"]["train_limit"]) == (
        objective,
        init,
        None,
    )
    advice = (out / "advice.md").read_text().splitlines()
    assert advice[0] == "# Advice: custom, tiny -> tiny"
    assert advice[2].startswith(("**Answer: ", "**No decision within the budget.**"))
    page = (out / "report" / "report.html").read_text()
    opening = page.split("</h1>\n")[1]
    assert opening.startswith('<section id="lead"><h2>Advice: custom, tiny -&gt; tiny</h2>')
    assert opening.index("<strong>") < opening.index('<section id="findings">')
    assert f"{shipped['score']:.2f} on the full training set" in "\n".join(advice)

    student = final.parent / "student"
    card = (student / "README.md").read_text()
    assert card.count(CARD_HEADING) == 1 and "| cell | mean | std | seeds |" in card
    classifier = pipeline("text-classification", model=str(student))
    assert {p["label"] for p in classifier(["a good movie", "awful plot"])} <= {"neg", "pos"}

    # the same command again resumes: the design kept, every job skipped, the same pages
    runs = {p: p.read_text() for p in out.glob("*/*/result.json")}
    decided = (out / "decision.json").read_text()
    pages = {name: (out / name).read_bytes() for name in ("advice.md", "report/report.html")}
    again = advise(*command, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming the pilot designed in {out / 'DESIGN.md'}" in again.stdout
    assert {p: p.read_text() for p in out.glob("*/*/result.json")} == runs
    assert (out / "decision.json").read_text() == decided
    assert {name: (out / name).read_bytes() for name in pages} == pages  # its times too
    assert (out / "report" / "report.html").read_text().count('<section id="lead">') == 1
