"""The typed parts of a plan: what each config group means to the code that runs it.

Each spec is a frozen dataclass built from its config group by `kdbench.planning.plan` (the only
reader of the raw config below the entry point); the recipes, the loop, the data and model code take
these, never the raw config. A spec whose fields are a group's keys declares them
(`kdbench.planning.rules.key`: rule, default, help); the other keys are declared in
`kdbench.planning.group_keys`. The `trainer` group's specs, one per setting, are `trainer_specs`'s;
the stages' are `stage_specs`'s.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path

from kdbench.errors import ConfigError
from kdbench.planning.rules import (
    COLUMN,
    COUNT,
    FLAG,
    FRACTION,
    PROBABILITY,
    SEED,
    TEXT,
    choice,
    entries,
    integer,
    key,
)


def from_mapping(cls, values: dict, group: str):
    """`cls(**values)` of a group's checked values (`kdbench.planning.declared`), refusing the keys
    `cls` needs and `values` lack; the keys `cls` does not have (another setting's trainer keys) are
    left out."""
    known = {f.name for f in fields(cls)}
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

    dir: str = key(None, help="the task's folder under data.glue_dir")
    header: bool = key(FLAG, help="whether the files begin with a header line")
    columns: dict = key(
        COLUMN, each=True, help="{field: column}: where each text field and the label are"
    )
    files: dict = key(None, help="{split: file name} in the task's folder")


@dataclass(frozen=True)
class UserData:
    """A task's own data: files (CSV, TSV, JSON/JSONL, Parquet) or a Hub dataset, and which columns
    are the input and the label."""

    files: dict  # split ("train", "validation", "test") -> Path; empty for a Hub dataset
    format: str | None  # the files' `datasets` builder: csv, json or parquet (TSV is csv with tabs)
    dataset_name: str | None
    dataset_config: str | None
    label_column: str
    validation_fraction: float  # carved from train (`split_seed`) when no validation split is given
    split_seed: int
    carve: bool  # no validation file or Hub split: the validation split is carved from train
    delimiter: str | None = None  # a CSV file's; None: found from each file (`csv_delimiter`)
    text_fields: tuple = ()  # the input's columns: copies of an input are never carved apart


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
    content_hash: str | None = None  # of the data as read: keys the caches built from it

    @property
    def splits(self) -> list[str]:
        """The splits a run reads: train, then the dev split(s)."""
        return ["train", *self.eval_splits.values()]

    @property
    def regression(self) -> bool:
        return not self.labels

    @property
    def num_labels(self) -> int:
        return 1 if self.regression else len(self.labels)


EXAMPLES = integer(1, text="a positive number of examples").or_null("all of them")


@dataclass(frozen=True)
class DataSpec:
    glue_dir: Path | None = key(
        None, help="a local GLUE folder in the TSV layout; null: $KDBENCH_GLUE_DIR, else the Hub"
    )
    hf_dataset: str = key(None, help="GLUE's dataset on the Hugging Face Hub")
    train_limit: int | None = key(
        EXAMPLES, help="the first N training examples after a seeded shuffle; null: all"
    )
    eval_limit: int | None = key(EXAMPLES, help="the first N dev examples (quick checks only)")
    subset_seed: int = key(SEED, help="train_limit's shuffle: every run of a comparison alike")

    @property
    def source(self) -> str:
        """Where a GLUE task's examples come from: the local folder, else the Hub dataset."""
        return str(self.glue_dir or self.hf_dataset)


@dataclass(frozen=True)
class ShapeSpec:
    """A transformer's size: a student, or the random `tiny` test teacher."""

    name: str = key(None, help="how records and tables name it")
    num_layers: int = key(COUNT, help="transformer blocks")
    hidden_size: int = key(COUNT, help="the width, a multiple of num_heads")
    num_heads: int = key(COUNT, help="attention heads")
    ffn_size: int = key(COUNT, help="the feed-forward layers' width")
    max_positions: int = key(COUNT, 512, help="position embeddings: the longest input")


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
    name: str = key(None, help="auto, random, every_kth, bottom, layers or pretrained")
    # the teacher layers copied into the student; None: random
    layers: tuple[int, ...] | None = key(
        entries(COUNT, text="a list of teacher layers, each a positive integer"),
        help="init=layers: the teacher layers (from 1) copied, one per student layer",
    )
    copy_embeddings: bool = key(
        FLAG, True, help="with teacher layers: its embeddings, and the MLM head where both have one"
    )
    copy_head: bool = key(
        FLAG, False, help="the fine-tuned pooler and classifier; the paper's code starts them fresh"
    )
    path: Path | None = key(
        None, None, help="init=pretrained: a saved student of the student's shape to start from"
    )
    carry_projections: bool = key(
        FLAG, False, help="init=pretrained: W_e/W_h start from those saved with the student"
    )

    @property
    def label(self) -> str:
        """How records and tables name the init: "random", "pretrained" or the teacher layers,
        "4,8,12"."""
        if self.path is not None:
            return "pretrained"
        return "random" if self.layers is None else ",".join(map(str, self.layers))


@dataclass(frozen=True)
class HubDatasetSpec:
    """One Hugging Face dataset of a Hub corpus (`corpus.hf_datasets.N`) and how its rows form
    documents."""

    path: str = key(TEXT, help="the dataset's Hub id, e.g. wikimedia/wikipedia")
    name: str | None = key(None, None, help="its configuration; null: the dataset's default")
    split: str = key(TEXT, "train", help="the split read")
    field: str = key(TEXT, "text", help="the column of text")
    rows_per_document: int = key(
        COUNT,
        1,
        help="consecutive non-empty rows joined into one document (held out and packed as one): "
        "1 where a row is a document, N where rows are sentences of a continuous text",
    )


@dataclass(frozen=True)
class CorpusSpec:
    name: str = key(None, help="local, or the Hub corpus's name")
    seq_len: int = key(integer(3), help="packed sequence length, [CLS] ... [SEP]")
    heldout_fraction: float = key(
        FRACTION, help="documents held out for the held-out loss (by a hash of their tokens)"
    )
    max_docs: int | None = key(COUNT.or_null("every document"), help="the first N documents only")
    path: Path | None = key(
        None, None, help="corpus=local: a text file or a folder of them; $KDBENCH_CORPUS's"
    )
    format: str = key(
        None, "text", help="text (blank lines between documents) or wikiextractor (<doc> blocks)"
    )
    hf_datasets: tuple[HubDatasetSpec, ...] = key(
        HubDatasetSpec, (), each=True, help="Hub datasets written once to a local text file"
    )


@dataclass(frozen=True)
class BatchLayout:
    """The task-agnostic global batch split over processes and gradient-accumulation
    micro-batches."""

    global_batch: int
    per_process: int  # one micro-batch
    accumulation: int
    world_size: int
    # the held-out loader's micro-batch: what the config takes off a GPU in one process, so that
    # the held-out sample (`trainer.heldout_batches` of them) is the same on every device and any
    # number of processes
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

    mlm_model: str = key(
        None, help="the masked language model proposing single-piece words, and its tokenizer"
    )
    mlm_shape: ShapeSpec | None = key(
        ShapeSpec, help="a random MLM of this shape with mlm_model's tokenizer (tests, CPU demos)"
    )
    word_vectors: Path | None = key(
        None, help="a GloVe text file proposing multi-piece words; null: those words stay"
    )
    n_per_example: int = key(COUNT, help="copies of each training example (the paper's N)")
    p_replace: float = key(PROBABILITY, help="each eligible word's chance of replacement (p_t)")
    top_k: int = key(COUNT, help="candidates per word (the released M)")
    fields: str = key(
        choice("separate", "first", "all", meaning="separate: one at a time"),
        help="which sentences of a pair: one at a time, the first, or all together",
    )
    batch_size: int = key(COUNT, help="masked sentences per MLM forward pass")
    seed: int = key(SEED, help="the replacements' seed")
    mlm_with_original: bool = key(
        FLAG, True, help="the MLM reads the original after the masked sentence (segment B)"
    )
    n_per_task: dict | None = key(
        COUNT, None, each=True, help="{task: N}: the released per-task N, with use_n_per_task"
    )
    use_n_per_task: bool = key(
        FLAG, False, help="n_per_task's N over n_per_example (n_per_example for a task it lacks)"
    )
    word_vectors_limit: int | None = key(
        COUNT.or_null("the whole file"),
        None,
        help="the GloVe words read, from the file's top (the released 100000); null: every one",
    )

    def copies_for(self, task: str) -> int:
        """N, the copies drawn per example of `task`: n_per_task's when use_n_per_task
        (n_per_example for a task it does not name), else n_per_example."""
        if self.use_n_per_task and self.n_per_task:
            return self.n_per_task.get(task, self.n_per_example)
        return self.n_per_example
