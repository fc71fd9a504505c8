"""A frozen model: the teacher never trains again; the fine-tuned teacher as the runs see it."""

from __future__ import annotations

from typing import NamedTuple

import torch
from transformers import PreTrainedModel


def freeze(model: PreTrainedModel) -> PreTrainedModel:
    """Eval mode (no dropout) and no gradients."""
    model.eval()
    model.requires_grad_(False)
    return model


def in_run_precision(frozen: PreTrainedModel, precision: str) -> PreTrainedModel:
    """A frozen model's weights cast to bf16 once in a bf16 run (autocast would re-cast them at
    every forward: it keeps the casts of weights that require grad only); as they are in an fp32
    run. Cast after the student has copied its layers and after anything saved from the model: those
    keep fp32 weights."""
    return frozen.to(torch.bfloat16) if precision == "bf16" else frozen


class FineTuned(NamedTuple):
    model: PreTrainedModel  # frozen, on the plan's device
    metrics: dict  # dev metrics
    seconds: float  # spent fine-tuning in this run (0 when loaded)
    identity: str  # names these exact weights (for caches derived from the teacher)
