"""The one training loop (every stage uses it) and evaluation."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable

import numpy as np
import torch
from omegaconf import DictConfig
from tqdm.auto import tqdm
from transformers import get_linear_schedule_with_warmup

from kdbench.checkpoint import Checkpoints, rng_state, set_rng_state
from kdbench.errors import KdbenchError
from kdbench.metrics import compute_metrics
from kdbench.record import StepLog

MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class NonFiniteLoss(KdbenchError):
    """A loss term became NaN or infinite."""


def model_inputs(batch: dict) -> dict:
    return {k: batch[k] for k in MODEL_INPUTS if k in batch}


def to_device(batch: dict, device: torch.device) -> dict:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def autocast(device: torch.device, precision: str):
    """bf16 autocast when asked (losses are computed in float32 by the loss functions themselves)."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


def parameter_groups(modules: Iterable[torch.nn.Module], weight_decay: float) -> list[dict]:
    """Weight decay on weight matrices only (not biases or LayerNorm), as BERT/RoBERTa recipes do."""
    decay, no_decay = [], []
    for module in modules:
        for name, param in module.named_parameters():
            if not param.requires_grad:
                continue
            (no_decay if param.ndim < 2 or "LayerNorm" in name or "layer_norm" in name else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def train(
    stage: str,
    modules: list[torch.nn.Module],
    loader,
    epochs: int,
    lr: float,
    step_losses: Callable[[dict], dict[str, torch.Tensor]],
    trainer: DictConfig,
    log: StepLog,
    device: torch.device,
    checkpoints: Checkpoints | None = None,
    resume: dict | None = None,
) -> dict[str, float]:
    """Train `modules` (the student and its learnable objective parts) for `epochs` on `step_losses`.

    AdamW with linear warm-up over `trainer.warmup_ratio` of the steps, then linear decay to zero.
    With `checkpoints`, the state is saved every `trainer.checkpoint_every` steps and when the stage ends;
    `resume` (such a saved state) continues exactly where it was written. Returns seconds and examples/s.
    """
    for module in modules:
        module.train()
    optimizer = torch.optim.AdamW(
        parameter_groups(modules, trainer.weight_decay),
        lr=lr,
        betas=tuple(trainer.adam_betas),
        eps=trainer.adam_eps,
    )
    total_steps = epochs * len(loader)
    scheduler = get_linear_schedule_with_warmup(optimizer, math.ceil(trainer.warmup_ratio * total_steps), total_steps)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    step, first_epoch, first_batch = 0, 0, 0
    if resume is not None:
        for module, state in zip(modules, resume["modules"], strict=True):
            module.load_state_dict(state)
        optimizer.load_state_dict(resume["optimizer"])
        scheduler.load_state_dict(resume["scheduler"])
        set_rng_state(resume["rng"])
        step, first_epoch, first_batch = resume["step"], resume["epoch"], resume["batch"]

    def save(epoch: int, batch: int, done: bool) -> None:
        if checkpoints is not None:
            checkpoints.save({
                "stage": stage, "done": done, "step": step, "epoch": epoch, "batch": batch,
                "modules": [m.state_dict() for m in modules], "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "rng": rng_state(),
            })

    examples, start = 0, time.perf_counter()
    progress = tqdm(total=total_steps, initial=step, desc=stage, disable=not trainer.progress_bar, leave=False)
    for epoch in range(first_epoch, epochs):
        loader.batch_sampler.set_epoch(epoch, first_batch if epoch == first_epoch else 0)
        batch_index = first_batch if epoch == first_epoch else 0
        for batch in loader:
            batch = to_device(batch, device)
            losses = step_losses(batch)
            values = {name: loss.item() for name, loss in losses.items()}
            for name, value in values.items():
                if not math.isfinite(value):
                    raise NonFiniteLoss(
                        f"loss term {name!r} became {value} at {stage} step {step} (epoch {epoch}): lower the "
                        "learning rate or use trainer.precision=fp32"
                    )
            optimizer.zero_grad(set_to_none=True)
            losses["total"].backward()
            if trainer.max_grad_norm:
                torch.nn.utils.clip_grad_norm_(params, trainer.max_grad_norm)
            optimizer.step()
            scheduler.step()
            step += 1
            batch_index += 1
            examples += batch["input_ids"].shape[0]
            if step % trainer.log_every == 0 or step == total_steps:
                log.log(stage, step, values, epoch=epoch, lr=scheduler.get_last_lr()[0])
            if trainer.checkpoint_every and step % trainer.checkpoint_every == 0 and step < total_steps:
                save(epoch, batch_index, done=False)
            progress.update()
            progress.set_postfix(loss=f"{values['total']:.4f}")
    progress.close()
    save(epochs, 0, done=True)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "examples_per_s": examples / seconds if seconds else 0.0}


@torch.inference_mode()
def predict(model: torch.nn.Module, loader, device: torch.device, precision: str) -> tuple[np.ndarray, np.ndarray]:
    """Model outputs [N, C] (float32) and labels [N] over a loader."""
    model.eval()
    outputs, labels = [], []
    for batch in loader:
        batch = to_device(batch, device)
        with autocast(device, precision):
            logits = model(**model_inputs(batch)).logits
        outputs.append(logits.float().cpu())
        labels.append(batch["labels"].cpu())
    return torch.cat(outputs).numpy(), torch.cat(labels).numpy()


def evaluate(model, eval_loaders: dict[str, object], metric_names, device, precision) -> dict[str, float]:
    """Metrics on every dev split; `eval_loaders` maps a metric-name suffix ("" or "matched") to a loader."""
    metrics: dict[str, float] = {}
    for suffix, loader in eval_loaders.items():
        predictions, labels = predict(model, loader, device, precision)
        metrics.update(compute_metrics(metric_names, predictions, labels, suffix))
    return metrics
