"""Experiment loggers: none, or wandb (offline unless configured otherwise). Secrets never enter
configs."""

from __future__ import annotations

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
