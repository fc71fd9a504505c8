"""Evaluation: a model's outputs over a loader, task metrics on the dev sets, mean losses on
held-out batches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from kdbench.metrics import compute_metrics, label_counts
from kdbench.models.anatomy import encoder_layers
from kdbench.records.predictions import split_arrays, write_predictions
from kdbench.runtime import distributed
from kdbench.runtime.precision import computing
from kdbench.training.hooks import stopped_together
from kdbench.training.signals import check_stop, phase, stop_between
from kdbench.training.steps import StepFn, model_inputs, to_device


@torch.inference_mode()
def predict(
    model: torch.nn.Module, loader, device: torch.device, precision: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Model outputs [N, C] (float32), labels [N] and the examples' indices in their split [N]
    (None where the batches carry no `idx`) over a loader, in its order; a stop signal ends it
    between blocks."""
    model.eval()
    outputs, labels, examples = [], [], []
    with stop_between(encoder_layers(model)):
        for batch in loader:
            check_stop()
            if "idx" in batch:
                examples.append(batch["idx"])
            batch = to_device(batch, device)
            with computing(device, precision, model):
                logits = model(**model_inputs(batch, model)).logits
            outputs.append(logits.float().cpu())
            labels.append(batch["labels"].cpu())
    indices = torch.cat(examples).numpy() if examples else None
    return torch.cat(outputs).numpy(), torch.cat(labels).numpy(), indices


def evaluate(
    model,
    eval_loaders: dict[str, object],
    metric_names,
    device,
    precision,
    phase_name: str = "evaluation",
    predictions_to: Path | None = None,
) -> dict[str, float]:
    """Metrics on every dev split, with the predicted and gold label counts per class
    (``label_counts``); `eval_loaders` maps a metric-name suffix ("" or "matched") to a loader. A
    stop signal ends it between batches (`phase_name` says whose evaluation it was). Every
    example's prediction goes to `predictions_to` (``kdbench.records.predictions``) when given."""
    metrics: dict[str, float] = {}
    splits = {}
    with phase(phase_name):
        for suffix, loader in eval_loaders.items():
            predictions, labels, examples = predict(model, loader, device, precision)
            metrics.update(compute_metrics(metric_names, predictions, labels, suffix))
            metrics.update(label_counts(predictions, labels, suffix))
            splits[suffix] = split_arrays(predictions, labels, examples)
    if predictions_to is not None:
        write_predictions(predictions_to, splits)
    return metrics


def logits_table(
    model, loader, num_examples: int, num_labels: int, device, precision: str
) -> torch.Tensor:
    """A model's logits [N, C] (float32, on the CPU) for every example of a loader, indexed by
    `example` number; a stop signal ends it between blocks."""
    table = torch.empty(num_examples, num_labels)
    with torch.inference_mode(), phase("teacher_logits"), stop_between(encoder_layers(model)):
        for batch in loader:
            check_stop()
            batch = to_device(batch, device)
            with computing(device, precision, model):
                logits = model(**model_inputs(batch, model)).logits
            table[batch["example"].cpu()] = logits.float().cpu()
    return table


def heldout_losses(step: StepFn, loader, modules, world, device) -> dict[str, float]:
    """Mean of every term over the held-out batches (eval mode: no dropout), every process's
    batches (`kdbench.data.batches.HeldoutBatches`, each of the sample's in one process) counted
    once. A stop signal ends it between batches (phase `heldout`), in every process at once."""
    for module in modules:
        module.eval()
    totals: dict[str, float] = {}
    count = 0
    with torch.no_grad(), phase("heldout"), stopped_together(device):
        for batch in loader:
            check_stop()
            for name, value in step(to_device(batch, device)).items():
                totals[name] = totals.get(name, 0.0) + float(value)
            count += 1
    for module in modules:
        module.train()
    totals, count = distributed.summed_over_ranks(totals, count, world)
    means = {name: value / count for name, value in totals.items()}
    return {"heldout_loss": means.pop("total", 0.0), **means}
