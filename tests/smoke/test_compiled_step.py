"""A compiled step is one graph: every objective's stage-1 and task-agnostic step, traced by
`torch.compile(fullgraph=True)` (which fails at a graph break), gives the eager step's losses and
gradients.

Every objective in `conf/objective/` is covered in each setting it runs in: vanilla_kd has no stage
1 (its task-specific distillation is stage 2 only), and hid_cls_contrast (crd) needs task labels, so
it has no task-agnostic step. crd also runs as the study's released driver runs it (binary NCE,
every layer's [CLS], distinct negatives), and att_kl+val_kl with its released padding.
"""

from __future__ import annotations

import contextlib
import copy

import pytest
import torch

from kdbench.models.pretrained import pretrained_teacher
from kdbench.objectives.terms import Objective
from kdbench.planning.hydra_config import config_dir
from kdbench.planning.plan import make_plan
from kdbench.recipes.task_agnostic import recorder
from kdbench.recipes.task_specific import stage_step
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
OBJECTIVES = sorted(path.stem for path in (config_dir() / "objective").glob("*.yaml"))
STAGE1 = [name for name in OBJECTIVES if name != "vanilla_kd"]
AGNOSTIC = [name for name in OBJECTIVES if name != "hid_cls_contrast"]
B, L = 4, 12


def tiny_batch(vocab_size: int) -> dict:
    """Four sequences of 12 tokens, two of them padded, with three MLM positions."""
    ids = torch.randint(5, vocab_size, (B, L), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(B, L, dtype=torch.long)
    mask[1, 7:], mask[3, 4:] = 0, 0
    positions = torch.tensor([1, 14, 30])
    attended = mask.flatten()
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "token_type_ids": torch.zeros_like(ids),
        "labels": torch.tensor([0, 1, 0, 1]),
        "example": torch.arange(B),
        "padded": True,
        "mlm_positions": positions,
        "mlm_labels": ids.flatten()[positions],
        "attended_positions": attended.nonzero().squeeze(1),
        "masked_in_attended": (attended.cumsum(0) - 1)[positions],
    }


def losses_and_gradients(step, batch, modules) -> tuple[dict, dict]:
    for module in modules:
        module.zero_grad(set_to_none=True)
    losses = step(batch)
    losses["total"].backward()
    grads = {
        f"{i}.{name}": p.grad.clone()
        for i, module in enumerate(modules)
        for name, p in module.named_parameters()
        if p.grad is not None
    }
    return {name: loss.detach() for name, loss in losses.items()}, grads


def assert_one_graph_equal_to_eager(step, batch, modules) -> None:
    """The step compiled whole (a graph break fails) gives the eager step's losses and gradients,
    each from the modules' same state (crd's banks and sampler included)."""
    torch._dynamo.reset()
    before = [copy.deepcopy(module.state_dict()) for module in modules]
    eager = losses_and_gradients(step, batch, modules)
    for module, state in zip(modules, before, strict=True):
        module.load_state_dict(state)
    compiled = losses_and_gradients(
        torch.compile(step, backend="aot_eager", fullgraph=True), batch, modules
    )
    for expected, got in zip(eager, compiled, strict=True):
        assert expected.keys() == got.keys()
        for name in expected:
            torch.testing.assert_close(got[name], expected[name], rtol=1e-5, atol=1e-7)


@pytest.fixture(scope="module")
def tiny_glue(tmp_path_factory):
    return write_tiny_glue(tmp_path_factory.mktemp("glue"))


@pytest.mark.parametrize(
    "overrides",
    [
        *([f"objective={name}"] for name in STAGE1),
        ["objective=hid_cls_contrast", "objective.terms.0.params.form=nce"],
        [
            "objective=hid_cls_contrast",
            "objective.terms.0.params.form=nce",
            "objective.terms.0.layers=every",
            "objective.terms.0.params.replacement=false",
            "objective.terms.0.params.num_negatives=5",
        ],
        [
            "objective=att_kl+val_kl",
            "objective.terms.0.params.padding=rows",
            "objective.terms.1.params.padding=none",
        ],
    ],
    ids=[*STAGE1, "hid_cls_contrast-nce", "hid_cls_contrast-released", "att_kl+val_kl-released"],
)
def test_the_compiled_stage1_step_is_one_graph_equal_to_eager(tiny_glue, tmp_path, overrides):
    cfg = compose_config(tiny_overrides(tiny_glue, tmp_path, *overrides))
    plan = make_plan(cfg)
    teacher, student = tiny_models(cfg)
    batch = tiny_batch(teacher.config.vocab_size)
    with stage_step(
        plan, plan.stages["intermediate"], student.eval(), teacher.eval(), torch.tensor([0, 1] * 24)
    ) as (step, trained):
        assert_one_graph_equal_to_eager(step, batch, trained)


@pytest.mark.parametrize("objective", AGNOSTIC)
def test_the_compiled_task_agnostic_step_is_one_graph_equal_to_eager(tmp_path, objective):
    cfg = compose_config(
        agnostic_overrides(write_tiny_corpus(tmp_path), tmp_path / "run", f"objective={objective}")
    )
    plan = make_plan(cfg)
    teacher = freeze(pretrained_teacher(plan.teacher, 2, 0, mlm=True))
    student = plan.build_student(teacher, mlm=True).eval()
    objective = Objective(plan.terms, plan.student_conf, plan.teacher_conf, None, plan.seed)
    batch = tiny_batch(teacher.config.vocab_size)
    batch["labels"] = batch.pop("mlm_labels")
    layers = (plan.student_conf.num_hidden_layers, plan.teacher_conf.num_hidden_layers)
    with contextlib.ExitStack() as stack:
        student_recorder, student_logits = stack.enter_context(
            recorder(student, objective, "student", layers[0])
        )
        teacher_recorder, teacher_logits = stack.enter_context(
            recorder(teacher, objective, "teacher", layers[1])
        )
        side = StudentSide(student_recorder, objective, student_logits)
        records = teacher_records_now(teacher_recorder, teacher_logits, plan.device, plan.precision)
        step = distillation_step(side, records, plan.device, plan.precision)
        assert_one_graph_equal_to_eager(step, batch, [student, objective])
