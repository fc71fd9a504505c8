"""Where a run picks up after a stop: the latest checkpoint of its stages, refused when another
configuration wrote it. Every recipe and the teacher's fine-tuning resume through `Resume`."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from kdbench.errors import KdbenchError
from kdbench.records.steplog import StepLog
from kdbench.training.checkpoint import Checkpoints, set_rng_state

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resume:
    """The latest checkpoint (`state`, None for a fresh start) of a run whose stages run in the
    order `stages`."""

    state: dict | None
    stages: tuple[str, ...]

    @classmethod
    def of(
        cls,
        checkpoints: Checkpoints,
        stages: tuple[str, ...],
        log: StepLog,
        fingerprint: str | None = None,
    ) -> Resume:
        """The latest of `checkpoints`, the run's step `log` rewound to it (`StepLog.rewind`);
        refuses one whose fingerprint is not `fingerprint` (None: checkpoints keyed by their
        folder, written without one)."""
        latest = checkpoints.latest()
        if latest is None:
            log.rewind(None, stages)
            return cls(None, stages)
        state, path = latest
        if state.get("fingerprint") != fingerprint:
            raise KdbenchError(
                f"{checkpoints.folder} holds checkpoints of a different configuration or of "
                "another version of a saved model it reads (a student distilled again in place): "
                "re-run the command that wrote them to resume, or give this run its own directory "
                "(paths.run_dir or Hydra's hydra.run.dir)"
            )
        log.rewind(state, stages)
        logger.info(
            "resuming from %s, %s, step %d%s",
            path,
            state["stage"],
            state["step"],
            " (done)" if state["done"] else "",
        )
        return cls(state, stages)

    def finished(self, stage: str) -> bool:
        """Whether the checkpoint comes after the whole of `stage`."""
        if self.state is None:
            return False
        mine, theirs = self.stages.index(stage), self.stages.index(self.state["stage"])
        return mine < theirs or (mine == theirs and self.state["done"])

    def skips(self, stage: str, model: torch.nn.Module, device: torch.device) -> bool:
        """Whether `stage` is `finished`; when the checkpoint is its end, `model`'s weights and the
        random state at that end are loaded (the next stage draws as in an uninterrupted run)."""
        if self.finished(stage) and self.state["stage"] == stage:
            model.load_state_dict(self.state["modules"][0])
            set_rng_state(self.state["rng"], device)
        return self.finished(stage)

    def at(self, stage: str) -> dict | None:
        """The state `loop.train` continues `stage` from: the checkpoint when it is of `stage`."""
        return self.state if self.state is not None and self.state["stage"] == stage else None
