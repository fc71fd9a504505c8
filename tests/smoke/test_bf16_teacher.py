"""A bf16 run keeps its frozen teacher in bf16 weights (cast once, after the student copied its
layers and after the fine-tuned teacher was saved in fp32); the record says the precision that
ran."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from kdbench.job import run
from kdbench.recipes import task_agnostic, task_specific
from tests.helpers import agnostic_overrides, compose_config, tiny_overrides, write_tiny_corpus


def dtypes(model) -> set[torch.dtype]:
    return {param.dtype for param in model.parameters()}


def test_a_bf16_run_distils_from_a_bf16_teacher_saved_in_fp32(tiny_glue, tmp_path, monkeypatch):
    seen = {}
    real = task_specific.stage_step

    def spy(plan, stage, student, teacher, *args):
        seen.update(teacher=dtypes(teacher), student=dtypes(student))
        return real(plan, stage, student, teacher, *args)

    monkeypatch.setattr(task_specific, "stage_step", spy)
    cache = tmp_path / "cache"
    overrides = tiny_overrides(
        tiny_glue,
        tmp_path / "run",
        "trainer.precision=bf16",
        "objective=att_kl",
        f"paths.cache_dir={cache}",
    )
    record = run(compose_config(overrides))
    assert record["status"] == "completed"
    assert (record["precision"], record["tf32"]) == ("bf16", False)
    assert seen == {"teacher": {torch.bfloat16}, "student": {torch.float32}}
    saved = load_file(next((cache / "teachers").glob("*/model.safetensors")))
    assert {t.dtype for t in saved.values() if t.is_floating_point()} == {torch.float32}
    assert all(torch.isfinite(torch.tensor(value)) for value in record["metrics"].values())


def test_a_bf16_task_agnostic_run_keeps_its_teacher_in_bf16(tmp_path, monkeypatch):
    seen = {}
    real = task_agnostic.teacher_records_now

    def spy(recorder, *args):
        seen["teacher"] = dtypes(recorder.model)
        return real(recorder, *args)

    monkeypatch.setattr(task_agnostic, "teacher_records_now", spy)
    corpus = write_tiny_corpus(tmp_path / "corpus")
    overrides = agnostic_overrides(
        corpus,
        tmp_path / "run",
        "objective=distilbert",
        "trainer.precision=bf16",
        "stages.distillation.steps=2",
    )
    record = run(compose_config(overrides))
    assert record["status"] == "completed" and record["precision"] == "bf16"
    assert seen["teacher"] == {torch.bfloat16}
    assert all(torch.isfinite(torch.tensor(value)) for value in record["metrics"].values())


@pytest.mark.parametrize("precision", ["auto", "fp32"])
def test_a_cpu_run_records_fp32_without_tf32(tiny_glue, tmp_path, precision):
    overrides = tiny_overrides(
        tiny_glue,
        tmp_path,
        f"trainer.precision={precision}",
        "stages.intermediate.epochs=0",
        "stages.prediction.epochs=0",
        "stages.teacher.epochs=0",
    )
    record = run(compose_config(overrides))
    assert (record["precision"], record["tf32"]) == ("fp32", False)
