"""A model's best dev evaluation while it trains: the teacher's best epoch, the student's best
step (TinyBERT's released prediction stage, the study's released fine-tuning).

`BestDev` scores the model on its dev set(s) every `every` steps, after every epoch (`at_epochs`)
and at the end, and keeps the evaluation of the best first metric: its step and metrics, and with
`keep_weights` its weights, loaded back into the model at the end. The best so far lives in a file,
so a resumed stage keeps the evaluations before it; the hook comes after the step's log row and
before the checkpoint hook (`kdbench.training.hooks.standard_hooks`), so a step's checkpoint follows
its evaluation. A stop signal may cut an evaluation short after its step
is checkpointed (`kdbench.training.hooks.StopOnSignal`), so a resumed stage scores its first step
again where an evaluation was due there. The dev set that chooses is the one the metrics report; a
NaN score (the Pearson correlation of a constant prediction) is never better than a number.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from pathlib import Path

import torch

from kdbench.metrics import scores_only
from kdbench.records.steplog import StepLog
from kdbench.runtime import storage
from kdbench.training.events import Hook

logger = logging.getLogger("kdbench")


class BestDev(Hook):
    """`score()`: the model's dev metrics (the first is the one that chooses). `predictions`
    (written, kept): the file each evaluation writes its per-example predictions to, and where
    the best evaluation's go. `log` (a log, a stage name): each evaluation's scores logged under
    that name."""

    def __init__(
        self,
        score: Callable[[], dict],
        model: torch.nn.Module,
        store: Path,
        *,
        every: int = 0,
        at_epochs: bool = False,
        keep_weights: bool = False,
        predictions: tuple[Path, Path] | None = None,
        log: tuple[StepLog, str] | None = None,
    ):
        self.score, self.model, self.store = score, model, store
        self.every, self.at_epochs, self.keep_weights = every, at_epochs, keep_weights
        self.predictions, self.log = predictions, log
        self.metrics: dict | None = None
        self.step: int | None = None
        self.seconds = 0.0  # spent evaluating
        self.scored_at: int | None = None  # the step evaluated last

    @property
    def chooses(self) -> bool:
        """Whether it chooses among evaluations during training (else it scores the end)."""
        return bool(self.every) or self.at_epochs

    def read(self) -> None:
        """The best so far, as the store keeps it (none before the first evaluation)."""
        kept = self._kept() or {}
        self.metrics, self.step = kept.get("metrics"), kept.get("step")

    def on_start(self, progress) -> None:
        """A resumed stage reads the best so far and scores its step again where one was due (a
        stop may have cut that evaluation short); a fresh one drops any an earlier start left."""
        if progress.step == 0:
            self.store.unlink(missing_ok=True)
        self.read()
        at_epoch_end = self.at_epochs and progress.batch == 0  # checkpointed as an epoch ended
        if progress.step and (self.due(progress) or at_epoch_end):
            self.consider(progress.step, progress.epoch)

    def due(self, progress) -> bool:
        """Whether the step `progress` holds is one of the every `every` steps scored."""
        return bool(self.every) and progress.step % self.every == 0 and not progress.finished

    def on_step(self, progress) -> None:
        if self.due(progress):
            self.consider(progress.step, progress.epoch)

    def on_epoch_end(self, progress) -> None:
        if self.at_epochs:
            self.consider(progress.step, progress.epoch)

    def on_end(self, progress) -> None:
        if self.scored_at != progress.step:
            self.consider(progress.step, progress.epoch)
        if self.keep_weights:
            name = progress.stage.name
            logger.info("%s keeps step %d's weights, its best on dev", name, self.step)
            self.model.load_state_dict(self._kept()["weights"])

    def consider(self, step: int, epoch: int) -> None:
        """The model scored now, at `step` (in `epoch`); kept when its first metric beats the best
        so far."""
        start = time.perf_counter()
        metrics = self.score()
        self.model.train()  # evaluation left it in eval mode
        self.seconds += time.perf_counter() - start
        self.scored_at = step
        if self.log is not None:
            log, name = self.log
            log.log(name, step, scores_only(metrics), epoch=epoch)
        primary = next(iter(metrics))
        if self.metrics is None or beats(metrics[primary], self.metrics[primary]):
            self.metrics, self.step = metrics, step
            self._keep()
            if self.predictions is not None:
                self.predictions[0].replace(self.predictions[1])
        elif self.predictions is not None:
            self.predictions[0].unlink(missing_ok=True)

    def scored(self, stage: str) -> dict:
        """What a record says of the evaluation it reports: the best of those every `every`
        steps, or the last step's."""
        if not self.chooses:
            return {"checkpoint": "last", "stage": stage, "step": self.step}
        primary = next(iter(self.metrics))
        return {
            "checkpoint": "best",
            "stage": stage,
            "step": self.step,
            "eval_every": self.every,
            "selected_by": f"{primary} on the dev set(s) the metrics report",
        }

    def _keep(self) -> None:
        state = {"step": self.step, "metrics": self.metrics}
        if self.keep_weights:
            state["weights"] = self.model.state_dict()
        storage.atomic_write(
            self.store,
            lambda handle: torch.save(state, handle),
            binary=True,
            need=storage.tensor_bytes(state),
        )

    def _kept(self) -> dict | None:
        if not self.store.exists():
            return None
        return torch.load(self.store, map_location="cpu", weights_only=True)


def beats(score: float, best: float) -> bool:
    """Whether `score` is better than `best`: a number beats a NaN, a NaN never beats anything."""
    return score > best or (math.isnan(best) and not math.isnan(score))
