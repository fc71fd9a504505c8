"""The one training loop: every stage of every setting runs through `train`.

The loop does the arithmetic of a step (micro-batches, gradient accumulation, the finite-loss check,
clipping, the optimizer and schedule); everything else that happens around a step (logging,
evaluation, checkpoints, stop signals, progress) is a hook (`kdbench.training.hooks`), called in the
order given.

A step makes no host synchronisation: its loss terms stay on the device, and the host reads them
(and the finite check's verdict) only when a hook asks for `Progress.values` or `Progress.state()`.
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
from kdbench.planning.stage_specs import OptimizerSpec
from kdbench.training.checkpoint import rng_state, set_rng_state
from kdbench.training.steps import StepFn, to_device


class NonFiniteLoss(KdbenchError):
    """A loss term became NaN or infinite."""


@dataclass
class Stage:
    """What `train` trains: `modules` (the student and the objective's learnable parts) on `step`
    over `loader`, for `epochs` passes or exactly `max_steps` optimizer steps (cycling over the
    data), each step taking `accumulation` micro-batches; data-parallel wrappers in `sync_modules`
    all-reduce only on a step's last one."""

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
        return (
            self.max_steps
            if self.max_steps is not None
            else self.epochs * (len(self.loader) // self.accumulation)
        )


class FiniteGuard:
    """The finite-loss check, on the device: no host synchronisation until its verdict is read.

    Every step's loss terms are checked on the device. From the first step with a non-finite term
    on, `skip` is 1; it is the fused AdamW's `found_inf`, so the optimizer leaves the parameters and
    its own state untouched: the trained state stays that of the last good step. The first bad
    step's terms are kept on the device; `read` (one synchronisation, for the verdict and the values
    asked for) raises `NonFiniteLoss` naming that step and term. `Progress` reads the verdict before
    it gives any state to save, so no saved state comes after a bad step.
    """

    def __init__(self, device: torch.device):
        self.skip = torch.zeros((), dtype=torch.float32, device=device)
        self.names: list[str] = []
        self.first: torch.Tensor | None = None  # [the bad step's place in `unread`, its terms...]
        # the steps checked since the last read: how many (on the device), and their (step, epoch)
        self.taken = torch.zeros((), dtype=torch.float32, device=device)
        self.unread: list[tuple[int, int]] = []

    def check(self, values: dict[str, torch.Tensor], step: int, epoch: int) -> None:
        terms = torch.stack([value.float() for value in values.values()])
        if self.first is None:
            self.names, self.first = list(values), terms.new_zeros(len(values) + 1)
        bad = ~torch.isfinite(terms).all()
        first_bad = bad & (self.skip == 0)
        self.first.copy_(torch.where(first_bad, torch.cat([self.taken[None], terms]), self.first))
        self.skip.copy_(torch.maximum(self.skip, bad.float()))
        self.taken.add_(1)
        self.unread.append((step, epoch))

    def read(self, values: dict[str, torch.Tensor], stage: str) -> dict[str, float]:
        """`values` on the host, after the verdict on every step since the last read."""
        if self.first is None:
            return {name: float(value) for name, value in values.items()}
        asked = [value.float()[None] for value in values.values()]
        skip, place, *rest = torch.cat([self.skip[None], self.first, *asked]).tolist()
        first, current = rest[: len(self.names)], rest[len(self.names) :]
        if skip:
            step, epoch = self.unread[int(place)]
            name, value = next(
                (n, v) for n, v in zip(self.names, first, strict=True) if not math.isfinite(v)
            )
            raise NonFiniteLoss(
                f"loss term {name!r} became {value} at {stage} step {step} "
                f"(epoch {epoch}): lower the learning rate or use "
                "trainer.precision=fp32"
            )
        self.taken.zero_()
        self.unread.clear()
        return dict(zip(values, current, strict=True))


@dataclass
class Progress:
    """Where the loop is, what the hooks read: the step just taken, its position in the data, its
    losses (`losses` on the device; `values` reads them on the host, once per step)."""

    stage: Stage
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    guard: FiniteGuard
    step: int = 0
    epoch: int = 0
    batch: int = 0  # micro-batches of this epoch consumed
    losses: dict[str, torch.Tensor] = field(default_factory=dict)
    examples: int = 0
    _read: dict[str, float] | None = None

    @property
    def finished(self) -> bool:
        return self.step >= self.stage.total_steps

    @property
    def values(self) -> dict[str, float]:
        """The step's mean loss terms on the host (a synchronisation, once per step); raises
        `NonFiniteLoss` when a step since the last read was not finite."""
        if self._read is None:
            self._read = self.guard.read(self.losses, self.stage.name)
        return self._read

    def verify(self) -> None:
        """Raises `NonFiniteLoss` when a step since the last read was not finite (a
        synchronisation)."""
        self.guard.read({}, self.stage.name)

    def took_step(self, losses: dict[str, torch.Tensor]) -> None:
        self.losses, self._read = losses, None

    def state(self, done: bool = False) -> dict:
        """Everything needed to continue exactly from here (a checkpoint's content); raises
        `NonFiniteLoss` when a step since the last read was not finite."""
        self.verify()
        return {
            "stage": self.stage.name,
            "done": done,
            "step": self.step,
            "epoch": self.epoch,
            "batch": self.batch,
            "accumulation": self.stage.accumulation,
            "modules": [m.state_dict() for m in self.stage.modules],
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng": rng_state(self.stage.device),
        }

    def restore(self, state: dict) -> None:
        saved = state.get("accumulation", self.stage.accumulation)
        if saved != self.stage.accumulation:  # the data position counts micro-batches
            raise KdbenchError(
                f"the checkpoint of {self.stage.name} took {saved} micro-batches per step, "
                f"this run takes {self.stage.accumulation} (device_batch_size=auto chose for "
                f"another device): set stages.{self.stage.name}.device_batch_size to the "
                "checkpoint's "
                "micro-batch to resume"
            )
        for module, saved in zip(self.stage.modules, state["modules"], strict=True):
            module.load_state_dict(saved)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        set_rng_state(state["rng"], self.stage.device)
        self.step, self.epoch, self.batch = state["step"], state["epoch"], state["batch"]


def parameter_groups(modules: Iterable[torch.nn.Module], weight_decay: float) -> list[dict]:
    """Weight decay on weight matrices only (not biases or LayerNorm), as BERT/RoBERTa recipes
    do."""
    decay, no_decay = [], []
    for module in modules:
        for name, param in module.named_parameters():
            if not param.requires_grad:
                continue
            (
                no_decay if param.ndim < 2 or "LayerNorm" in name or "layer_norm" in name else decay
            ).append(param)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def start(stage: Stage, resume: dict | None) -> Progress:
    """AdamW with the spec's schedule (warm-up then linear decay, or constant), restored from
    `resume` (a saved state) if given."""
    spec = stage.optimizer
    groups = parameter_groups(stage.modules, spec.weight_decay)
    # The fused kernel does AdamW's arithmetic in one pass over each tensor: on a CPU about 7x
    # faster than the per-tensor loop for a 3-layer student, whose 30k-row embedding dominates the
    # parameters (benchmarks/).
    fused = all(p.device.type in ("cpu", "cuda") for group in groups for p in group["params"])
    optimizer = torch.optim.AdamW(
        groups, lr=spec.lr, betas=tuple(spec.betas), eps=spec.eps, fused=fused
    )
    guard = FiniteGuard(stage.device)
    if fused:
        optimizer.found_inf = guard.skip  # the fused kernel skips the update where it is 1
    total = stage.total_steps
    warmup = math.ceil(spec.warmup_ratio * total)
    scheduler = (
        get_constant_schedule(optimizer)
        if spec.schedule == "constant"
        else get_linear_schedule_with_warmup(optimizer, warmup, total)
    )
    progress = Progress(stage, optimizer, scheduler, guard)
    if resume is not None:
        progress.restore(resume)
    return progress


def train(stage: Stage, hooks: Sequence = (), resume: dict | None = None) -> dict[str, float]:
    """Run the stage (from `resume` when given), calling the hooks; returns seconds and examples per
    second."""
    for module in stage.modules:
        module.train()
    progress = start(stage, resume)
    sampler: ResumableSampler = stage.loader.batch_sampler
    began = time.perf_counter()
    for hook in hooks:
        hook.on_start(progress)
    while not progress.finished:
        sampler.set_epoch(progress.epoch, progress.batch)
        for losses in optimizer_steps(progress):
            progress.took_step(losses)
            for hook in hooks:
                hook.on_step(progress)
            if progress.finished:
                break
        progress.optimizer.zero_grad(set_to_none=True)  # an epoch's incomplete last step is dropped
        progress.epoch, progress.batch = progress.epoch + 1, 0
        for hook in hooks:
            hook.on_epoch_end(progress)
    progress.verify()  # the last steps' verdict, before the end's hooks save the state
    for hook in hooks:
        hook.on_end(progress)
    seconds = time.perf_counter() - began
    return {"seconds": seconds, "examples_per_s": progress.examples / seconds if seconds else 0.0}


def optimizer_steps(progress: Progress):
    """Take the optimizer steps of one pass over the loader; yields each step's mean loss terms, on
    the device."""
    stage = progress.stage
    params = [p for group in progress.optimizer.param_groups for p in group["params"]]
    summed: dict[str, torch.Tensor] = {}
    micro = 0
    for batch in stage.loader:
        batch = to_device(batch, stage.device)
        micro += 1
        losses = micro_step(stage, batch, last=micro == stage.accumulation)
        summed = {name: summed[name] + loss for name, loss in losses.items()} if summed else losses
        progress.batch += 1
        progress.examples += batch["input_ids"].shape[0]
        if micro < stage.accumulation:
            continue
        values = {name: total / stage.accumulation for name, total in summed.items()}
        summed, micro = {}, 0
        progress.guard.check(values, progress.step, progress.epoch)
        if not progress.optimizer.defaults["fused"]:
            progress.verify()  # only the fused optimizer can skip a bad step on the device
        if stage.optimizer.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(params, stage.optimizer.max_grad_norm)
        progress.optimizer.step()
        progress.scheduler.step()
        progress.optimizer.zero_grad(set_to_none=True)
        progress.step += 1
        yield values


def micro_step(stage: Stage, batch: dict, last: bool) -> dict[str, torch.Tensor]:
    """Forward and backward of one micro-batch, weighted 1/accumulation; gradients are all-reduced
    on the last. Returns the loss terms, detached, on the device."""
    with contextlib.ExitStack() as stack:
        if not last:
            for module in stage.sync_modules:
                stack.enter_context(module.no_sync())
        losses = stage.step(batch)
        (losses["total"] / stage.accumulation).backward()
    return {name: loss.detach() for name, loss in losses.items()}
