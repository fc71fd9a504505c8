"""A compiled step is one graph: a stage-1 and a task-agnostic step, traced by `torch.compile`, has
no graph break (`torch._dynamo.explain`), and its losses and gradients are the eager step's.

The objectives here use every loss but `crd` (att_kl, val_kl, att_mse, hid_mse, relation_kl,
cosine, kd, mlm_kd, mlm), on every feature. `hid_cls_contrast` (crd) is left out: its negatives
are drawn from the loss module's own seeded `torch.Generator` (so that a resumed run draws the same
ones), which dynamo cannot trace.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from kdbench import models
from kdbench.objectives.terms import Objective
from kdbench.plan import make_plan
from kdbench.recipes.task_agnostic import recorder
from kdbench.recipes.task_specific import stage1
from kdbench.teacher.frozen import freeze
from kdbench.training.steps import StudentSide, distillation_step, teacher_records_now
from tests.helpers import (
    agnostic_overrides,
    compose_config,
    tiny_models,
    tiny_overrides,
    write_tiny_corpus,
    write_tiny_glue,
)

pytestmark = pytest.mark.slow
STAGE1 = ["att_kl+val_kl", "att_mse+hid_seq", "hid_cls", "minilm_v2", "tinybert", "distilbert"]
AGNOSTIC = ["att_kl+val_kl", "distilbert"]
B, L = 4, 12


def tiny_batch(vocab_size: int) -> dict:
    """Four sequences of 12 tokens, two of them padded, with three MLM positions."""
    ids = torch.randint(5, vocab_size, (B, L), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(B, L, dtype=torch.long)
    mask[1, 7:], mask[3, 4:] = 0, 0
    positions = torch.tensor([1, 14, 30])
    attended = mask.flatten()
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids),
            "labels": torch.tensor([0, 1, 0, 1]), "example": torch.arange(B), "padded": True,
            "mlm_positions": positions, "mlm_labels": ids.flatten()[positions],
            "attended_positions": attended.nonzero().squeeze(1),
            "masked_in_attended": (attended.cumsum(0) - 1)[positions]}


def losses_and_gradients(step, batch, modules) -> tuple[dict, dict]:
    for module in modules:
        module.zero_grad(set_to_none=True)
    losses = step(batch)
    losses["total"].backward()
    grads = {f"{i}.{name}": p.grad.clone() for i, module in enumerate(modules)
             for name, p in module.named_parameters() if p.grad is not None}
    return {name: loss.detach() for name, loss in losses.items()}, grads


def assert_one_graph_equal_to_eager(step, batch, modules) -> None:
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(step)(batch)
    assert explanation.graph_break_count == 0, [str(r.reason)[:200] for r in explanation.break_reasons]
    eager = losses_and_gradients(step, batch, modules)
    compiled = losses_and_gradients(torch.compile(step, backend="aot_eager"), batch, modules)
    for expected, got in zip(eager, compiled, strict=True):
        assert expected.keys() == got.keys()
        for name in expected:
            torch.testing.assert_close(got[name], expected[name], rtol=1e-5, atol=1e-7)


@pytest.fixture(scope="module")
def tiny_glue(tmp_path_factory):
    return write_tiny_glue(tmp_path_factory.mktemp("glue"))


@pytest.mark.parametrize("objective", STAGE1)
def test_the_compiled_stage1_step_is_one_graph_equal_to_eager(tiny_glue, tmp_path, objective):
    cfg = compose_config(tiny_overrides(tiny_glue, tmp_path, f"objective={objective}"))
    plan = make_plan(cfg)
    teacher, student = tiny_models(cfg)
    batch = tiny_batch(teacher.config.vocab_size)
    with stage1(plan, student.eval(), teacher.eval(), torch.tensor([0, 1] * 24)) as (step, trained):
        assert_one_graph_equal_to_eager(step, batch, trained)


@pytest.mark.parametrize("objective", AGNOSTIC)
def test_the_compiled_task_agnostic_step_is_one_graph_equal_to_eager(tmp_path, objective):
    cfg = compose_config(agnostic_overrides(write_tiny_corpus(tmp_path), tmp_path / "run",
                                            f"objective={objective}"))
    plan = make_plan(cfg)
    teacher = freeze(models.pretrained_teacher(plan.teacher, 2, 0, mlm=True))
    student = models.student_for(plan, teacher, mlm=True).eval()
    objective = Objective(plan.terms, plan.student_conf, plan.teacher_conf, None, plan.seed)
    batch = tiny_batch(teacher.config.vocab_size)
    batch["labels"] = batch.pop("mlm_labels")
    layers = (plan.student_conf.num_hidden_layers, plan.teacher_conf.num_hidden_layers)
    with contextlib.ExitStack() as stack:
        student_recorder, student_logits = stack.enter_context(
            recorder(student, objective, "student", layers[0]))
        teacher_recorder, teacher_logits = stack.enter_context(
            recorder(teacher, objective, "teacher", layers[1]))
        side = StudentSide(student_recorder, objective, student_logits)
        records = teacher_records_now(teacher_recorder, teacher_logits, plan.device, plan.precision)
        step = distillation_step(side, records, plan.device, plan.precision)
        assert_one_graph_equal_to_eager(step, batch, [student, objective])
