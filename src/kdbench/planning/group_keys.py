"""The declarations of the config keys no spec holds as they are written, and of the whole config.

Each key is declared once (`kdbench.planning.rules.key`: its rule, default and help): in the spec
whose fields are its group's keys (`kdbench.planning.specs`, `kdbench.planning.trainer_specs`), or
here, in its group's declaration, where the spec the code uses is built from the keys otherwise
(`TaskKeys`, `TeacherKeys`, ...) or lacks some of them (`DataKeys`, `AugmentKeys`: the option's
name). `ConfigKeys` declares the whole config: the run's own keys, then a declaration per group;
`declaration_at` finds what declares a config path in it.
"""

from __future__ import annotations

from dataclasses import dataclass

from kdbench.data.files import TAB
from kdbench.planning.declared import check_key, declared_keys, is_declaration
from kdbench.planning.rules import (
    COUNT,
    DURATION,
    FLAG,
    LEARNING_RATE,
    NAME_OR_NUMBER,
    NON_NEGATIVE,
    NON_NEGATIVE_COUNT,
    POSITIVE,
    SEED,
    TEXT,
    Rule,
    choice,
    entries,
    integer,
    key,
    number,
)
from kdbench.planning.specs import (
    AugmentSpec,
    CorpusSpec,
    DataSpec,
    InitSpec,
    ShapeSpec,
    TsvLayout,
)
from kdbench.planning.stage_specs import StageSpec
from kdbench.planning.trainer_specs import TRAINER_KEYS

OPTION = "the option's name"
DELIMITER = Rule(
    lambda value: isinstance(value, str) and (len(value) == 1 or value == TAB),
    "one character, e.g. ';', or '\\t' for a tab",
).or_null("found from the file")
METRICS = choice(
    "accuracy", "f1", "f1_macro", "mcc", "pearson", "spearman", meaning="the first is the score"
)


@dataclass(frozen=True, kw_only=True)
class TaskKeys:
    """The `task` group: a GLUE task (`conf/task/sst2.yaml`, ...) or the user's data (`custom`)."""

    name: str = key(None, help=OPTION)
    title: str = key(None, help="how tables name the task (conf/task's own: by their configs)")
    order: int = key(
        NON_NEGATIVE_COUNT,
        help="the task's column (0: before the paper's; beyond them: after; conf/task's: fixed)",
    )
    lr: float = key(LEARNING_RATE, help="the task's learning rate (its stages read it)")
    batch_size: int = key(COUNT, help="the task's batch size (the task-specific stages read it)")
    eval_splits: dict = key(None, help="{metric-name suffix: split} evaluated")
    hf_config: str | None = key(None, help="GLUE: the task's config on the Hub")
    text_fields: list = key(None, help="GLUE: the text fields, one or two")
    labels: list = key(None, help="GLUE: the label names in the Hub's order; empty: regression")
    metrics: list = key(None, help="GLUE: the metrics; the first is the score")
    tsv: TsvLayout = key(TsvLayout, help="GLUE: its files in download_glue_data.py's layout")
    train_file: str | None = key(
        None, None, help="custom: a file with a header (.csv, .tsv, .json, .jsonl, .parquet)"
    )
    validation_file: str | None = key(None, None, help="custom: null carves it from train")
    test_file: str | None = key(None, None, help="custom: labelled, evaluated after validation")
    delimiter: str | None = key(DELIMITER, None, help="custom: a CSV file's delimiter")
    dataset_name: str | None = key(None, None, help="custom: a Hub dataset instead of files")
    dataset_config: str | None = key(None, None, help="custom: the Hub dataset's config")
    text_columns: list = key(
        entries(TEXT, text="a list of one or two column names"),
        help="custom: one column, or two for a pair task",
    )
    label_column: str = key(TEXT, help="custom: the label's column")
    label_names: list | None = key(
        entries(NAME_OR_NUMBER, text="a list of label names").or_null(
            "the training labels, sorted"
        ),
        None,
        help="custom: the labels in the output's order (a given teacher's id2label order)",
    )
    regression: bool = key(FLAG, False, help="custom: a real-valued label and one output")
    metric: list | None = key(
        entries(METRICS).or_null("the kind's default"),
        None,
        help="custom: [accuracy] for classes, [pearson, spearman] for regression by default",
    )
    validation_fraction: float = key(
        number(0, 1, open_low=True, open_high=True),
        help="custom: the share of train's distinct inputs carved as validation, by label, when "
        "no validation split is given",
    )
    split_seed: int = key(SEED, help="custom: the seed of that carving")


