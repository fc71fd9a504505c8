"""`BestDev`: a model's dev evaluations while it trains, the best first metric's step, metrics
and weights kept (on disk, across a restart) and loaded back at the end."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch

from kdbench.records.steplog import StepLog
from kdbench.training.best import BestDev

# the dev accuracy after each of 6 steps: best at step 4, not at the end
ACCURACY = {2: 60.0, 4: 75.0, 6: 70.0}


class Scripted:
    """A one-weight model whose weight is the step it reached, scored by `ACCURACY`."""

    def __init__(self):
        self.model = torch.nn.Linear(1, 1, bias=False)

    def at(self, step: int) -> None:
        with torch.no_grad():
            self.model.weight.fill_(step)

    def score(self) -> dict:
        step = int(self.model.weight.item())
        return {"accuracy": ACCURACY.get(step, 0.0), "f1": step}


def progress(step: int, total: int = 6, batch: int = 1) -> SimpleNamespace:
    return SimpleNamespace(
        step=step,
        epoch=0,
        batch=batch,
        finished=step >= total,
        stage=SimpleNamespace(name="prediction"),
    )


def trained(hook: BestDev, scripted: Scripted, steps: range) -> None:
    """`steps` of a stage of 6, as the loop calls the hook (from a restart where `steps` starts
    after 1)."""
    hook.on_start(progress(steps.start - 1))
    for step in steps:
        scripted.at(step)
        hook.on_step(progress(step))
    hook.on_end(progress(steps.stop - 1))


def test_the_best_evaluation_is_kept_and_its_weights_loaded_back(tmp_path):
    scripted, log = Scripted(), StepLog(tmp_path / "log.jsonl")
    store = tmp_path / "best.pt"
    hook = BestDev(
        scripted.score,
        scripted.model,
        store,
        every=2,
        keep_weights=True,
        log=(log, "student_dev"),
    )
    trained(hook, scripted, range(1, 7))
    assert (hook.step, hook.metrics) == (4, {"accuracy": 75.0, "f1": 4})
    assert scripted.model.weight.item() == 4.0  # the end holds step 4's weights
    rows = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [(row["step"], row["accuracy"]) for row in rows] == [(2, 60.0), (4, 75.0), (6, 70.0)]
    assert {row["stage"] for row in rows} == {"student_dev"}
    assert hook.scored("prediction") == {
        "checkpoint": "best",
        "stage": "prediction",
        "step": 4,
        "eval_every": 2,
        "selected_by": "accuracy on the dev set(s) the metrics report",
    }


def test_a_restarted_stage_keeps_the_evaluations_before_it(tmp_path):
    scripted, store = Scripted(), tmp_path / "best.pt"
    first = BestDev(scripted.score, scripted.model, store, every=2, keep_weights=True)
    trained(first, scripted, range(1, 5))  # stopped after step 4 (on_end at 4: not finished)
    again = BestDev(scripted.score, scripted.model, store, every=2, keep_weights=True)
    trained(again, scripted, range(5, 7))
    assert (again.step, again.metrics["accuracy"], scripted.model.weight.item()) == (4, 75.0, 4.0)


def test_a_fresh_start_drops_what_an_earlier_start_kept(tmp_path):
    scripted, store = Scripted(), tmp_path / "best.pt"
    trained(BestDev(scripted.score, scripted.model, store, every=2), scripted, range(1, 7))
    hook = BestDev(lambda: {"accuracy": 10.0}, scripted.model, store)  # worse than step 4's
    trained(hook, scripted, range(1, 7))
    assert (hook.step, hook.metrics) == (6, {"accuracy": 10.0})


def test_without_evaluations_during_training_the_last_step_is_scored(tmp_path):
    scripted = Scripted()
    written, kept = tmp_path / "latest.npz", tmp_path / "kept.npz"

    def score():
        written.write_text(str(int(scripted.model.weight.item())))
        return scripted.score()

    hook = BestDev(score, scripted.model, tmp_path / "best.pt", predictions=(written, kept))
    trained(hook, scripted, range(1, 7))
    assert hook.scored("prediction") == {"checkpoint": "last", "stage": "prediction", "step": 6}
    assert hook.metrics["accuracy"] == 70.0 and hook.seconds > 0
    assert kept.read_text() == "6" and not written.exists()


def test_epoch_evaluations_score_the_last_epoch_once(tmp_path):
    scripted, calls = Scripted(), []

    def score():
        calls.append(int(scripted.model.weight.item()))
        return scripted.score()

    hook = BestDev(score, scripted.model, tmp_path / "best.pt", at_epochs=True)
    hook.on_start(progress(0))
    for step in range(1, 7):
        scripted.at(step)
        hook.on_step(progress(step))
        if step % 3 == 0:
            hook.on_epoch_end(progress(step))
    hook.on_end(progress(6))
    assert calls == [3, 6] and hook.step == 6


def counted(scripted: Scripted, calls: list):
    """`scripted.score`, noting the step each evaluation scores."""

    def score():
        calls.append(int(scripted.model.weight.item()))
        return scripted.score()

    return score


def test_a_resumed_stage_scores_its_step_again_where_an_evaluation_was_due(tmp_path):
    scripted, calls, store = Scripted(), [], tmp_path / "best.pt"
    first = BestDev(counted(scripted, calls), scripted.model, store, every=2)
    first.on_start(progress(0))
    for step in (1, 2, 3, 4):
        scripted.at(step)
        if step < 4:  # a stop cut step 4's evaluation short; step 4 was checkpointed
            first.on_step(progress(step))
    again = BestDev(counted(scripted, calls), scripted.model, store, every=2)
    trained(again, scripted, range(5, 7))
    assert calls == [2, 4, 6] and (again.step, again.metrics["accuracy"]) == (4, 75.0)


@pytest.mark.parametrize(("batch", "scored"), [(0, [3]), (1, [])])
def test_a_stage_resumed_at_an_epoch_s_end_scores_that_epoch_again(tmp_path, batch, scored):
    scripted, calls = Scripted(), []
    hook = BestDev(counted(scripted, calls), scripted.model, tmp_path / "best.pt", at_epochs=True)
    scripted.at(3)
    hook.on_start(progress(3, batch=batch))  # batch 0: checkpointed at the epoch's end
    assert calls == scored


def test_a_nan_score_is_never_better_than_a_number(tmp_path):
    scores = {1: math.nan, 2: 50.0, 3: math.nan, 4: 90.0, 5: math.nan, 6: 70.0}
    scripted = Scripted()

    def score():  # the Pearson correlation of a constant prediction is NaN
        return {"pearson": scores[int(scripted.model.weight.item())]}

    hook = BestDev(score, scripted.model, tmp_path / "best.pt", every=1)
    trained(hook, scripted, range(1, 7))
    assert (hook.step, hook.metrics) == (4, {"pearson": 90.0})
