"""The one training loop: every stage of every setting runs through `train`.

The loop does the arithmetic of a step (micro-batches, gradient accumulation, the finite-loss check, clipping,
the optimizer and schedule); everything else that happens around a step (logging, evaluation, checkpoints, stop
signals, progress) is a hook (`kdbench.training.hooks`), called in the order given.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch
from transformers import get_constant_schedule, get_linear_schedule_with_warmup

from kdbench.data.batches import ResumableSampler
from kdbench.errors import KdbenchError
from kdbench.specs import OptimizerSpec
from kdbench.training.checkpoint import rng_state, set_rng_state
from kdbench.training.steps import StepFn, to_device


class NonFiniteLoss(KdbenchError):
    """A loss term became NaN or infinite."""


@dataclass
class Stage:
    """What `train` trains: `modules` (the student and the objective's learnable parts) on `step` over `loader`,
    for `epochs` passes or exactly `max_steps` optimizer steps (cycling over the data), each step taking
    `accumulation` micro-batches; data-parallel wrappers in `sync_modules` all-reduce only on a step's last one."""

    name: str
    modules: list[torch.nn.Module]
    loader: torch.utils.data.DataLoader  # its batch_sampler is a ResumableSampler
    step: StepFn
    optimizer: OptimizerSpec
    device: torch.device
    epochs: int = 0
    max_steps: int | None = None
    accumulation: int = 1
    sync_modules: Sequence[torch.nn.Module] = ()

    @property
    def total_steps(self) -> int:
        return self.max_steps if self.max_steps is not None else self.epochs * (len(self.loader) // self.accumulation)


@dataclass
class Progress:
    """Where the loop is, what the hooks read: the step just taken, its position in the data, its losses."""

    stage: Stage
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    step: int = 0
    epoch: int = 0
    batch: int = 0  # micro-batches of this epoch consumed
    values: dict[str, float] = field(default_factory=dict)
    examples: int = 0

    @property
    def finished(self) -> bool:
        return self.step >= self.stage.total_steps

    def state(self, done: bool = False) -> dict:
        """Everything needed to continue exactly from here (a checkpoint's content)."""
        return {"stage": self.stage.name, "done": done, "step": self.step, "epoch": self.epoch, "batch": self.batch,
                "modules": [m.state_dict() for m in self.stage.modules], "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(), "rng": rng_state(self.stage.device)}

    def restore(self, state: dict) -> None:
        for module, saved in zip(self.stage.modules, state["modules"], strict=True):
            module.load_state_dict(saved)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        set_rng_state(state["rng"], self.stage.device)
        self.step, self.epoch, self.batch = state["step"], state["epoch"], state["batch"]


def parameter_groups(modules: Iterable[torch.nn.Module], weight_decay: float) -> list[dict]:
    """Weight decay on weight matrices only (not biases or LayerNorm), as BERT/RoBERTa recipes do."""
    decay, no_decay = [], []
    for module in modules:
        for name, param in module.named_parameters():
            if not param.requires_grad:
                continue
            (no_decay if param.ndim < 2 or "LayerNorm" in name or "layer_norm" in name else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def start(stage: Stage, resume: dict | None) -> Progress:
    """AdamW with the spec's schedule (warm-up then linear decay, or constant), restored from
    `resume` (a saved state) if given."""
    spec = stage.optimizer
    groups = parameter_groups(stage.modules, spec.weight_decay)
    # The fused kernel does AdamW's arithmetic in one pass over each tensor: on a CPU about 7x faster than the
    # per-tensor loop for a 3-layer student, whose 30k-row embedding dominates the parameters (benchmarks/).
    fused = all(p.device.type in ("cpu", "cuda") for group in groups for p in group["params"])
    optimizer = torch.optim.AdamW(groups, lr=spec.lr, betas=tuple(spec.betas), eps=spec.eps, fused=fused)
    total = stage.total_steps
    warmup = math.ceil(spec.warmup_ratio * total)
    scheduler = (get_constant_schedule(optimizer) if spec.schedule == "constant"
                 else get_linear_schedule_with_warmup(optimizer, warmup, total))
    progress = Progress(stage, optimizer, scheduler)
    if resume is not None:
        progress.restore(resume)
    return progress


def train(stage: Stage, hooks: Sequence = (), resume: dict | None = None) -> dict[str, float]:
    """Run the stage (from `resume` when given), calling the hooks; returns seconds and examples per second."""
    for module in stage.modules:
        module.train()
    progress = start(stage, resume)
    sampler: ResumableSampler = stage.loader.batch_sampler
    began = time.perf_counter()
    for hook in hooks:
        hook.on_start(progress)
    while not progress.finished:
        sampler.set_epoch(progress.epoch, progress.batch)
        for values in optimizer_steps(progress):
            progress.values = values
            for hook in hooks:
                hook.on_step(progress)
            if progress.finished:
                break
        progress.optimizer.zero_grad(set_to_none=True)  # an epoch's incomplete last step is dropped
        progress.epoch, progress.batch = progress.epoch + 1, 0
        for hook in hooks:
            hook.on_epoch_end(progress)
    for hook in hooks:
        hook.on_end(progress)
    seconds = time.perf_counter() - began
    return {"seconds": seconds, "examples_per_s": progress.examples / seconds if seconds else 0.0}


def optimizer_steps(progress: Progress):
    """Take the optimizer steps of one pass over the loader; yields each step's mean loss terms."""
    stage = progress.stage
    params = [p for group in progress.optimizer.param_groups for p in group["params"]]
    micro: list[dict[str, float]] = []
    for batch in stage.loader:
        batch = to_device(batch, stage.device)
        micro.append(micro_step(stage, batch, last=len(micro) + 1 == stage.accumulation))
        progress.batch += 1
        progress.examples += batch["input_ids"].shape[0]
        if len(micro) < stage.accumulation:
            continue
        values = {name: sum(m[name] for m in micro) / stage.accumulation for name in micro[0]}
        micro = []
        check_finite(values, progress)
        if stage.optimizer.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(params, stage.optimizer.max_grad_norm)
        progress.optimizer.step()
        progress.scheduler.step()
        progress.optimizer.zero_grad(set_to_none=True)
        progress.step += 1
        yield values


def micro_step(stage: Stage, batch: dict, last: bool) -> dict[str, float]:
    """Forward and backward of one micro-batch, weighted 1/accumulation; gradients are all-reduced on the last."""
    with contextlib.ExitStack() as stack:
        if not last:
            for module in stage.sync_modules:
                stack.enter_context(module.no_sync())
        losses = stage.step(batch)
        (losses["total"] / stage.accumulation).backward()
    return {name: loss.item() for name, loss in losses.items()}


def check_finite(values: dict[str, float], progress: Progress) -> None:
    for name, value in values.items():
        if not math.isfinite(value):
            raise NonFiniteLoss(
                f"loss term {name!r} became {value} at {progress.stage.name} step {progress.step} "
                f"(epoch {progress.epoch}): lower the learning rate or use trainer.precision=fp32"
            )
