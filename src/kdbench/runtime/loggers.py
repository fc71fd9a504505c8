"""Experiment loggers: none, or wandb (offline unless configured otherwise). Secrets never enter
configs. And the libraries' own progress bars, which follow `trainer.progress_bar`."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kdbench.errors import KdbenchError, lookup
from kdbench.planning.specs import LoggerSpec
from kdbench.records.record import RunRecord
from kdbench.records.steplog import StepLog
from kdbench.runtime.storage import atomic_write_text

# in a run's folder with logger=wandb: the id of the job's wandb run
WANDB_RUN_ID_FILE = "wandb_run_id"


def wandb_run_id(run_dir: Path) -> str:
    """The job's wandb run id, kept in its folder: a job started there again (resumed, requeued)
    logs into the run it began, from its step on."""
    kept = run_dir / WANDB_RUN_ID_FILE
    if kept.is_file():
        return kept.read_text().strip()
    run_id = secrets.token_hex(8)  # wandb's ids: letters and digits
    atomic_write_text(kept, run_id + "\n")
    return run_id


class WandbLogger:
    def __init__(self, spec: LoggerSpec, config: dict, run_dir: Path):
        import wandb

        settings = spec.settings
        try:
            self.run = wandb.init(
                project=settings["project"],
                entity=settings["entity"],
                group=settings["group"],
                tags=list(settings["tags"]),
                mode=settings["mode"],
                dir=str(run_dir),
                name=spec.run_name,
                id=wandb_run_id(run_dir),
                resume="allow",
                config=config,
                reinit="finish_previous",
            )
        except wandb.errors.Error as exc:
            raise KdbenchError(
                f"logger=wandb could not start its run ({exc}): log in (wandb login, or "
                "WANDB_API_KEY), or log offline (logger.mode=offline) or not at all (logger=none)"
            ) from None
        self.stages: set[str] = set()

    def log(self, stage: str, values: dict) -> None:
        """One row of the step log under its stage's name (`teacher/total`,
        `student_dev/accuracy`), plotted against the stage's own steps: each stage counts from 1."""
        if stage not in self.stages:
            self.stages.add(stage)
            self.run.define_metric(f"{stage}/step")
            self.run.define_metric(f"{stage}/*", step_metric=f"{stage}/step")
        self.run.log({f"{stage}/{key}": value for key, value in values.items()})

    def summary(self, record: RunRecord) -> None:
        for key, value in (record.metrics or {}).items():
            self.run.summary[f"dev/{key}"] = value
        self.run.summary["score"] = record.score

    def finish(self, exit_code: int) -> None:
        self.run.finish(exit_code=exit_code)


LOGGERS = {"none": None, "wandb": WandbLogger}


def make_logger(spec: LoggerSpec, config: dict, run_dir: Path):
    """The configured logger (None for logger=none); `config` is the resolved run config it
    records."""
    factory = lookup(LOGGERS, spec.name, "logger")
    return factory(spec, config, run_dir) if factory else None


@contextmanager
def run_logs(spec: LoggerSpec, config: dict, run_dir: Path, main_process: bool) -> Iterator:
    """The run's step log (`train_log.jsonl`, each row also to the configured logger) and the
    logger, in the main process (elsewhere a log that writes nothing, and no logger); at the end
    the log closed and the logger's run finished, as failed where the run raised."""
    if not main_process:
        yield StepLog(None), None
        return
    logger = make_logger(spec, config, run_dir)
    log = StepLog(run_dir / "train_log.jsonl", sinks=[logger.log] if logger else [])
    failed = True
    try:
        yield log, logger
        failed = False
    finally:
        log.close()
        if logger:
            logger.finish(exit_code=int(failed))


@contextmanager
def library_progress_bars(shown: bool) -> Iterator[None]:
    """datasets' and transformers' progress bars (tokenising, selecting, loading weights) shown or
    not with kdbench's own, for the region; as they were after it."""
    import datasets
    from transformers.utils import logging as transformers_logging

    was = datasets.are_progress_bars_disabled(), transformers_logging.is_progress_bar_enabled()
    if not shown:
        datasets.disable_progress_bars()
        transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if not was[0]:
            datasets.enable_progress_bars()
        if was[1]:
            transformers_logging.enable_progress_bar()
