"""The `stages` block: each setting's stages are named blocks of one schema, each key declared once.

A stage trains for `epochs` passes over its data or exactly `steps` optimizer steps, on batches of
`batch_size` (the distillation stage's split into micro-batches of `device_batch_size`), with its
own `optimizer` block, and distils with its `objective` (null: the `objective` group's terms for a
distillation stage, the task's own loss for a fine-tuning one). `SETTING_STAGES` names the stages
each setting runs, in order; a per-stage setting is a YAML line:
`stages.intermediate.optimizer.max_grad_norm=1.0`. `RENAMED` maps the flat keys the stage blocks
replace to their stage keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

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
    choice,
    entries,
    key,
)

# The stages that train on the task's own loss (their objective is null); the others distil.
SUPERVISED = ("teacher", "finetune")
# The stages that split a step's batch into micro-batches (gradient accumulation).
MICRO_BATCHED = ("distillation",)
# The stages of each setting, in the order they run.
SETTING_STAGES = {
    "task_specific": ("teacher", "intermediate", "prediction"),
    "task_agnostic": ("distillation",),
    "finetune": ("finetune",),
}


@dataclass(frozen=True, kw_only=True)
class OptimizerSpec:
    """One stage's AdamW with linear warm-up then linear decay (or constant), and its clipping."""

    lr: float = key(LEARNING_RATE, help="the peak learning rate")
    schedule: str = key(
        choice("linear", "constant", meaning="constant: the lr throughout (TinyBERT's stage 1)"),
        "linear",
        help="linear: warm-up, then linear decay to zero",
    )
    warmup_ratio: float = key(FRACTION, 0.06, help="the share of the stage's steps warming up")
    warmup_ratio_per_task: dict | None = key(
        FRACTION, None, each=True, help="{task: ratio}: a task's own warm-up over warmup_ratio"
    )
    weight_decay: float = key(NON_NEGATIVE, 0.01, help="AdamW's decoupled weight decay")
    weight_decay_on: str = key(
        choice("matrices", "every", meaning="every: every parameter, as fairseq's Adam does"),
        "matrices",
        help="the parameters weight decay applies to: matrices leaves biases and LayerNorm out",
    )
    betas: tuple[float, float] = key(entries(FRACTION, 2), (0.9, 0.999), help="AdamW's betas")
    eps: float = key(POSITIVE, 1e-6, help="AdamW's epsilon")
    max_grad_norm: float | None = key(
        POSITIVE.or_null("no clipping"), None, help="the gradients' norm is clipped to this"
    )

    def for_task(self, task: str) -> OptimizerSpec:
        """This optimizer with the task's own warm-up where `warmup_ratio_per_task` names it."""
        ratio = (self.warmup_ratio_per_task or {}).get(task, self.warmup_ratio)
        return replace(self, warmup_ratio=ratio, betas=tuple(self.betas))


# set by the plan, not by a config: no key
PLANNED = {"planned": True}


@dataclass(frozen=True, kw_only=True)
class StageSpec:
    """A stage: how long, on which batches, with which optimizer, distilling what."""

    epochs: int | None = key(
        NON_NEGATIVE_COUNT.or_null("steps count instead"), None, help="passes over the data"
    )
    steps: int | None = key(
        COUNT.or_null("epochs count instead"), None, help="optimizer steps, cycling over the data"
    )
    batch_size: int = key(COUNT, help="examples per optimizer step (the global batch)")
    device_batch_size: int | str | None = key(
        DEVICE_BATCH,
        None,
        help="micro-batches per device, accumulation making up the rest; the task-agnostic "
        "distillation stage's only (null in every other stage)",
    )
    group_by_length: bool = key(FLAG, True, help="batches of similar length, shuffled, seeded")
    padding: str = key(
        choice(
            "masked",
            "tinybert",
            meaning="tinybert: TinyBERT's released code, every batch padded to trainer.max_length "
            "and att_mse, hid_mse averaged over every position, [PAD] included",
        ),
        "masked",
        help="masked: batches padded to their longest, losses averaged over real tokens",
    )
    eval_every: int = key(NON_NEGATIVE_COUNT, 0, help="steps between evaluations; 0: at the end")
    optimizer: OptimizerSpec = key(OptimizerSpec, help="the stage's AdamW and schedule")
    objective: dict | None = key(
        None,
        None,
        help="null: the objective group's terms, or the task's own loss; else {mapping, terms}",
    )
    name: str = field(default="", metadata=PLANNED)  # the stage's name in `stages`
    terms: tuple = field(default=(), metadata=PLANNED)  # the objective's terms, built by the plan

    @property
    def runs(self) -> bool:
        """Whether the stage trains at all (0 epochs skips it)."""
        return bool(self.steps) or bool(self.epochs)

    def pad_to(self, max_length: int) -> int | None:
        """The length every batch is padded to (`max_length` with padding=tinybert), or None: each
        batch to its longest example."""
        return max_length if self.padding == "tinybert" else None


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


