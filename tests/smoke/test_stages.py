"""A stage's settings act on that stage alone, and a new prediction-layer loss is a registry entry
and a YAML line: no code in the recipe or the step."""

from __future__ import annotations

import json

import torch

from kdbench.job import run
from kdbench.objectives.loss_entry import LossEntry
from kdbench.objectives.losses import LOSSES
from kdbench.recipes import task_specific
from tests.helpers import compose_config, tiny_overrides


def logged(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "train_log.jsonl").read_text().splitlines()]


def test_a_run_clips_gradients_only_in_the_stage_that_asks(tiny_glue, tmp_path, monkeypatch):
    clipped = []
    real = torch.nn.utils.clip_grad_norm_

    def spy(parameters, max_norm, *args, **kwargs):
        clipped.append(max_norm)
        return real(parameters, max_norm, *args, **kwargs)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy)
    clip = "stages.intermediate.optimizer.max_grad_norm=0.5"
    record = run(
        compose_config(tiny_overrides(tiny_glue, tmp_path / "run", "objective=att_kl", clip))
    )
    assert record["status"] == "completed"
    steps = {s["step"] for s in logged(tmp_path / "run") if s["stage"] == "intermediate"}
    assert clipped == [0.5] * len(steps) == [0.5] * 6  # 48 examples in batches of 8, one epoch


def logit_mse(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """Mean squared difference of the logits ([B, C] each)."""
    return (student_logits.float() - teacher_logits.float()).pow(2).mean()


def test_a_new_prediction_layer_loss_is_a_registry_entry_and_a_term(
    tiny_glue, tmp_path, monkeypatch
):
    monkeypatch.setitem(LOSSES, "logit_mse", LossEntry(logit_mse, ("logits",)))
    terms = "stages.prediction.objective.terms=[{loss: logit_mse, weight: 0.5}]"
    run_dir = tmp_path / "run"
    record = run(compose_config(tiny_overrides(tiny_glue, run_dir, "objective=vanilla_kd", terms)))
    assert record["status"] == "completed"
    prediction = [s for s in logged(run_dir) if s["stage"] == "prediction"]
    assert prediction and all(s["logit_mse"] == s["total"] for s in prediction)
    assert not [s for s in logged(run_dir) if s["stage"] == "intermediate"]  # vanilla KD: none


def test_tinybert_padding_pads_the_stage_s_batches_and_runs_its_teacher_each_step(
    tiny_glue, tmp_path, monkeypatch
):
    widths, tables = [], []
    real_step = task_specific._loss_step

    def watched_step(student, objective, teacher, plan):
        step = real_step(student, objective, teacher, plan)

        def watched(batch):
            widths.append((objective.padding, batch["input_ids"].shape[1]))
            return step(batch)

        return watched

    monkeypatch.setattr(task_specific, "_loss_step", watched_step)
    monkeypatch.setattr(task_specific, "teacher_feature_table", lambda *a: tables.append(a))
    padding = ("objective=tinybert", "stages.intermediate.padding=tinybert")
    record = run(compose_config(tiny_overrides(tiny_glue, tmp_path / "run", *padding)))
    assert record["status"] == "completed" and not tables  # its table has no padded positions
    assert record["config"]["stages"]["intermediate"]["padding"] == "tinybert"
    padded = {width for padding, width in widths if padding == "tinybert"}
    dynamic = {width for padding, width in widths if padding == "masked"}
    assert padded == {64} and dynamic and max(dynamic) < 64  # trainer=smoke: max_length 64
