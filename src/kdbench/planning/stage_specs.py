"""The `stages` block: each setting's stages are named blocks of one schema, each key declared once.

A stage trains for `epochs` passes over its data or exactly `steps` optimizer steps, on batches of
`batch_size` (split into micro-batches of `device_batch_size`), with its own `optimizer` block, and
distils with its `objective` (null: the `objective` group's terms for a distillation stage, the
task's own loss for a fine-tuning one). `SETTING_STAGES` names the stages each setting runs, in
order; a per-stage setting is a YAML line: `stages.intermediate.optimizer.max_grad_norm=1.0`.
`RENAMED` maps the flat keys the stage blocks replace to their stage keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from kdbench.errors import ConfigError
from kdbench.planning.rules import (
    COUNT,
    DEVICE_BATCH,
    FLAG,
    FRACTION,
    LEARNING_RATE,
    NON_NEGATIVE,
    NON_NEGATIVE_COUNT,
    POSITIVE,
    Rule,
    choice,
    entries,
    key,
)
from kdbench.planning.specs import from_mapping

# The stages that train on the task's own loss (their objective is null); the others distil.
SUPERVISED = ("teacher", "finetune")
# The stages of each setting, in the order they run.
SETTING_STAGES = {
    "task_specific": ("teacher", "intermediate", "prediction"),
    "task_agnostic": ("distillation",),
    "finetune": ("finetune",),
}


@dataclass(frozen=True, kw_only=True)
class OptimizerSpec:
    """One stage's AdamW with linear warm-up then linear decay (or constant), and its clipping."""

    lr: float = key(LEARNING_RATE)
    schedule: str = key(
        choice("linear", "constant", meaning="constant: the lr throughout (TinyBERT's stage 1)"),
        "linear",
    )
    warmup_ratio: float = key(FRACTION, 0.06)
    # {task: ratio}: a task's own warm-up over warmup_ratio (the released QQP recipes' 0.25)
    warmup_ratio_per_task: dict | None = key(FRACTION, None, each=True)
    weight_decay: float = key(NON_NEGATIVE, 0.01)
    betas: tuple[float, float] = key(entries(FRACTION, 2), (0.9, 0.999))
    eps: float = key(POSITIVE, 1e-6)
    max_grad_norm: float | None = key(POSITIVE.or_null("no clipping"), None)

    def for_task(self, task: str) -> OptimizerSpec:
        """This optimizer with the task's own warm-up where `warmup_ratio_per_task` names it."""
        ratio = (self.warmup_ratio_per_task or {}).get(task, self.warmup_ratio)
        return OptimizerSpec(**{**self.__dict__, "warmup_ratio": ratio})


@dataclass(frozen=True, kw_only=True)
class StageSpec:
    """A stage: how long, on which batches, with which optimizer, distilling what."""

    name: str = ""  # the stage's name in `stages` (set when read)
    epochs: int | None = key(NON_NEGATIVE_COUNT.or_null("steps count instead"), None)
    steps: int | None = key(COUNT.or_null("epochs count instead"), None)
    batch_size: int = key(COUNT)
    device_batch_size: int | str | None = key(DEVICE_BATCH, None)  # `measure.memory.device_batch`
    group_by_length: bool = key(FLAG, True)
    eval_every: int = key(NON_NEGATIVE_COUNT, 0)  # steps between evaluations; 0: at the end
    optimizer: OptimizerSpec = field(default=None)
    # null: the objective group's terms, or the task's own loss; else {terms: [...]}, each term
    # checked as the objective group's are
    objective: dict | None = key(None, None)
    terms: tuple = ()  # the objective's terms, built by the plan (`objective_terms`)

    @property
    def runs(self) -> bool:
        """Whether the stage trains at all (0 epochs skips it)."""
        return bool(self.steps) or bool(self.epochs)


def declared_rules(spec, at: str = "") -> dict[str, Rule]:
    """{dotted key: rule} of a spec's declared fields, nested blocks under their names."""
    rules = {}
    for declared in fields(spec):
        name = f"{at}{declared.name}"
        if declared.name == "optimizer":
            rules |= declared_rules(OptimizerSpec, f"{name}.")
        elif declared.metadata.get("rule"):
            rules[f"{name}.*" if declared.metadata["each"] else name] = declared.metadata["rule"]
    return rules