@dataclass(frozen=True, kw_only=True)
class TeacherKeys:
    """The `teacher` group: a checkpoint, or a random model of a shape (`tiny`)."""

    name: str = key(None, help=OPTION)
    name_or_path: str | None = key(
        None, None, help="a Hub id or a local folder; null: a random model of the teacher's shape"
    )
    finetuned_path: str | None = key(
        None, None, help="a checkpoint already fine-tuned on the task: used as is, no fine-tuning"
    )
    has_mlm_head: bool = key(
        FLAG, False, help="whether it has an MLM head (MLM-based objectives need one)"
    )
    shape: ShapeSpec | None = key(ShapeSpec, None, help="a random model of this shape (tests)")
    finetune_lr: float = key(
        LEARNING_RATE, help="its own fine-tuning lr (stages.teacher reads it; else task.lr)"
    )


@dataclass(frozen=True, kw_only=True)
class DataKeys(DataSpec):
    """The `data` group: where GLUE comes from, and which part of it."""

    name: str = key(None, help=OPTION)


@dataclass(frozen=True, kw_only=True)
class AugmentKeys(AugmentSpec):
    """The `augment` group: TinyBERT's data augmentation (`tinybert`), or none."""

    name: str = key(None, help="none: the task's training set as it is; tinybert")


PARAMS = Rule(lambda value: value is None or isinstance(value, dict), "a mapping of parameters")


@dataclass(frozen=True, kw_only=True)
class TermKeys:
    """An objective term's keys (`objective.terms.N`, `objective.terms_task_agnostic.N`)."""

    loss: str = key(None, help="a loss of kdbench.objectives.losses.LOSSES")
    feature: str | None = key(None, None, help="the feature it reads; null: its loss's first")
    weight: float = key(NON_NEGATIVE, 1.0, help="its weight in the stage's loss")
    name: str | None = key(None, None, help="its name in losses and logs; null: its loss's")
    mapping: str | list | None = key(None, None, help="its layer mapping; null: the objective's")
    params: dict | None = key(
        PARAMS, None, help="its loss's keyword arguments, each declared with the loss"
    )
    projection: bool | None = key(
        FLAG.or_null("the loss's own choice"),
        None,
        help="a learnable W_h before the loss; false compares raw features of equal widths",
    )
    embedding_pair: bool = key(FLAG, False, help="adds the embedding outputs' pair (0, 0)")
    positions: str = key(
        choice("masked", "attended", meaning="attended: every real token"),
        "masked",
        help="an MLM soft-target term's tokens: the masked ones, or every attended one",
    )
    layers: str = key(
        choice("mapped", "every", meaning="every: each side's embeddings and all its layers"),
        "mapped",
        help="the layers a concatenating loss (crd) reads: its pairs', or every layer of each side",
    )


@dataclass(frozen=True, kw_only=True)
class ObjectiveKeys:
    """The `objective` group: weighted terms, each a loss on a feature of mapped layer pairs."""

    name: str = key(None, help=OPTION)
    mapping: str | list = key(
        None, help="the terms' layer mapping: init, fixed, last, uniform, embeddings, or layers"
    )
    terms: list = key(TermKeys, each=True, help="the terms of stage 1 (task-specific)")
    terms_task_agnostic: list | None = key(
        TermKeys, None, each=True, help="the terms on raw text; null or absent: terms"
    )


@dataclass(frozen=True, kw_only=True)
class SettingKeys:
    """The `setting` group: which pipeline runs."""

    name: str = key(None, help="task_specific, task_agnostic or finetune")
    mapping: str | list | None = key(
        None, None, help="the setting's layer mapping over the objective's; null: the objective's"
    )
    student_path: str = key(None, help="setting=finetune: the distilled student to fine-tune")


@dataclass(frozen=True, kw_only=True)
class LoggerKeys:
    """The `logger` group: where metrics go besides the run's own files."""

    name: str = key(None, help="none or wandb")
    project: str = key(None, help="the wandb project")
    entity: str | None = key(None, None, help="the wandb entity")
    group: str | None = key(None, None, help="the wandb group")
    tags: list = key(None, (), help="the wandb tags")
    mode: str = key(None, help="offline unless online (and logged in)")


CELL = Rule(
    lambda value: isinstance(value, str) and all(value.partition("@")[::2]),
    "objective@init, e.g. vanilla_kd@bottom",
)


@dataclass(frozen=True, kw_only=True)
class AdviseKeys:
    """`python -m kdbench.advise`'s own keys (`advise.*` on its command line; no run reads them)."""

    budget: str = key(
        DURATION, "2h", help="the pilot's wall time: calibration, teacher, tables and every job"
    )
    candidates: list | None = key(
        entries(CELL, text="a list of objective@init cells").or_null("from the student's shape"),
        None,
        help="the pilot's cells; null: vanilla_kd, att_kl+val_kl (and hid_seq) from each init",
    )
    min_effect: float = key(
        POSITIVE, 8, help="the smallest difference worth acting on, in dev examples"
    )
    margin: float = key(
        POSITIVE, 4, help="the equivalence margin (TOST), in dev examples: the report's tie"
    )
    max_seeds: int = key(integer(2), 10, help="the most seeds a cell gets, whatever the budget")
    out: str | None = key(None, None, help="the advice's folder; null: advice/<task.name>")


