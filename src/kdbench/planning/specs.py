"""The typed parts of a plan: what each config group means to the code that runs it.

Each spec is a frozen dataclass built from its config group by `kdbench.planning.plan` (the only
reader of the raw config below the entry point); the recipes, the loop, the data and model code take
these, never the raw config. The `trainer` group's specs, one per setting, are `trainer_specs`'s;
the stages' are `stage_specs`'s.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path

from kdbench.errors import ConfigError


def from_mapping(cls, values: dict, group: str, elsewhere: Collection[str] = ()):
    """`cls(**values)`, refusing keys the spec does not have (a typo would otherwise be ignored) and
    lacking ones; keys `elsewhere` (another setting's trainer keys) are left out."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known - set(elsewhere))
    if unknown:
        raise ConfigError(
            f"{group} has no key {', '.join(unknown)}; "
            f"valid keys: {', '.join(sorted(known | set(elsewhere)))}"
        )
    lacking = [
        f.name
        for f in fields(cls)
        if f.name not in values and MISSING is f.default is f.default_factory
    ]
    if lacking:
        raise ConfigError(
            f"{group} lacks the key {', '.join(lacking)}: set {group}.{lacking[0]}=..."
        )
    return cls(**{name: value for name, value in values.items() if name in known})


@dataclass(frozen=True)
class LoadingSpec:
    """How a run's DataLoaders load (`trainer.num_workers` resolved for the device): worker
    processes collate and mask (kept between epochs), and batches come in pinned memory for a GPU's
    asynchronous copies."""

    workers: int = 0
    pin_memory: bool = False

    def options(self) -> dict:
        """The DataLoader arguments."""
        return {
            "num_workers": self.workers,
            "pin_memory": self.pin_memory,
            "persistent_workers": self.workers > 0,
        }


@dataclass(frozen=True)
class TsvLayout:
    """Where a task's splits are in the download_glue_data.py layout, and which columns hold
    what."""

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
    delimiter: str | None = None  # a CSV file's; None: found from each file (`csv_delimiter`)


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
    identity: dict = field(
        compare=False
    )  # the resolved group: keys the fine-tuned teacher's cache entry


@dataclass(frozen=True)
class InitSpec:
    name: str
    layers: tuple[int, ...] | None  # the teacher layers copied into the student; None: random
    copy_embeddings: bool = (
        True  # and the MLM head where both models have one (its decoder is tied to them)
    )
    copy_head: bool = (
        False  # the fine-tuned task head (pooler, classifier): the paper's code starts it fresh
    )
    path: Path | None = (
        None  # init=pretrained: a saved student whose weights the student starts from
    )
    carry_projections: bool = False  # init=pretrained: W_e/W_h start from the saved student's

    @property
    def label(self) -> str:
        """How records and tables name the init: "random", "pretrained" or the teacher layers,
        "4,8,12"."""
        if self.path is not None:
            return "pretrained"
        return "random" if self.layers is None else ",".join(map(str, self.layers))


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
    """The task-agnostic global batch split over processes and gradient-accumulation
    micro-batches."""

    global_batch: int
    per_process: int  # one micro-batch
    accumulation: int
    world_size: int
    # the held-out loader's micro-batch: what the config takes off a GPU, so that the held-out
    # sample (`trainer.heldout_batches` of them) is the same on every device
    heldout_batch: int


@dataclass(frozen=True)
class LoggerSpec:
    name: str
    settings: dict  # the backend's own options (project, entity, mode, ...)
    run_name: str


@dataclass(frozen=True)
class AugmentSpec:
    """TinyBERT's data augmentation of a task's training set (the `augment` group; None in the plan:
    none)."""

    mlm_model: str  # the masked language model proposing single-piece words (and its tokenizer)
    mlm_shape: (
        ShapeSpec | None
    )  # a random MLM of this shape with `mlm_model`'s tokenizer (tests, CPU demos)
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
