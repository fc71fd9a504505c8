"""The fast paths compute what the straightforward ones do: cached teacher logits, length-grouped
batches, compiled blocks, recomputed attention, the attention-map losses with their gradient formed
in the forward pass, forwards stopped at the last needed projection."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from kdbench.data.batches import SeededBatches
from kdbench.models.attention import RECOMPUTED_SDPA, prepare_for_training
from kdbench.models.compilation import compile_blocks
from kdbench.models.student import build_student
from kdbench.objectives.features import FeatureRecorder
from kdbench.planning.plan import make_plan
from kdbench.recipes.task_specific import stage_step
from kdbench.teacher.logits import LogitsRows, teacher_logits_table
from kdbench.training.steps import model_inputs
from tests.helpers import (
    assert_same_losses_and_grads,
    compose_config,
    stage1_losses_and_grads,
    tiny_models,
    tiny_overrides,
    tiny_teacher_setup,
)


def test_cached_teacher_logits_equal_a_teacher_forward(tiny_glue, tmp_path):
    plan, tokenizer, train_set, loader, teacher = tiny_teacher_setup(tiny_glue, tmp_path)
    table = teacher_logits_table(teacher, train_set, tokenizer, plan)
    for batch in loader:
        with torch.no_grad():
            direct = teacher.model(**model_inputs(batch, teacher.model)).logits
        assert torch.allclose(table[batch["example"]], direct, atol=1e-5)


def test_teacher_logits_are_computed_once(tiny_glue, tmp_path, monkeypatch):
    plan, tokenizer, train_set, _, teacher = tiny_teacher_setup(tiny_glue, tmp_path)
    first = teacher_logits_table(teacher, train_set, tokenizer, plan)
    monkeypatch.setattr(
        teacher.model,
        "forward",
        lambda *a, **k: (_ for _ in ()).throw(AssertionError("recomputed")),
    )
    assert torch.equal(teacher_logits_table(teacher, train_set, tokenizer, plan), first)


def test_the_prediction_stage_loss_is_the_same_with_cached_logits(tiny_glue, tmp_path):
    plan, tokenizer, train_set, loader, teacher = tiny_teacher_setup(tiny_glue, tmp_path)
    table = LogitsRows(teacher_logits_table(teacher, train_set, tokenizer, plan))
    student = build_student(plan.teacher_conf, plan.student, plan.num_labels, seed=0).eval()
    stage, labels, batch = (
        plan.stages["prediction"],
        torch.zeros(len(train_set)),
        next(iter(loader)),
    )
    with stage_step(plan, stage, student, teacher.model, labels, lambda *_: table) as (cached, _):
        from_table = cached(batch)["total"]
    with stage_step(plan, stage, student, teacher.model, labels) as (direct, _):
        assert torch.allclose(from_table, direct(batch)["total"], atol=1e-6)


def test_length_grouped_batches_cover_every_example_once_and_waste_less_padding():
    lengths = torch.randint(5, 120, (1000,), generator=torch.Generator().manual_seed(0))
    grouped = SeededBatches(lengths, 16, shuffle=True, seed=3, group_by_length=True)
    plain = SeededBatches(lengths, 16, shuffle=True, seed=3)
    for epoch in (0, 1):
        batches = grouped.batches(epoch)
        assert sorted(i for b in batches for i in b) == list(range(1000))
    padded = lambda batches: sum(len(b) * max(lengths[b].tolist()) for b in batches)  # noqa: E731
    assert padded(grouped.batches(0)) < 0.7 * padded(plain.batches(0))
    assert grouped.batches(0) != grouped.batches(1)  # reshuffled each epoch, seeded
    assert grouped.batches(0) == SeededBatches(
        lengths, 16, shuffle=True, seed=3, group_by_length=True
    ).batches(0)


def test_evaluation_batches_are_sorted_by_length():
    lengths = torch.tensor([3, 9, 1, 7, 5])
    assert SeededBatches(lengths, 2, shuffle=False).batches(0) == [[1, 3], [4, 0], [2]]


@pytest.mark.slow
def test_compiled_blocks_give_the_same_losses_and_gradients(tiny_glue, tmp_path):
    """trainer.compile: torch.compile'd blocks, hooks still reading features and stopping the
    forward early."""
    plan, _, train_set, loader, teacher = tiny_teacher_setup(
        tiny_glue, tmp_path, "objective=att_kl+hid_seq"
    )
    student = build_student(
        plan.teacher_conf, plan.student, plan.num_labels, seed=1
    ).eval()  # no dropout
    batches = list(loader)[:2]  # two lengths: the dynamic-shape graph serves both

    eager = stage1_losses_and_grads(plan, student, teacher.model, train_set["labels"], batches)
    compile_blocks(student, teacher.model)
    compiled = stage1_losses_and_grads(plan, student, teacher.model, train_set["labels"], batches)
    for (losses, grads, *_), (c_losses, c_grads, *_) in zip(eager, compiled, strict=True):
        assert losses.keys() == c_losses.keys() and grads.keys() == c_grads.keys()
        assert all(torch.allclose(losses[k], c_losses[k], rtol=1e-4, atol=1e-6) for k in losses)
        assert all(torch.allclose(grads[n], c_grads[n], rtol=1e-3, atol=1e-6) for n in grads)


def test_recomputed_attention_gives_bitwise_the_same_step_and_keeps_fewer_maps(tiny_glue, tmp_path):
    """trainer.recompute_attention: the student's attention (with its dropout) rebuilt in backward,
    same RNG use."""
    plan, _, train_set, loader, teacher = tiny_teacher_setup(tiny_glue, tmp_path)
    batches = list(loader)[:2]
    runs = {}
    for recompute in (False, True):
        plan = make_plan(
            compose_config(
                tiny_overrides(tiny_glue, tmp_path, f"trainer.recompute_attention={recompute}")
            )
        )
        student = build_student(plan.teacher_conf, plan.student, plan.num_labels, seed=1).train()
        prepare_for_training(student, plan.trainer.recompute_attention)
        assert (student.config._attn_implementation == RECOMPUTED_SDPA) == recompute
        assert (
            student.config.attention_probs_dropout_prob > 0
        )  # the case where SDPA on CPU keeps the maps
        runs[recompute] = stage1_losses_and_grads(
            plan, student, teacher.model, train_set["labels"], batches, saved_bytes=True
        )
    for (losses, grads, saved, rng), (r_losses, r_grads, r_saved, r_rng) in zip(
        runs[False], runs[True], strict=True
    ):
        assert all(torch.equal(losses[k], r_losses[k]) for k in losses)
        assert grads.keys() == r_grads.keys() and all(
            torch.equal(grads[n], r_grads[n]) for n in grads
        )
        assert torch.equal(rng, r_rng)
        assert r_saved < saved


@pytest.mark.parametrize("objective", ["att_kl+val_kl", "minilm_v2", "tinybert"])
def test_fused_losses_give_the_reference_losses_and_gradients_in_a_step(
    tiny_glue, tmp_path, objective
):
    """trainer.fused_losses (the default) against the reference functions through autograd, keeping
    fewer bytes."""
    _, _, train_set, loader, teacher = tiny_teacher_setup(tiny_glue, tmp_path)
    batches = list(loader)[:2]
    runs = {}
    for fused in (False, True):
        run_cfg = compose_config(
            tiny_overrides(
                tiny_glue, tmp_path, f"objective={objective}", f"trainer.fused_losses={fused}"
            )
        )
        plan = make_plan(run_cfg)
        student = build_student(
            plan.teacher_conf, plan.student, plan.num_labels, seed=1
        ).eval()  # no dropout
        runs[fused] = stage1_losses_and_grads(
            plan, student, teacher.model, train_set["labels"], batches, saved_bytes=True
        )
    for (losses, grads, saved, _), (f_losses, f_grads, f_saved, _) in zip(
        runs[False], runs[True], strict=True
    ):
        assert_same_losses_and_grads((losses, grads), (f_losses, f_grads), rtol=1e-5)
        assert f_saved < saved


def _stopping_after_the_block(model, needs, stop_after=None):
    """A recorder that runs the last layer's whole block: that layer's output is recorded too."""
    needs = {layer: set(wanted) for layer, wanted in needs.items()}
    if stop_after is not None:
        needs.setdefault(stop_after, set()).add("hidden")
    return FeatureRecorder(model, needs, stop_after)


@pytest.mark.parametrize("objective", ["att_kl", "att_mse", "val_kl", "att_kl+val_kl"])
def test_stopping_at_the_last_projection_gives_the_same_step_with_fewer_flops(
    tiny_glue, tmp_path, monkeypatch, objective
):
    """Objectives reading only q/k/v: neither model runs the last mapped block's attention or
    feed-forward."""
    plan, _, train_set, loader, teacher = tiny_teacher_setup(
        tiny_glue, tmp_path, f"objective={objective}"
    )
    batches = list(loader)[:2]
    runs, flops = {}, {}
    for variant in ("block", "projection"):
        if variant == "block":
            monkeypatch.setattr(
                "kdbench.recipes.task_specific.FeatureRecorder", _stopping_after_the_block
            )
        else:
            monkeypatch.undo()
        student = build_student(plan.teacher_conf, plan.student, plan.num_labels, seed=1).eval()
        with FlopCounterMode(display=False) as counter:
            runs[variant] = stage1_losses_and_grads(
                plan, student, teacher.model, train_set["labels"], batches
            )
        flops[variant] = counter.get_total_flops()
    for (losses, grads, *_), (p_losses, p_grads, *_) in zip(
        runs["block"], runs["projection"], strict=True
    ):
        assert losses.keys() == p_losses.keys() and grads.keys() == p_grads.keys()
        assert all(torch.equal(losses[k], p_losses[k]) for k in losses)
        assert all(torch.equal(grads[n], p_grads[n]) for n in grads)
    assert flops["projection"] < flops["block"]


def test_a_term_reading_padded_positions_runs_the_teacher_not_its_features_table(
    tiny_glue, tmp_path
):
    """The features table holds the teacher's real tokens only: att_kl with padding=rows reads its
    padded query rows, so the stage asks no table and hooks the teacher."""
    asked = []
    for padding in ("rows", "masked"):
        overrides = ["objective=att_kl", f"objective.terms.0.params.padding={padding}"]
        cfg = compose_config(tiny_overrides(tiny_glue, tmp_path, *overrides))
        plan, (teacher, student) = make_plan(cfg), tiny_models(cfg)
        stage = plan.stages["intermediate"]
        tables = lambda *request, padding=padding: asked.append(padding)  # noqa: E731
        with stage_step(plan, stage, student, teacher, torch.zeros(4), tables):
            pass
    assert asked == ["masked"]
