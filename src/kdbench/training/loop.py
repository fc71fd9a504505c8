"""The one training loop: every stage of every setting runs through `train`.

The loop does the arithmetic of a step (micro-batches, gradient accumulation, clipping, the
optimizer and schedule) and keeps the state a checkpoint resumes from (`Progress`); everything else
that happens around a step (the finite-loss check, logging, evaluation, checkpoints, stop signals,
progress) is a hook (`kdbench.training.hooks`), called in the order given after the finite-loss
guard (`kdbench.training.guard`).

A step makes no host synchronisation: its loss terms stay on the device, and the host reads them
(and the guard's verdict) only when a hook asks for `Progress.values` or `Progress.state()`.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import torch
from transformers import get_constant_schedule, get_linear_schedule_with_warmup

from kdbench.errors import DataError, KdbenchError
from kdbench.planning.stage_specs import OptimizerSpec, StageSpec
from kdbench.training.checkpoint import rng_state, set_rng_state
from kdbench.training.events import Hook, Hooks
from kdbench.training.guard import FiniteLoss
from kdbench.training.steps import StepFn, to_device


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
    # a step's micro-batches, each given what it weighs in the step (the recipe's rule; as they are)
    weigh: Callable[[list[dict]], list[dict]] = list

    @property
    def total_steps(self) -> int:
        return (
            self.max_steps
            if self.max_steps is not None
            else self.epochs * (len(self.loader) // self.accumulation)
        )


@dataclass
class Progress:
    """Where the loop is, what the hooks read: the step taken, its position in the data, its losses
    (`losses` on the device; `values` reads them on the host, once per step, with the `guard`'s
    verdict)."""

    stage: Stage
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    guard: FiniteLoss
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


def parameter_groups(
    modules: Iterable[torch.nn.Module], weight_decay: float, weight_decay_on: str
) -> list[dict]:
    """The trained parameters in AdamW's groups: weight decay on weight matrices only (not biases
    or LayerNorm) with `weight_decay_on="matrices"`, as Hugging Face's and TinyBERT's recipes
    do; on every parameter with "every", as fairseq's Adam (the study's task-specific code)
    does."""
    decay, no_decay = [], []
    for module in modules:
        for name, param in module.named_parameters():
            if not param.requires_grad:
                continue
            exempt = param.ndim < 2 or "LayerNorm" in name or "layer_norm" in name
            (no_decay if exempt and weight_decay_on == "matrices" else decay).append(param)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def start(stage: Stage, resume: dict | None) -> Progress:
    """The modules in training mode, AdamW with the spec's schedule (warm-up then linear decay, or
    constant) and the finite-loss guard, restored from `resume` (a saved state) if given."""
    for module in stage.modules:
        module.train()
    spec = stage.optimizer
    groups = parameter_groups(stage.modules, spec.weight_decay, spec.weight_decay_on)
    # The fused kernel does AdamW's arithmetic in one pass over each tensor: on a CPU about 7x
    # faster than the per-tensor loop for a 3-layer student, whose 30k-row embedding dominates the
    # parameters (benchmarks/).
    fused = all(p.device.type in ("cpu", "cuda") for group in groups for p in group["params"])
    optimizer = torch.optim.AdamW(
        groups, lr=spec.lr, betas=tuple(spec.betas), eps=spec.eps, fused=fused
    )
    total = stage.total_steps
    warmup = math.ceil(spec.warmup_ratio * total)
    scheduler = (
        get_constant_schedule(optimizer)
        if spec.schedule == "constant"
        else get_linear_schedule_with_warmup(optimizer, warmup, total)
    )
    progress = Progress(stage, optimizer, scheduler, FiniteLoss(stage.device))
    if resume is not None:
        progress.restore(resume)
    return progress


def train(stage: Stage, hooks: Sequence[Hook] = (), resume: dict | None = None) -> dict[str, float]:
    """Run the stage (from `resume` when given), calling the hooks after the finite-loss guard;
    returns seconds and examples per second."""
    progress = start(stage, resume)
    hooks = Hooks([progress.guard, *hooks])  # the guard first: its verdict precedes any saved state
    params = [p for group in progress.optimizer.param_groups for p in group["params"]]
    began = time.perf_counter()
    hooks.on_start(progress)
    while not progress.finished:
        # a resumed run starts where its checkpoint stopped, mid-epoch too
        stage.loader.batch_sampler.set_epoch(progress.epoch, progress.batch)
        whole_epoch, steps_before = progress.batch == 0, progress.step
        for micro_batches in step_groups(stage.loader, stage.accumulation):
            progress.took_step(accumulate(stage, progress, stage.weigh(micro_batches)))
            hooks.before_update(progress)  # the guard's check: a bad step leaves no update
            if stage.optimizer.max_grad_norm:
                torch.nn.utils.clip_grad_norm_(params, stage.optimizer.max_grad_norm)
            progress.optimizer.step()
            progress.scheduler.step()
            progress.optimizer.zero_grad(set_to_none=True)
            progress.step += 1
            hooks.on_step(progress)
            if progress.finished:
                break
        if whole_epoch and progress.step == steps_before:  # it would pass over the data forever
            raise DataError(
                f"{stage.name}: a pass over the data gives {len(stage.loader)} micro-batches, "
                f"fewer than one step's {stage.accumulation}: add data or lower the batch size"
            )
        progress.epoch, progress.batch = progress.epoch + 1, 0
        hooks.on_epoch_end(progress)
    hooks.on_end(progress)
    seconds = time.perf_counter() - began
    return {"seconds": seconds, "examples_per_s": progress.examples / seconds if seconds else 0.0}


def step_groups(loader: Iterable[dict], accumulation: int) -> Iterator[list[dict]]:
    """The loader's micro-batches, `accumulation` at a time: one optimizer step's; an epoch's
    incomplete last step is dropped."""
    micro_batches = []
    for batch in loader:
        micro_batches.append(batch)
        if len(micro_batches) == accumulation:
            yield micro_batches
            micro_batches = []


def accumulate(stage: Stage, progress: Progress, micro_batches: list[dict]) -> dict:
    """Forward and backward over a step's micro-batches, the gradients adding up (each micro-batch
    weighs 1/accumulation: the recipe's `weigh` makes its loss terms shares of the step's); the
    step's mean loss terms, on the device."""
    summed = {}
    for micro, batch in enumerate(micro_batches, start=1):
        last = micro == len(micro_batches)
        with contextlib.ExitStack() as stack:  # replicas all-reduce on a step's last one only
            for module in () if last else stage.sync_modules:
                stack.enter_context(module.no_sync())
            losses = stage.step(to_device(batch, stage.device))
            (losses["total"] / stage.accumulation).backward()
        losses = {n: loss.detach() for n, loss in losses.items()}
        summed = {n: summed[n] + loss for n, loss in losses.items()} if summed else losses
        progress.batch += 1
        progress.examples += batch["input_ids"].shape[0]
    return {n: total / stage.accumulation for n, total in summed.items()}


def train_stage(
    spec: StageSpec,
    modules: list[torch.nn.Module],
    loader: torch.utils.data.DataLoader,
    step: StepFn,
    device: torch.device,
    hooks: Sequence[Hook] = (),
    resume: dict | None = None,
    **layout,
) -> dict[str, float]:
    """Every stage of every setting trains here: `modules` on `step` over `loader` for the stage's
    epochs or steps with its optimizer, from `resume` when given (`layout`: accumulation and
    data-parallel wrappers, as `Stage` takes them)."""
    epochs, steps = spec.epochs or 0, spec.steps
    stage = Stage(spec.name, modules, loader, step, spec.optimizer, device, epochs, steps, **layout)
    return train(stage, hooks, resume)
