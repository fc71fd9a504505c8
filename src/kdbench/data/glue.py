"""Task loading (GLUE from Hugging Face `datasets` or a local TSV directory; the user's own data)
and tokenisation.

Every source yields a `datasets.Dataset` with the task's Hugging Face text fields, `label` (Hugging
Face label ids) and `idx` (the example's row number in its split), so everything downstream is
source-agnostic.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import sys
from collections.abc import Mapping
from pathlib import Path

import datasets
import pyarrow as pa
from transformers import PreTrainedTokenizerBase

from kdbench.data import user_data
from kdbench.data.files import reading
from kdbench.errors import DataError
from kdbench.planning.specs import DataSpec, TaskSpec
from kdbench.training.signals import check_stop, phase

TOKEN_COLUMNS = ("input_ids", "attention_mask", "token_type_ids")


def load_split(task: TaskSpec, split: str, data: DataSpec) -> datasets.Dataset:
    """One split ("train", "validation", "validation_matched", ...) of a task from its source."""
    if task.user_data is not None:
        columns = user_data.split_columns(task, split)
        return datasets.Dataset.from_dict(columns, features=schema(task))
    if data.glue_dir is not None:
        return read_tsv_split(task, split, data.glue_dir)
    return load_hf_split(task, split, data.hf_dataset)


def load_hf_split(task: TaskSpec, split: str, hf_dataset: str) -> datasets.Dataset:
    try:
        ds = datasets.load_dataset(hf_dataset, task.hf_config, split=split)
    except (
        Exception
    ) as exc:  # the Hub client raises many types: network, missing config, missing split
        raise DataError(
            f"could not load {hf_dataset}/{task.hf_config} split {split!r} with Hugging Face "
            "datasets "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); offline, set "
            "$KDBENCH_GLUE_DIR or data.glue_dir to a local GLUE directory in the TSV layout"
        ) from exc
    return ds.select_columns([*task.text_fields, "label", "idx"])


def read_tsv_split(task: TaskSpec, split: str, root: Path) -> datasets.Dataset:
    """Read one split of the classic GLUE TSV layout into the Hugging Face schema, validating every
    row."""
    path = tsv_path(task, split, root)
    rows = read_tsv_rows(path)
    position, first_data_line = column_positions(task, rows, path)
    rows = rows[first_data_line - 1 :]
    if not rows:
        raise DataError(f"{path} has no data rows")
    width = max(position.values()) + 1
    columns: dict[str, list] = {field: [] for field in task.text_fields}
    columns["label"], columns["idx"] = [], []
    for offset, row in enumerate(rows):
        line = first_data_line + offset
        if len(row) < width:
            raise DataError(
                f"{path}:{line}: row has {len(row)} tab-separated columns, expected at least "
                f"{width}"
            )
        for field in task.text_fields:
            columns[field].append(row[position[field]])
        columns["label"].append(parse_label(task, row[position["label"]], path, line))
        columns["idx"].append(offset)
    return typed_dataset(columns, schema(task))


def typed_dataset(columns: dict[str, list], features: datasets.Features) -> datasets.Dataset:
    """A dataset of columns whose values already have their features' types, each column made an
    Arrow array at once (`from_dict` encodes plain lists one value at a time)."""
    arrays = {
        name: pa.array(values, type=features[name].pa_type) for name, values in columns.items()
    }
    return datasets.Dataset.from_dict(arrays, features=features)


def schema(task: TaskSpec) -> datasets.Features:
    """Every task's split: its text fields, `label` (the class id, or the score) and `idx`."""
    return datasets.Features(
        {
            **{field: datasets.Value("string") for field in task.text_fields},
            "label": datasets.Value("float32") if task.regression else datasets.Value("int64"),
            "idx": datasets.Value("int32"),
        }
    )


def tsv_path(task: TaskSpec, split: str, root: Path) -> Path:
    """The split's file in the TSV layout under `root`, which must exist."""
    files: Mapping[str, str] = task.tsv.files
    if split not in files:
        raise DataError(
            f"task {task.name} has no split {split!r} in the TSV layout (known: {sorted(files)})"
        )
    path = root / task.tsv.dir / files[split]
    if not path.is_file():
        raise DataError(
            f"missing data file {path} for task {task.name}: the GLUE directory must hold "
            f"{task.tsv.dir}/{files[split]} (download_glue_data.py layout), or unset data.glue_dir "
            "/ $KDBENCH_GLUE_DIR to use the Hugging Face Hub"
        )
    return path


def column_positions(
    task: TaskSpec, rows: list[list[str]], path: Path
) -> tuple[dict[str, int], int]:
    """Each field's column (named by the header line in a file that has one) and the first data
    line's number."""
    if not task.tsv.header:
        return dict(task.tsv.columns), 1
    if not rows:
        raise DataError(f"{path} is empty: expected a header line and data rows")
    header = rows[0]
    for column in task.tsv.columns.values():
        if column not in header:
            raise DataError(
                f"{path}:1: header lacks column {column!r} (has {header}); is this the {task.name} "
                "file?"
            )
    return {field: header.index(column) for field, column in task.tsv.columns.items()}, 2


