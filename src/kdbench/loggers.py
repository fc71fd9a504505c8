"""Experiment loggers: none, or wandb (offline unless configured otherwise). Secrets never enter configs."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf


class WandbLogger:
    def __init__(self, cfg: DictConfig, run_dir: Path):
        import wandb

        self._wandb = wandb
        self.run = wandb.init(
            project=cfg.logger.project,
            entity=cfg.logger.entity,
            group=cfg.logger.group,
            tags=list(cfg.logger.tags),
            mode=cfg.logger.mode,
            dir=str(run_dir),
            name=f"{cfg.task.name}-{cfg.objective.name}-{cfg.student.name}-s{cfg.seed}",
            config=OmegaConf.to_container(cfg, resolve=True),
            reinit="finish_previous",
        )

    def log(self, values: dict, step: int) -> None:
        self.run.log(values)

    def summary(self, record: dict) -> None:
        for key, value in record.get("metrics", {}).items():
            self.run.summary[f"dev/{key}"] = value
        self.run.summary["score"] = record.get("score")

    def finish(self) -> None:
        self.run.finish()


LOGGERS = {"none": None, "wandb": WandbLogger}


def make_logger(cfg: DictConfig, run_dir: Path):
    from kdbench.objectives.objective import lookup

    factory = lookup(LOGGERS, cfg.logger.name, "logger")
    return factory(cfg, run_dir) if factory else None
