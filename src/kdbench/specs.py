"""The typed parts of a plan: what each config group means to the code that runs it.

Each spec is a frozen dataclass built from its config group by `kdbench.plan` (the only reader of
the raw config below the entry point); the recipes, the loop, the data and model code take these,
never the raw config. The `trainer` group has a spec per setting over the keys every setting reads
(`TRAINERS`); each trainer key is declared once, with its range and whether it is computation-only.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path

from kdbench.errors import ConfigError
from kdbench.rules import (
    COUNT,
    DEVICE,
    FLAG,
    FRACTION,
    LEARNING_RATE,
    NON_NEGATIVE,
    NON_NEGATIVE_COUNT,
    POSITIVE,
    SEED,
    WORKERS,
    choice,
    entries,
    integer,
    key,
)


def from_mapping(cls, values: dict, group: str, elsewhere: Collection[str] = ()):
    """`cls(**values)`, refusing keys the spec does not have (a typo would otherwise be ignored) and
    lacking ones; keys `elsewhere` (another setting's trainer keys) are left out."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known - set(elsewhere))
    if unknown:
        raise ConfigError(f"{group} has no key {', '.join(unknown)}; "
                          f"valid keys: {', '.join(sorted(known | set(elsewhere)))}")
    lacking = [f.name for f in fields(cls)
               if f.name not in values and MISSING is f.default is f.default_factory]
    if lacking:
        raise ConfigError(f"{group} lacks the key {', '.join(lacking)}: "
                          f"set {group}.{lacking[0]}=...")
    return cls(**{name: value for name, value in values.items() if name in known})


@dataclass(frozen=True, kw_only=True)
class ComputeSpec:
    """The trainer keys of how a run computes, logs and keeps checkpoints: every setting's."""

    device: str = key(DEVICE)
    precision: str = key(choice("fp32", "bf16", "auto",
                                meaning="auto: bf16 on a GPU that has it natively"))
    tf32: bool = key(FLAG, True)
    batch_size: int = key(COUNT)
    eval_batch_size: int = key(COUNT, 128)
    max_length: int = key(integer(4), 128)
    group_by_length: bool = key(FLAG, True)
    log_every: int = key(COUNT)
    checkpoint_every: int = key(NON_NEGATIVE_COUNT)
    checkpoint_epochs: bool = key(FLAG, True)
    keep_checkpoints: bool = key(FLAG, False)
    # how, not what: a run resumes across a change of these
    progress_bar: bool = key(FLAG, True, how=True)
    compile: bool = key(FLAG, False, how=True)
    fused_losses: bool = key(FLAG, True, how=True)
    recompute_losses: bool = key(FLAG, False, how=True)
    recompute_attention: bool = key(FLAG, False, how=True)
    num_workers: int | str = key(WORKERS, "auto", how=True)  # or auto (`kdbench.device`)


@dataclass(frozen=True, kw_only=True)
class TrainerSpec(ComputeSpec):
    """The `trainer` group's keys every setting reads: the optimiser over the compute keys."""

    name: str
    lr: float = key(LEARNING_RATE)
    warmup_ratio: float = key(FRACTION)
    # {task: ratio}, read into warmup_ratio by the config
    warmup_ratio_per_task: dict | None = key(FRACTION, None, each=True)
    weight_decay: float = key(NON_NEGATIVE)
    adam_betas: tuple[float, float] = key(entries(FRACTION, 2))
    adam_eps: float = key(POSITIVE)
    max_grad_norm: float | None = key(POSITIVE.or_null("no clipping"))
    eval_every: int = key(NON_NEGATIVE_COUNT, 0)  # steps between evaluations; 0: at the end


@dataclass(frozen=True, kw_only=True)
class DistillationTrainer(TrainerSpec):
    """The keys of both distillation settings: a teacher, and a student built for it."""

    teacher_seed: int = key(SEED, 42)
    student_dropout: float | None = key(FRACTION.or_null("the model family's"), None)


@dataclass(frozen=True, kw_only=True)
class TaskSpecificTrainer(DistillationTrainer):
    """setting=task_specific: the teacher's fine-tuning, then stage 1 and stage 2, by epochs."""

    teacher_epochs: int = key(NON_NEGATIVE_COUNT, 0)
    stage1_epochs: int = key(NON_NEGATIVE_COUNT, 0)
    stage2_epochs: int = key(NON_NEGATIVE_COUNT, 0)
    teacher_lr: float | None = key(LEARNING_RATE.or_null("the task's lr"), None)
    stage2_lr: float | None = key(LEARNING_RATE.or_null("trainer.lr"), None)
    stage1_schedule: str = key(choice("linear", "constant", meaning="constant: TinyBERT's stage 1"),
                               "linear")
    teacher_dropout: bool = key(FLAG, False)  # the teacher's dropout on while it teaches (no caches)
    teacher_group_by_length: bool = key(FLAG, True)
    teacher_best_checkpoint: bool = key(FLAG, False)  # the teacher's best dev epoch, not its last
    cache_teacher_logits: bool = key(FLAG, True)
    cache_teacher_features: bool = key(FLAG, True)
    teacher_features_gib: float = key(NON_NEGATIVE, 4.0)


@dataclass(frozen=True, kw_only=True)
class TaskAgnosticTrainer(DistillationTrainer):
    """setting=task_agnostic: by steps, on global batches split into device micro-batches."""

    max_steps: int | None = key(COUNT.or_null("epochs, not steps"), None)
    device_batch_size: int | None = key(COUNT.or_null("the whole batch"), None)
    heldout_batches: int = key(NON_NEGATIVE_COUNT, 0)
    # masking by token frequency ** -smoothing; None: uniform
    mlm_smoothing: float | None = key(POSITIVE.or_null("uniform masking"), None)
    mask_inputs: str = key(choice("objective", "always", meaning="always: every objective's input"),
                           "objective")


@dataclass(frozen=True, kw_only=True)
class FinetuneTrainer(TrainerSpec):
    """setting=finetune: a distilled student fine-tuned on a task, by epochs."""

    finetune_epochs: int = key(NON_NEGATIVE_COUNT)


TRAINERS = {"task_specific": TaskSpecificTrainer, "task_agnostic": TaskAgnosticTrainer,
            "finetune": FinetuneTrainer}
TRAINER_KEYS = {f.name: f for spec in TRAINERS.values() for f in fields(spec)}  # every setting's
# `kdbench.ranges`'s rules of the trainer keys
TRAINER_RULES = {f"{name}.*" if f.metadata["each"] else name: f.metadata["rule"]
                 for name, f in TRAINER_KEYS.items() if f.metadata.get("rule")}
# Trainer settings that change how a run computes, not what: a run resumes across them (e.g. an
# out-of-memory run re-run with recomputation on).
COMPUTATION_ONLY = tuple(name for name, f in TRAINER_KEYS.items() if f.metadata.get("how"))


def trainer_for(setting: str, values: dict) -> TrainerSpec:
    """The setting's trainer spec of the `trainer` group's values; the keys only other settings
    read are left out."""
    return from_mapping(TRAINERS[setting], values, "trainer", TRAINER_KEYS)


@dataclass(frozen=True)
class LoadingSpec:
    """How a run's DataLoaders load (`trainer.num_workers` resolved for the device): worker
    processes collate and mask (kept between epochs), and batches come in pinned memory for a GPU's
    asynchronous copies."""

    workers: int = 0
    pin_memory: bool = False

    def options(self) -> dict:
        """The DataLoader arguments."""
        return {"num_workers": self.workers, "pin_memory": self.pin_memory,
                "persistent_workers": self.workers > 0}


@dataclass(frozen=True)
class OptimizerSpec:
    """One stage's AdamW with linear warm-up then linear decay (or constant), and its length."""

    lr: float
    weight_decay: float
    betas: tuple[float, float]
    eps: float
    warmup_ratio: float
    max_grad_norm: float | None
    schedule: str = "linear"  # linear: warm-up then linear decay to zero; constant: lr throughout

    @classmethod
    def of(cls, trainer: TrainerSpec, lr: float, schedule: str = "linear") -> OptimizerSpec:
        return cls(lr, trainer.weight_decay, trainer.adam_betas, trainer.adam_eps, trainer.warmup_ratio,
                   trainer.max_grad_norm, schedule)


@dataclass(frozen=True)
class TsvLayout:
    """Where a task's splits are in the download_glue_data.py layout, and which columns hold what."""

    dir: str
    header: bool
    columns: dict
    files: dict


@dataclass(frozen=True)
class UserData:
    """A task's own data: files (CSV, TSV, JSON/JSONL, Parquet) or a Hub dataset, and which column
    is the label."""

    files: dict  # split ("train", "validation", "test") -> Path; empty for a Hub dataset
    format: str | None  # the files' `datasets` builder: csv, json or parquet (TSV is csv with tabs)
    dataset_name: str | None
    dataset_config: str | None
    label_column: str
    validation_fraction: float  # carved from train (`split_seed`) when no validation split is given
    split_seed: int
    carve: bool  # no validation file or Hub split: the validation split is carved from train


@dataclass(frozen=True)
class TaskSpec:
    name: str
    hf_config: str | None  # the GLUE config on the Hub (data.hf_dataset); None: the user's data
    text_fields: tuple[str, ...]
    labels: tuple[str, ...]  # empty for regression (STS-B)
    metrics: tuple[str, ...]
    eval_splits: dict  # metric-name suffix ("" or "matched") -> split
    tsv: TsvLayout | None  # the GLUE files' layout under data.glue_dir; None: the user's data
    user_data: UserData | None = None  # where a task of the user's data lives
    content_hash: str | None = None  # of the user's data: keys the caches built from it

    @property
    def regression(self) -> bool:
        return not self.labels

    @property
    def num_labels(self) -> int:
        return 1 if self.regression else len(self.labels)


@dataclass(frozen=True)
class DataSpec:
    glue_dir: Path | None  # a local GLUE folder in the TSV layout; None: the Hugging Face Hub
    hf_dataset: str
    train_limit: int | None
    eval_limit: int | None
    subset_seed: int


@dataclass(frozen=True)
class ShapeSpec:
    """A transformer's size: a student, or the random `tiny` test teacher."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    ffn_size: int
    max_positions: int = 512


@dataclass(frozen=True)
class TeacherSpec:
    name: str
    name_or_path: str | None
    shape: ShapeSpec | None  # a random model of this shape instead of a checkpoint (tests)
    has_mlm_head: bool
    finetuned_path: Path | None
    identity: dict = field(compare=False)  # the resolved group: keys the fine-tuned teacher's cache entry


@dataclass(frozen=True)
class InitSpec:
    name: str
    layers: tuple[int, ...] | None  # the teacher layers copied into the student; None: random
    copy_embeddings: bool = True  # and the MLM head where both models have one (its decoder is tied to them)
    copy_head: bool = False  # the fine-tuned task head (pooler, classifier): the paper's code starts it fresh
    path: Path | None = None  # init=pretrained: a saved student whose weights the student starts from
    carry_projections: bool = False  # init=pretrained: W_e/W_h start from the saved student's

    @property
    def label(self) -> str:
        """How records and tables name the init: "random", "pretrained" or the teacher layers, "4,8,12"."""
        if self.path is not None:
            return "pretrained"
        return "random" if self.layers is None else ",".join(map(str, self.layers))


@dataclass(frozen=True)
class KDSpec:
    """Stage 2's vanilla KD: temperature, and the soft term's weight alpha (1 - alpha on the hard labels)."""

    temperature: float
    alpha: float


@dataclass(frozen=True)
class CorpusSpec:
    name: str
    seq_len: int
    heldout_fraction: float
    max_docs: int | None
    path: Path | None = None
    format: str = "text"
    hf_datasets: tuple[dict, ...] = ()  # Hugging Face datasets streamed once into a local text file


@dataclass(frozen=True)
class BatchLayout:
    """The task-agnostic global batch split over processes and gradient-accumulation micro-batches."""

    global_batch: int
    per_process: int  # one micro-batch
    accumulation: int
    world_size: int


@dataclass(frozen=True)
class LoggerSpec:
    name: str
    settings: dict  # the backend's own options (project, entity, mode, ...)
    run_name: str


@dataclass(frozen=True)
class AugmentSpec:
    """TinyBERT's data augmentation of a task's training set (the `augment` group; None in the plan: none)."""

    mlm_model: str  # the masked language model proposing single-piece words (and its tokenizer)
    mlm_shape: ShapeSpec | None  # a random MLM of this shape with `mlm_model`'s tokenizer (tests, CPU demos)
    word_vectors: Path | None  # GloVe text file proposing multi-piece words; None: those words stay
    n_per_example: int
    p_replace: float
    top_k: int
    fields: str  # "separate": a pair's sentences one at a time; "first": the first; "all": together
    batch_size: int  # masked sentences per MLM forward pass
    seed: int
    mlm_with_original: bool = True  # the MLM reads the original after the masked one (segment B)
    n_per_task: dict | None = None  # {task: N}: the N of `use_n_per_task`
    use_n_per_task: bool = False  # n_per_task's N (the released per-task N) over n_per_example

    def copies_for(self, task: str) -> int:
        """N, the copies drawn per example of `task`: n_per_task's when use_n_per_task
        (n_per_example for a task it does not name), else n_per_example."""
        if self.use_n_per_task and self.n_per_task:
            return self.n_per_task.get(task, self.n_per_example)
        return self.n_per_example