# A stage block's per-task tables (declared with the block's keys, `group_keys.StageKeys`) and the
# key each entry stands for: `epochs_per_task: {rte: 20}` gives RTE 20 epochs over `epochs`.
TASK_TABLES = {"epochs_per_task": "epochs", "eval_every_per_task": "eval_every"}


def task_values(values: dict, task: str) -> dict:
    """A stage block's values with its per-task tables read for `task`: the task's entry over the
    block's own value, the tables themselves left out."""
    own = {
        TASK_TABLES[table]: entries[task]
        for table, entries in values.items()
        if table in TASK_TABLES and task in (entries or {})
    }
    return {name: value for name, value in values.items() if name not in TASK_TABLES} | own


def stage_spec(name: str, values: dict, task: str) -> StageSpec:
    """The stage `name`'s block (values checked against `StageSpec`) for `task`: its per-task
    tables' entries (`TASK_TABLES`) and its optimizer's warm-up the task's own."""
    at = f"stages.{name}"
    values = task_values(values, task)
    for lacking in ("batch_size", "optimizer"):
        if lacking not in values:
            raise ConfigError(f"{at} lacks the key {lacking}: set {at}.{lacking}=...")
    if "lr" not in values["optimizer"]:
        raise ConfigError(f"{at}.optimizer lacks the key lr: set {at}.optimizer.lr=...")
    optimizer = OptimizerSpec(**values["optimizer"]).for_task(task)
    spec = StageSpec(**values | {"name": name, "optimizer": optimizer})
    if (spec.epochs is None) == (spec.steps is None):
        raise ConfigError(f"{at} needs exactly one of epochs and steps: set the other to null")
    if spec.device_batch_size is not None and name not in MICRO_BATCHED:
        raise ConfigError(
            f"{at}.device_batch_size={spec.device_batch_size}: micro-batches apply to the "
            "task-agnostic distillation stage only (stages.distillation): set "
            f"{at}.device_batch_size=null and lower {at}.batch_size to fit the device"
        )
    if name in SUPERVISED and spec.objective is not None:
        raise ConfigError(f"{at}.objective must be null: the stage trains on the task's own loss")
    if name in SUPERVISED and spec.padding != "masked":
        raise ConfigError(
            f"{at}.padding={spec.padding} averages distillation losses over padding, which the "
            "task's own loss does not read: remove the key"
        )
    return spec


def check_agnostic_stage(stage: StageSpec) -> None:
    """The task-agnostic recipe counts optimizer steps, not epochs."""
    if stage.steps is None:
        raise ConfigError(
            "setting=task_agnostic counts steps: set stages.distillation.steps=... and "
            "stages.distillation.epochs=null (trainer=agnostic is the paper's recipe)"
        )


def check_student_scoring(stages: dict[str, StageSpec], best: bool) -> None:
    """With `best` (trainer.student_best_checkpoint), the prediction stage distils (it is the
    student's last) and evaluates the student every `eval_every` steps: the evaluations the best is
    chosen among."""
    prediction = stages["prediction"]
    if best and not (prediction.runs and prediction.terms):
        raise ConfigError(
            "trainer.student_best_checkpoint=true chooses among the prediction stage's "
            "evaluations, and stages.prediction does not distil: give it epochs and an objective, "
            "or set trainer.student_best_checkpoint=false"
        )
    if best and not prediction.eval_every:
        raise ConfigError(
            "trainer.student_best_checkpoint=true chooses among the student's evaluations every "
            "stages.prediction.eval_every steps, which is 0: set stages.prediction.eval_every=50 "
            "(TinyBERT's eval_step)"
        )


def own_stages(resolved: dict) -> dict:
    """A resolved config with only the stage blocks its setting runs: what a record keeps (and a
    re-run compares)."""
    wanted = SETTING_STAGES.get((resolved.get("setting") or {}).get("name"), ())
    stages = resolved.get("stages") or {}
    return resolved | {"stages": {name: stages[name] for name in wanted if name in stages}}


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
