"""What happens around a training step, one hook each: logging, periodic evaluation, checkpoints,
stop signals, the progress bar. `train` calls them in the order given, after its finite-loss guard
(`kdbench.training.guard`), at the events of `kdbench.training.events`; each reads the loop's
`Progress`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from tqdm.auto import tqdm

from kdbench.planning.trainer_specs import TrainerSpec
from kdbench.records.steplog import StepLog
from kdbench.runtime import distributed
from kdbench.training.checkpoint import Checkpoints
from kdbench.training.events import Hook
from kdbench.training.signals import Interrupted, enter_phase, stop_requested, stopped_in_phase


class LogLosses(Hook):
    """Every `every` steps and at the last, the step's loss terms and learning rate into the run's
    log."""

    def __init__(self, log: StepLog, every: int):
        self.log, self.every, self.lr = log, every, 0.0

    def before_update(self, progress) -> None:
        # the rate this step's update applies: the scheduler moves on to the next step's right after
        self.lr = progress.optimizer.param_groups[0]["lr"]

    def on_step(self, progress) -> None:
        if progress.step % self.every == 0 or progress.finished:
            self.log.log(
                progress.stage.name,
                progress.step,
                progress.values,
                epoch=progress.epoch,
                lr=self.lr,
            )


class EveryStep(Hook):
    """Calls `fn(step)` after every optimizer step (e.g. a periodic held-out evaluation that decides
    when), and again at a resumed stage's start: a stop may have cut its step's call short."""

    def __init__(self, fn: Callable[[int], None]):
        self.fn = fn

    def on_start(self, progress) -> None:
        if progress.step:
            self.fn(progress.step)

    def on_step(self, progress) -> None:
        self.fn(progress.step)


class Checkpoint(Hook):
    """Saves the loop's state every `every` steps (0: never), at every epoch boundary (`at_epochs`)
    and, marked done, at the end; never at the last step itself, whose state the end's checkpoint
    holds."""

    def __init__(
        self, checkpoints: Checkpoints, every: int, at_epochs: bool, log: StepLog | None = None
    ):
        self.checkpoints, self.every, self.at_epochs = checkpoints, every, at_epochs
        self.log = log

    def on_step(self, progress) -> None:
        if self.every and progress.step % self.every == 0 and not progress.finished:
            save(self.checkpoints, progress, self.log)

    def on_epoch_end(self, progress) -> None:
        if self.at_epochs and not progress.finished:
            save(self.checkpoints, progress, self.log)

    def on_end(self, progress) -> None:
        save(self.checkpoints, progress, self.log, done=True)


def save(checkpoints: Checkpoints, progress, log: StepLog | None, done: bool = False) -> None:
    """The loop's state into a checkpoint, with the step log's position (`StepLog.rewind`)."""
    checkpoints.save(progress.state(done) | (log.position() if log is not None else {}))


class StopOnSignal(Hook):
    """After a stop signal (SIGTERM, SIGUSR1, Ctrl-C, a scheduler's pre-emption), raises
    `Interrupted`; the stage is the run's phase while it trains. Whichever hook stops the stage
    after a step, this one or an evaluation that the signal cut short (those come first: a step's
    checkpoint follows its evaluation), that step is checkpointed (`on_stopped`). A signal that
    came while the stage was set up (its models, loaders, tables) stops it before its first step: a
    first step can take minutes (a compiled model's, a large model's on a CPU).

    Every process of a data-parallel run stops at the same step (a signal reaches them at different
    times: one that went on would wait for the others in its next all-reduce), so there the
    processes agree on the flag every `every` steps only, each agreement being a synchronisation.
    A single process reads its own flag every step.
    """

    def __init__(self, checkpoints: Checkpoints | None, every: int = 1, log: StepLog | None = None):
        self.checkpoints, self.every, self.outer_phase = checkpoints, every, ""
        self.log = log

    def on_start(self, progress) -> None:
        self.outer_phase = enter_phase(progress.stage.name)
        if distributed.any_rank(stop_requested(), progress.stage.device):
            raise Interrupted(
                f"stopped by a signal before {progress.stage.name} step {progress.step + 1}; "
                "re-run the same command (same run directory) to resume",
                progress.stage.name,
            )

    def on_end(self, progress) -> None:
        enter_phase(self.outer_phase)

    def on_step(self, progress) -> None:
        if progress.finished or (distributed.is_distributed() and progress.step % self.every):
            return
        if distributed.any_rank(stop_requested(), progress.stage.device):
            raise Interrupted(
                f"stopped by a signal at {progress.stage.name} step {progress.step}; the state is "
                "checkpointed: re-run the same command (same run directory) to resume",
                progress.stage.name,
            )

    def on_stopped(self, progress) -> None:
        if self.checkpoints is not None:
            save(self.checkpoints, progress, self.log)


@contextlib.contextmanager
def stopped_together(device: torch.device):
    """The processes of a data-parallel run leave the block stopped or not, all of them: the block
    holds their work before their first collective operation (tokenisation, loaders), whose stop
    checks are each process's own, and a signal reaches them at different points of it (one that
    went on would wait for a stopped one in its next collective operation). A process that a stop
    ended inside waits at the block's end for the others; there every one stops when any did or
    got a signal. A single process stops there on a signal that came after the block's last
    check."""
    try:
        yield
    except Interrupted:
        distributed.any_rank(True, device)
        raise
    if distributed.any_rank(stop_requested(), device):
        raise stopped_in_phase()


class ProgressBar(Hook):
    """A bar of the stage's steps, showing the loss read every `every` steps and at the last."""

    def __init__(self, enabled: bool, every: int = 1):
        self.enabled, self.every, self.bar = enabled, every, None

    def on_start(self, progress) -> None:
        self.bar = tqdm(
            total=progress.stage.total_steps,
            initial=progress.step,
            desc=progress.stage.name,
            disable=not self.enabled,
            leave=False,
        )

    def on_step(self, progress) -> None:
        self.bar.update()
        if self.enabled and (progress.step % self.every == 0 or progress.finished):
            self.bar.set_postfix(loss=f"{progress.values['total']:.4f}")

    def on_end(self, progress) -> None:
        self.bar.close()


def standard_hooks(
    trainer: TrainerSpec,
    log: StepLog,
    checkpoints: Checkpoints | None,
    after_step: Callable[[int], None] | None = None,
    scorer: Hook | None = None,
) -> list[Hook]:
    """The hooks of every stage, in their order: log, evaluate (`after_step`, or the dev set's
    `scorer`, `kdbench.training.best.BestDev`), checkpoint, stop on a signal, show progress. An
    evaluation follows its step's log row, so a stop that cuts it short keeps the row in the
    checkpointed log, and a step's checkpoint follows its evaluation."""
    hooks: list[Hook] = [LogLosses(log, trainer.log_every)]
    if after_step is not None:
        hooks.append(EveryStep(after_step))
    if scorer is not None:
        hooks.append(scorer)
    if checkpoints is not None:
        every, at_epochs = trainer.checkpoint_every, trainer.checkpoint_epochs
        hooks.append(Checkpoint(checkpoints, every, at_epochs, log))
    return [
        *hooks,
        StopOnSignal(checkpoints, trainer.log_every, log),
        ProgressBar(trainer.progress_bar, trainer.log_every),
    ]