@dataclass(frozen=True, kw_only=True)
class PathKeys:
    """Where a run reads and writes."""

    cache_dir: str = key(
        None, help="fine-tuned teachers, tokenised data: $KDBENCH_CACHE, else ~/.cache/kdbench"
    )
    run_dir: str | None = key(None, None, help="where the run writes; null: Hydra's folder")


@dataclass(frozen=True, kw_only=True)
class DebugKeys:
    debug: bool = key(FLAG, False, help="full tracebacks instead of one-line errors")


@dataclass(frozen=True, kw_only=True)
class StageObjectiveKeys:
    """A stage's own objective (`stages.prediction.objective`): its terms and their mapping."""

    mapping: str | list = key(
        None, "init", help="its terms' layer mapping, as objective.mapping; the setting's over it"
    )
    terms: list = key(TermKeys, each=True, help="the stage's weighted loss terms")


@dataclass(frozen=True, kw_only=True)
class StageKeys(StageSpec):
    """A stage block's keys: `StageSpec`'s, its own objective's terms declared as the objective
    group's, and the per-task tables the plan reads into the task's own values (the planned
    `StageSpec` holds those values only)."""

    objective: StageObjectiveKeys | None = key(
        StageObjectiveKeys,
        None,
        help="null: the objective group's terms, or the task's own loss; else {mapping, terms}",
    )
    # read into epochs and eval_every when the stage is planned (`stage_specs.TASK_TABLES`)
    epochs_per_task: dict | None = key(
        NON_NEGATIVE_COUNT, None, each=True, help="{task: epochs}: a task's own epochs over epochs"
    )
    eval_every_per_task: dict | None = key(
        NON_NEGATIVE_COUNT,
        None,
        each=True,
        help="{task: steps}: a task's own eval_every over eval_every",
    )


@dataclass(frozen=True, kw_only=True)
class RunKeys:
    """The config's own keys, outside the groups."""

    seed: int = key(SEED, help="the student's seed: data order, dropout, head and projection init")
    save_student: bool = key(FLAG, help="write the distilled student (save_pretrained)")
    measure_cost: bool = key(
        FLAG, help="a task-specific run's teacher's and student's size, FLOPs and speed, at its end"
    )
    paper_analogue: dict | None = key(
        None, None, help="the paper design a scaled replica stands in for: {table, inits, note}"
    )
    paths: PathKeys = key(PathKeys, help="where a run reads and writes")
    kdbench: DebugKeys = key(DebugKeys, help="how kdbench reports errors")


@dataclass(frozen=True, kw_only=True)
class ConfigKeys(RunKeys):
    """The whole config: the run's own keys, and one declaration per config group."""

    setting: SettingKeys = key(SettingKeys, help="the pipeline")
    task: TaskKeys = key(TaskKeys, help="the task and its data")
    data: DataKeys = key(DataKeys, help="GLUE's source and subsets")
    teacher: TeacherKeys = key(TeacherKeys, help="the teacher")
    student: ShapeSpec = key(ShapeSpec, help="the student's shape")
    init: InitSpec = key(InitSpec, help="the student's initialisation")
    objective: ObjectiveKeys = key(ObjectiveKeys, help="stage 1's terms")
    trainer: dict = key(
        TRAINER_KEYS,
        help="every setting's keys; what each does: configuration.md's trainer keys",
    )
    stages: dict = key(StageKeys, each=True, help="each setting's stages, one block each")
    corpus: CorpusSpec = key(CorpusSpec, help="the task-agnostic setting's raw text")
    augment: AugmentKeys = key(AugmentKeys, help="the task-specific training set's augmentation")
    logger: LoggerKeys = key(LoggerKeys, help="the metrics' logger")


def declaration_at(path: str):
    """What declares the dotted config path `path` (any part for an entry of a list or mapping key
    declared with `each`): its rule, its nested declaration, or None where nothing governs it."""
    target, each = ConfigKeys, False
    for part in path.split(".") if path else ():
        if each:  # `part` names an entry: the key's declaration governs it
            each = False
            continue
        keys = declared_keys(target) if is_declaration(target) else {}
        if part not in keys:
            return None
        target, each = keys[part].metadata.get("rule"), keys[part].metadata.get("each")
    return None if each else target


def checked_stages(values: dict) -> dict:
    """The `stages` block's values, each stage's keys declared (`StageSpec`) and in range."""
    return check_key(values, declared_keys(ConfigKeys)["stages"], "stages")


def rule_for(path: str) -> Rule | None:
    """The rule of a dotted config path (`objective.terms.0.weight`), or None where no rule governs
    it (a term's params are its loss's: `kdbench.objectives.loss_entry.LossEntry.param_rules`)."""
    target = declaration_at(path)
    return target if isinstance(target, Rule) else None