EACH_STAGE = "stages.<stage>"  # where a renamed key is every stage's own
RENAMED = {
    "trainer.teacher_epochs": "stages.teacher.epochs",
    "trainer.stage1_epochs": "stages.intermediate.epochs",
    "trainer.stage2_epochs": "stages.prediction.epochs (setting=finetune: stages.finetune.epochs)",
    "trainer.finetune_epochs": "stages.finetune.epochs",
    "trainer.max_steps": "stages.distillation.steps",
    "trainer.teacher_lr": "stages.teacher.optimizer.lr",
    "trainer.stage2_lr": "stages.prediction.optimizer.lr",
    "trainer.stage1_schedule": "stages.intermediate.optimizer.schedule",
    "trainer.teacher_group_by_length": "stages.teacher.group_by_length",
    "trainer.device_batch_size": "stages.distillation.device_batch_size",
    "trainer.lr": f"{EACH_STAGE}.optimizer.lr",
    "trainer.batch_size": f"{EACH_STAGE}.batch_size",
    "trainer.group_by_length": f"{EACH_STAGE}.group_by_length",
    "trainer.eval_every": f"{EACH_STAGE}.eval_every",
    "trainer.warmup_ratio": f"{EACH_STAGE}.optimizer.warmup_ratio",
    "trainer.warmup_ratio_per_task": f"{EACH_STAGE}.optimizer.warmup_ratio_per_task",
    "trainer.weight_decay": f"{EACH_STAGE}.optimizer.weight_decay",
    "trainer.adam_betas": f"{EACH_STAGE}.optimizer.betas",
    "trainer.adam_eps": f"{EACH_STAGE}.optimizer.eps",
    "trainer.max_grad_norm": f"{EACH_STAGE}.optimizer.max_grad_norm",
    "prediction_kd": "stages.prediction.objective",
    "prediction_kd.temperature": "stages.prediction.objective.terms.0.params.temperature",
    "prediction_kd.alpha": "stages.prediction.objective.terms.0.params.alpha",
}


def renamed(key: str) -> str | None:
    """The one-line refusal of a flat key the stage blocks replace, or None for another key."""
    new = RENAMED.get(key.lstrip("+~"))
    if new is None:
        return None
    where = ""
    if new.startswith(EACH_STAGE):
        stages = ", ".join(name for names in SETTING_STAGES.values() for name in names)
        where = f" for each stage ({stages})"
    return f"{key.lstrip('+~')} is now {new}{where}: write {new.split(' ')[0]}=..."


def refuse_renamed(values: dict, at: str = "") -> None:
    """Refuses the first flat key the stage blocks replace among a resolved config's keys."""
    for name, value in values.items():
        path = f"{at}{name}"
        if isinstance(value, dict):
            refuse_renamed(value, f"{path}.")
        if message := renamed(path):
            raise ConfigError(message)


STAGE_RULES = declared_rules(StageSpec)  # `kdbench.planning.ranges` checks `stages.*` by them
STAGE_KEYS = frozenset(f.name for f in fields(StageSpec)) - {"name", "terms"}


def stage_spec(name: str, values: dict, task: str) -> StageSpec:
    """The stage `name`'s block (checked values), its optimizer's warm-up the task's own."""
    at = f"stages.{name}"
    values = dict(values)
    optimizer = values.pop("optimizer", None)
    if not isinstance(optimizer, dict):
        raise ConfigError(f"{at} has no optimizer block: add {at}.optimizer.lr=... and its keys")
    optimizer = from_mapping(OptimizerSpec, optimizer, f"{at}.optimizer")
    if optimizer.betas is not None:
        optimizer = OptimizerSpec(**{**optimizer.__dict__, "betas": tuple(optimizer.betas)})
    spec = from_mapping(StageSpec, values | {"name": name}, at)
    if (spec.epochs is None) == (spec.steps is None):
        raise ConfigError(f"{at} needs exactly one of epochs and steps: set the other to null")
    if name in SUPERVISED and spec.objective is not None:
        raise ConfigError(f"{at}.objective must be null: the stage trains on the task's own loss")
    return StageSpec(**{**spec.__dict__, "optimizer": optimizer.for_task(task)})


def stage_specs(stages: dict | None, setting: str, task: str) -> dict[str, StageSpec]:
    """The stages `setting` runs, in order, read from the `stages` block; a block no setting has is
    refused (a typo would otherwise be ignored)."""
    stages = stages or {}
    known = {name for names in SETTING_STAGES.values() for name in names}
    if unknown := sorted(set(stages) - known):
        raise ConfigError(
            f"stages has no stage {unknown[0]}; the stages are {', '.join(sorted(known))}"
        )
    wanted = SETTING_STAGES[setting]
    if missing := [name for name in wanted if name not in stages]:
        raise ConfigError(
            f"setting={setting} runs the stage {missing[0]}, which the trainer recipe does not "
            f"give: add a stages.{missing[0]} block (conf/trainer/default.yaml shows one)"
        )
    return {name: stage_spec(name, stages[name], task) for name in wanted}
