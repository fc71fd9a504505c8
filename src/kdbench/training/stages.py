"""The one stage-training function: every stage of every setting trains through `train_stage`."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kdbench.planning.stage_specs import StageSpec
from kdbench.training import loop
from kdbench.training.steps import StepFn


def train_stage(
    spec: StageSpec,
    modules: list[torch.nn.Module],
    loader: torch.utils.data.DataLoader,
    step: StepFn,
    device: torch.device,
    hooks: Sequence = (),
    resume: dict | None = None,
    **layout,
) -> dict[str, float]:
    """`modules` trained on `step` over `loader` for the stage's epochs or steps with its optimizer,
    from `resume` when given (`layout`: accumulation and data-parallel wrappers, as `loop.Stage`
    takes them); returns the loop's statistics."""
    stage = loop.Stage(
        spec.name,
        modules,
        loader,
        step,
        spec.optimizer,
        device,
        epochs=spec.epochs or 0,
        max_steps=spec.steps,
        **layout,
    )
    return loop.train(stage, hooks, resume)
