"""Step functions: a batch in, the named loss terms out (float32 scalars, their sum under "total").

The training loop calls one of these per micro-batch and knows nothing of models or objectives. A
distillation step takes the frozen teacher's records (a forward without gradients, or the features
cache), then runs the student side, which reads its features by hooks.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from kdbench.data.batches import PADDED
from kdbench.models.attention import attention_mask
from kdbench.objectives.features import FeatureRecorder
from kdbench.objectives.tensors import LOGITS
from kdbench.runtime.precision import computing

MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
StepFn = Callable[[dict], dict[str, torch.Tensor]]
# How a side's logits are read from its records, the model output (None when the forward stopped
# early) and the batch; None when the objective reads no logits.
LogitsFn = Callable[[dict, object, dict], torch.Tensor | None]


def model_inputs(batch: dict, model: nn.Module) -> dict:
    """The batch's inputs to `model`, its attention mask in the form that needs no synchronisation
    (`kdbench.models.attention.attention_mask`)."""
    inputs = {k: batch[k] for k in MODEL_INPUTS if k in batch}
    if "attention_mask" in inputs:
        mask = inputs["attention_mask"]
        inputs["attention_mask"] = attention_mask(model, mask, batch.get(PADDED))
    return inputs


def to_device(batch: dict, device: torch.device) -> dict:
    """The batch's tensors on `device` (copied without waiting where the memory allows); its host
    values (`PADDED`) as they are."""
    return {
        k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v
        for k, v in batch.items()
    }


def output_logits(records: dict, output, batch: dict) -> torch.Tensor | None:
    """The classifier's logits, when the forward ran to the end."""
    return None if output is None else output.logits


def read_records(recorder: FeatureRecorder, batch: dict, logits: LogitsFn | None) -> dict:
    """One forward: the recorder's features by layer, plus the logits under LOGITS when there are
    any."""
    output = recorder.forward(**model_inputs(batch, recorder.model))
    records = dict(recorder.records)
    value = logits(records, output, batch) if logits is not None else None
    if value is not None:
        records[LOGITS] = value
    return records


class StudentSide(nn.Module):
    """The student's side of a distillation step (its forward, the objective) as one module.

    Data-parallel training wraps this module, so the student and the objective's learnable parts are
    synchronised together, and a forward stopped early stays inside the wrapper's forward.
    """

    def __init__(self, recorder: FeatureRecorder, objective: nn.Module, logits: LogitsFn | None):
        super().__init__()
        self.student, self.objective = recorder.model, objective
        self.recorder, self.logits = recorder, logits

    def forward(self, batch: dict, teacher_records: dict) -> dict[str, torch.Tensor]:
        return self.objective(
            read_records(self.recorder, batch, self.logits), teacher_records, batch
        )


def teacher_records_now(
    teacher: FeatureRecorder, logits: LogitsFn | None, device: torch.device, precision: str
) -> Callable[[dict], dict]:
    """The teacher's records of a batch, computed now: a forward of the frozen teacher without
    gradients. Not under inference mode: its tensors could not be saved for backward, and a step
    compiled by torch.compile cannot hold an inference-mode region."""

    def records(batch):
        with torch.no_grad(), computing(device, precision, teacher.model):
            return read_records(teacher, batch, logits)

    return records


def distillation_step(
    student_side: nn.Module,
    teacher_records: Callable[[dict], dict],
    device: torch.device,
    precision: str,
) -> StepFn:
    """The teacher's records of the batch (`teacher_records`: computed now, or read from the
    features cache), then the student side against them."""

    def step(batch):
        targets = teacher_records(batch)
        with computing(device, precision, student_side):
            return student_side(batch, targets)

    return step


def supervised_step(model: nn.Module, device: torch.device, precision: str) -> StepFn:
    """Plain fine-tuning: the model's own task loss (cross-entropy, or MSE for regression)."""

    def step(batch):
        with computing(device, precision, model):
            out = model(**model_inputs(batch, model), labels=batch["labels"])
        return {"total": out.loss.float()}

    return step
