"""The teacher-features cache: stage 1 from cached features computes what a teacher forward at every
step does."""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path

import pytest
import torch

from kdbench.data.batches import make_loader
from kdbench.models.student import build_student
from kdbench.objectives.features import FeatureRecorder
from kdbench.teacher.features import teacher_feature_table, token_rows
from kdbench.training.steps import teacher_records_now
from tests.helpers import stage1_losses_and_grads, tiny_teacher_setup

OBJECTIVES = sorted(
    p.stem for p in (Path(__file__).parents[2] / "conf" / "objective").glob("*.yaml")
)


def test_token_rows_of_a_batch_follow_its_examples():
    offsets = torch.tensor([0, 3, 5, 9])  # examples of 3, 2 and 4 tokens
    rows = token_rows(offsets, torch.tensor([2, 0]), torch.tensor([4, 3]))
    assert rows.tolist() == [5, 6, 7, 8, 0, 1, 2]


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_stage1_from_cached_features_gives_the_losses_and_gradients_of_a_teacher_forward(
    objective, tiny_glue, tmp_path
):
    plan, tokenizer, train_set, loader, teacher = tiny_teacher_setup(
        tiny_glue, tmp_path, f"objective={objective}"
    )
    if not plan.terms:
        pytest.skip(f"{objective} has no stage 1")
    batches = list(loader)[:3]
    assert any(
        bool((b["attention_mask"] == 0).any()) for b in batches
    )  # padding is part of the comparison
    features = partial(teacher_feature_table, teacher, train_set, tokenizer, plan, None)
    runs = []
    for table in (None, features):
        student = build_student(
            plan.teacher_conf, plan.student, plan.num_labels, seed=1
        ).eval()  # no dropout
        runs.append(
            stage1_losses_and_grads(
                plan, student, teacher.model, train_set["labels"], batches, table
            )
        )
    for (losses, grads, *_), (c_losses, c_grads, *_) in zip(*runs, strict=True):
        assert losses.keys() == c_losses.keys() and grads.keys() == c_grads.keys()
        assert all(torch.allclose(losses[k], c_losses[k], rtol=1e-5, atol=1e-6) for k in losses), (
            losses,
            c_losses,
        )
        assert all(torch.allclose(grads[n], c_grads[n], rtol=1e-4, atol=1e-6) for n in grads)


@pytest.mark.parametrize(("store", "passes", "entries"), [("disk", 1, 1), ("memory", 2, 0)])
def test_the_teacher_runs_once_for_every_epoch_and_for_the_runs_its_store_serves(
    tiny_glue, tmp_path, monkeypatch, store, passes, entries
):
    """Two runs of two epochs: one pass of the teacher over the data when the first run's table is
    a disk cache entry the second reads; one pass per run when each keeps its table in memory."""
    plan, tokenizer, train_set, loader, teacher = tiny_teacher_setup(
        tiny_glue,
        tmp_path,
        "objective=att_kl+val_kl",
        f"paths.cache_dir={tmp_path / 'cache'}",
        f"trainer.teacher_features_store={store}",
    )
    features = partial(teacher_feature_table, teacher, train_set, tokenizer, plan, None)
    calls = []
    forward = teacher.model.forward
    monkeypatch.setattr(
        teacher.model, "forward", lambda *a, **k: calls.append(1) or forward(*a, **k)
    )
    for seed in (1, 2):  # two runs, two passes over the data each
        student = build_student(plan.teacher_conf, plan.student, plan.num_labels, seed=seed)
        stage1_losses_and_grads(
            plan, student, teacher.model, train_set["labels"], list(loader) * 2, features
        )
    batches = make_loader(train_set, tokenizer, plan.trainer.eval_batch_size, shuffle=False)
    assert len(calls) == passes * len(batches)
    assert len(list((plan.cache_dir / "teacher_features").glob("*.pt"))) == entries


def test_features_over_the_budget_are_not_cached(tiny_glue, tmp_path, caplog):
    plan, tokenizer, train_set, _, teacher = tiny_teacher_setup(
        tiny_glue,
        tmp_path,
        "objective=hid_seq",
        "trainer.teacher_features_gib=0",
        f"paths.cache_dir={tmp_path}",
    )
    with caplog.at_level(logging.INFO, logger="kdbench"):
        table = teacher_feature_table(
            teacher, train_set, tokenizer, plan, None, {1: {"hidden"}}, 1, None
        )
    assert table is None
    assert "more than trainer.teacher_features_gib=0" in caplog.text
    assert not (plan.cache_dir / "teacher_features").exists()


def test_a_teacher_forward_gives_records_autograd_may_save(tiny_glue, tmp_path):
    plan, _, _, loader, teacher = tiny_teacher_setup(tiny_glue, tmp_path)
    with FeatureRecorder(teacher.model, {1: {"query", "key", "hidden"}}, 1) as recorder:
        records = teacher_records_now(recorder, None, plan.device, "fp32")(next(iter(loader)))
    assert records[1].keys() == {"query", "key", "hidden"}
    assert not any(
        t.is_inference() for t in records[1].values()
    )  # inference tensors cannot be saved for backward
