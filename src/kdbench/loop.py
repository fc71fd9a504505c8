"""The one training loop (every stage uses it) and evaluation."""

from __future__ import annotations

import contextlib
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
from kdbench.signals import Interrupted, stop_requested

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
    *,
    max_steps: int | None = None,
    accumulation: int = 1,
    sync_modules: Iterable[torch.nn.Module] = (),
    after_step: Callable[[int], None] | None = None,
) -> dict[str, float]:
    """Train `modules` (the student and its learnable objective parts) on `step_losses`.

    Runs `epochs` passes over `loader`, or exactly `max_steps` optimizer steps when given (cycling over the
    data). Each optimizer step takes `accumulation` micro-batches, each weighted 1/accumulation; data-parallel
    wrappers in `sync_modules` all-reduce gradients only on a step's last micro-batch. AdamW with linear
    warm-up over `trainer.warmup_ratio` of the steps, then linear decay to zero. With `checkpoints`, the state is
    saved every `trainer.checkpoint_every` steps, at every epoch boundary (`trainer.checkpoint_epochs`), when a
    stop signal arrives, and when the stage ends; `resume` (such a saved state) continues
    exactly where it was written. `after_step(step)` runs after every optimizer step (periodic evaluation).
    Returns seconds and examples per second.
    """
    for module in modules:
        module.train()
    optimizer = torch.optim.AdamW(
        parameter_groups(modules, trainer.weight_decay),
        lr=lr,
        betas=tuple(trainer.adam_betas),
        eps=trainer.adam_eps,
    )
    total_steps = max_steps if max_steps is not None else epochs * (len(loader) // accumulation)
    scheduler = get_linear_schedule_with_warmup(optimizer, math.ceil(trainer.warmup_ratio * total_steps), total_steps)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    sync_modules = list(sync_modules)
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

    def micro_step(batch, last: bool) -> dict[str, float]:
        with contextlib.ExitStack() as stack:
            if not last:  # gradients are all-reduced once per optimizer step
                for module in sync_modules:
                    stack.enter_context(module.no_sync())
            losses = step_losses(batch)
            (losses["total"] / accumulation).backward()
        return {name: loss.item() for name, loss in losses.items()}

    examples, start = 0, time.perf_counter()
    progress = tqdm(total=total_steps, initial=step, desc=stage, disable=not trainer.progress_bar, leave=False)
    epoch = first_epoch
    while step < total_steps:
        loader.batch_sampler.set_epoch(epoch, first_batch if epoch == first_epoch else 0)
        batch_index = first_batch if epoch == first_epoch else 0
        micro: list[dict[str, float]] = []
        for batch in loader:
            batch = to_device(batch, device)
            micro.append(micro_step(batch, last=len(micro) + 1 == accumulation))
            batch_index += 1
            examples += batch["input_ids"].shape[0]
            if len(micro) < accumulation:
                continue
            values = {name: sum(m[name] for m in micro) / accumulation for name in micro[0]}
            micro = []
            for name, value in values.items():
                if not math.isfinite(value):
                    raise NonFiniteLoss(
                        f"loss term {name!r} became {value} at {stage} step {step} (epoch {epoch}): lower the "
                        "learning rate or use trainer.precision=fp32"
                    )
            if trainer.max_grad_norm:
                torch.nn.utils.clip_grad_norm_(params, trainer.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            if step % trainer.log_every == 0 or step == total_steps:
                log.log(stage, step, values, epoch=epoch, lr=scheduler.get_last_lr()[0])
            if after_step is not None:
                after_step(step)
            if trainer.checkpoint_every and step % trainer.checkpoint_every == 0 and step < total_steps:
                save(epoch, batch_index, done=False)
            if stop_requested() and step < total_steps:
                save(epoch, batch_index, done=False)
                raise Interrupted(f"stopped by a signal at {stage} step {step}; the state is checkpointed: re-run the "
                                  "same command (same run directory) to resume")
            progress.update()
            progress.set_postfix(loss=f"{values['total']:.4f}")
            if step == total_steps:
                break
        optimizer.zero_grad(set_to_none=True)  # an epoch's incomplete last step is dropped
        epoch += 1
        if trainer.checkpoint_epochs and step < total_steps:
            save(epoch, 0, done=False)
    progress.close()
    save(epoch, 0, done=True)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "examples_per_s": examples / seconds if seconds else 0.0}


def supervised_step(model: torch.nn.Module, device: torch.device, precision: str):
    """Step function of plain fine-tuning: the model's own task loss (cross-entropy, or MSE for regression)."""

    def step(batch):
        with autocast(device, precision):
            out = model(**model_inputs(batch), labels=batch["labels"])
        return {"total": out.loss.float()}

    return step


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
