"""The student's best dev checkpoint (`trainer.student_best_checkpoint`, TinyBERT's released
prediction stage): evaluated every `stages.prediction.eval_every` steps, the best evaluation's
weights and metrics are what the run reports, and the record says so."""

from __future__ import annotations

import json

import pytest
import torch

from kdbench.errors import ConfigError
from kdbench.job import run
from kdbench.planning.plan import make_plan
from kdbench.records.predictions import read_predictions
from tests.faults.test_resume import Crash, crash_at
from tests.helpers import compose_config, tiny_overrides

# At this high lr the tiny student's dev accuracy peaks mid-stage (step 9 of 18), then falls.
PEAKING = (
    "objective=vanilla_kd",
    "stages.teacher.epochs=8",
    "stages.teacher.optimizer.lr=2e-2",
    "trainer.teacher_best_checkpoint=true",
    "stages.prediction.epochs=3",
    "stages.prediction.optimizer.lr=1e-2",
)
BEST = ("trainer.student_best_checkpoint=true", "stages.prediction.eval_every=3")


def dev_scores(run_dir) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (run_dir / "train_log.jsonl").read_text().splitlines()]
    return [(row["step"], row["accuracy"]) for row in rows if row["stage"] == "student_dev"]


def saved_student_accuracy(plan, folder) -> float:
    """The accuracy of the student saved in `folder` on the dev set, evaluated anew."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from kdbench.data.batches import eval_loaders
    from kdbench.data.glue import dev_sets
    from kdbench.training.evaluate import evaluate

    model = AutoModelForSequenceClassification.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    sets = dev_sets(plan.task, plan.data, tokenizer, plan.trainer.max_length)
    loaders = eval_loaders(sets, tokenizer, 32, plan.loading)
    return evaluate(model, loaders, plan.task.metrics, torch.device("cpu"), "fp32")["accuracy"]


def test_the_best_dev_evaluation_is_scored_with_its_weights(tiny_glue, tmp_path):
    cfg = compose_config(tiny_overrides(tiny_glue, tmp_path, *PEAKING, *BEST, "save_student=true"))
    record = run(cfg)
    scores = dev_scores(tmp_path)
    assert [step for step, _ in scores] == [3, 6, 9, 12, 15, 18]
    best = max(score for _, score in scores)
    assert scores[-1][1] < best  # the last step is worse: a last-step score would differ
    assert record["metrics"]["accuracy"] == best
    assert record["scored"] == {
        "checkpoint": "best",
        "stage": "prediction",
        "step": next(step for step, score in scores if score == best),  # the first of equals
        "eval_every": 3,
        "selected_by": "accuracy on the dev set(s) the metrics report",
    }
    assert saved_student_accuracy(make_plan(cfg), tmp_path / "student") == best
    kept = read_predictions(tmp_path / record["predictions"])[""]
    assert 100 * (kept["predicted"] == kept["gold"]).mean() == pytest.approx(best)
    assert sorted(p.name for p in tmp_path.glob("*.npz")) == ["predictions.npz"]


def test_without_it_the_last_step_is_scored(tiny_glue, tmp_path):
    record = run(compose_config(tiny_overrides(tiny_glue, tmp_path, *PEAKING)))
    assert dev_scores(tmp_path) == [(18, record["metrics"]["accuracy"])]
    assert record["scored"] == {"checkpoint": "last", "stage": "prediction", "step": 18}


def test_a_resumed_prediction_stage_keeps_the_best_evaluation_before_its_checkpoint(
    tiny_glue, tmp_path, monkeypatch
):
    """Killed at step 11, after the best evaluation (step 9) and the checkpoint of step 10: the
    resumed stage reports step 9's evaluation, kept on disk."""
    reference = run(compose_config(tiny_overrides(tiny_glue, tmp_path / "ref", *PEAKING, *BEST)))
    overrides = tiny_overrides(
        tiny_glue, tmp_path / "run", *PEAKING, *BEST, "trainer.checkpoint_every=10"
    )
    crash_at(monkeypatch, "prediction", 11)
    with pytest.raises(Crash):
        run(compose_config(overrides))
    monkeypatch.undo()
    resumed = run(compose_config(overrides))
    assert [step for step, _ in dev_scores(tmp_path / "run")] == [3, 6, 9, 12, 15, 18]
    assert (resumed["metrics"], resumed["scored"]) == (reference["metrics"], reference["scored"])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ("trainer.student_best_checkpoint=true",),
            r"^trainer.student_best_checkpoint=true chooses among the student's evaluations every "
            r"stages.prediction.eval_every steps, which is 0: set stages.prediction.eval_every=50",
        ),
        (
            (*BEST, "stages.prediction.epochs=0"),
            r"^trainer.student_best_checkpoint=true chooses among the prediction stage's "
            r"evaluations, and stages.prediction does not distil",
        ),
    ],
)
def test_a_best_checkpoint_without_evaluations_to_choose_among_is_refused(
    tiny_glue, tmp_path, overrides, message
):
    with pytest.raises(ConfigError, match=message):
        make_plan(compose_config(tiny_overrides(tiny_glue, tmp_path, *overrides)))