def read_tsv_rows(path: Path) -> list[list[str]]:
    """A tab-separated UTF-8 file's rows, as GLUE writes them (no quoting)."""
    csv.field_size_limit(sys.maxsize)
    with reading(
        path, "GLUE files are UTF-8 tab-separated text; replace it with the task's original file"
    ):
        with path.open(encoding="utf-8-sig", newline="") as handle:
            return list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))


def parse_label(task: TaskSpec, raw: str, path: Path, line: int) -> int | float:
    """A label string from a TSV row as the Hugging Face id (by name, or a numeric id in range)."""
    raw = raw.strip()
    if task.regression:
        try:
            score = float(raw)
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            raise DataError(
                f"{path}:{line}: label {raw!r} is not a finite number (task {task.name} is "
                "regression)"
            )
        return score
    names = list(task.labels)
    if raw in names:
        return names.index(raw)
    if raw.isascii() and raw.isdigit() and int(raw) < len(names):
        return int(raw)
    raise DataError(
        f"{path}:{line}: label {raw!r} is outside the label set {names} (or ids "
        f"0..{len(names) - 1})"
    )


def subset(ds: datasets.Dataset, limit: int | None, seed: int) -> datasets.Dataset:
    """The first `limit` examples after a seeded shuffle (all of them, in file order, when limit is
    None)."""
    if limit is None or limit >= len(ds):
        return ds
    return ds.shuffle(seed=seed).select(range(limit)).flatten_indices()


def tokenize(
    ds: datasets.Dataset, task: TaskSpec, tokenizer: PreTrainedTokenizerBase, max_length: int
):
    """Tokenise with the teacher's tokenizer, truncated to `max_length`, unpadded (padding is per
    batch); a stop signal ends it between batches."""

    def encode(batch):
        check_stop()
        texts = [batch[field] for field in task.text_fields]
        encoded = tokenizer(*texts, truncation=True, max_length=max_length)
        encoded["length"] = [len(ids) for ids in encoded["input_ids"]]
        return encoded

    with phase("tokenisation"):
        encoded = ds.map(
            encode,
            batched=True,
            desc=f"tokenising {task.name}",
            load_from_cache_file=False,
            new_fingerprint=tokenised_fingerprint(ds, task, tokenizer, max_length),
        )
    keep = [
        c
        for c in (*TOKEN_COLUMNS, "length", "label", "idx", "example", "origin")
        if c in encoded.column_names
    ]
    encoded = encoded.select_columns(keep).rename_column("label", "labels")
    encoded.set_format("torch")
    return encoded


def tokenised_fingerprint(ds: datasets.Dataset, task: TaskSpec, tokenizer, max_length: int) -> str:
    """The fingerprint `tokenize`'s dataset takes, from what determines it: the examples (by their
    own fingerprint), the text fields, the tokenizer (its fast backend's serialisation, else its
    class, name and size) and the length. `tokenize` never reads a result back, so the name only
    has to differ where the output does; left to datasets, it pickles the tokenizer to hash
    `encode`, at every call."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    tokens = (
        backend.to_str()
        if backend is not None
        else [type(tokenizer).__name__, str(tokenizer.name_or_path), len(tokenizer)]
    )
    key = [ds._fingerprint, list(task.text_fields), tokens, max_length]
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()[:32]


def train_subset(task: TaskSpec, data: DataSpec) -> datasets.Dataset:
    """The task's training examples a run uses (`data.train_limit` of them after a seeded shuffle),
    untokenised."""
    return subset(load_split(task, "train", data), data.train_limit, data.subset_seed)


def encode_train(
    train: datasets.Dataset, task: TaskSpec, tokenizer, max_length: int
) -> datasets.Dataset:
    """Training examples tokenised, numbered 0..N-1 by `example`: per-example state (CRD's memory
    banks, the cached teacher logits) is indexed by it."""
    return tokenize(
        train.add_column("example", list(range(len(train)))), task, tokenizer, max_length
    )


def dev_sets(
    task: TaskSpec, data: DataSpec, tokenizer, max_length: int
) -> dict[str, datasets.Dataset]:
    """The task's tokenised dev set(s), {metric suffix: dataset} (the first `data.eval_limit`
    examples of each)."""
    eval_sets = {}
    for suffix, split in task.eval_splits.items():
        dev = load_split(task, split, data)
        if data.eval_limit is not None:
            dev = dev.select(range(min(data.eval_limit, len(dev))))
        eval_sets[suffix] = tokenize(dev, task, tokenizer, max_length)
    return eval_sets


def task_datasets(task: TaskSpec, data: DataSpec, tokenizer, max_length: int):
    """The tokenised training subset and dev set(s) ({metric suffix: dataset}) of a task."""
    train = encode_train(train_subset(task, data), task, tokenizer, max_length)
    return train, dev_sets(task, data, tokenizer, max_length)
