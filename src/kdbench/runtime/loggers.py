"""Experiment loggers: none, or wandb (offline unless configured otherwise). Secrets never enter
configs. And the libraries' own progress bars, which follow `trainer.progress_bar`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kdbench.errors import lookup
from kdbench.planning.specs import LoggerSpec
from kdbench.records.record import RunRecord


class WandbLogger:
    def __init__(self, spec: LoggerSpec, config: dict, run_dir: Path):
        import wandb

        self._wandb = wandb
        settings = spec.settings
        self.run = wandb.init(
            project=settings["project"],
            entity=settings["entity"],
            group=settings["group"],
            tags=list(settings["tags"]),
            mode=settings["mode"],
            dir=str(run_dir),
            name=spec.run_name,
            config=config,
            reinit="finish_previous",
        )

    def log(self, values: dict, step: int) -> None:
        self.run.log(values)

    def summary(self, record: RunRecord) -> None:
        for key, value in (record.metrics or {}).items():
            self.run.summary[f"dev/{key}"] = value
        self.run.summary["score"] = record.score

    def finish(self) -> None:
        self.run.finish()


LOGGERS = {"none": None, "wandb": WandbLogger}


def make_logger(spec: LoggerSpec, config: dict, run_dir: Path):
    """The configured logger (None for logger=none); `config` is the resolved run config it
    records."""
    factory = lookup(LOGGERS, spec.name, "logger")
    return factory(spec, config, run_dir) if factory else None


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
