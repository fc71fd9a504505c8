"""GLUE loading (Hugging Face `datasets` or a local TSV directory), tokenisation and batching.

Both sources yield a `datasets.Dataset` with the task's Hugging Face text fields, `label` (Hugging Face
label ids) and `idx` (the example's row number in its split), so everything downstream is source-agnostic.
"""

from __future__ import annotations

import csv
import os
import sys
from collections.abc import Mapping
from pathlib import Path

import datasets
import torch
from omegaconf import DictConfig
from torch.utils.data import DataLoader
from transformers import DataCollatorWithPadding, PreTrainedTokenizerBase

from kdbench.errors import DataError

GLUE_DIR_ENV = "KDBENCH_GLUE_DIR"
TOKEN_COLUMNS = ("input_ids", "attention_mask", "token_type_ids")


def glue_dir(data_cfg: DictConfig) -> Path | None:
    """The local GLUE directory (config first, then $KDBENCH_GLUE_DIR); None means the Hugging Face Hub."""
    chosen = data_cfg.get("glue_dir") or os.environ.get(GLUE_DIR_ENV)
    if not chosen:
        return None
    path = Path(chosen).expanduser()
    if not path.is_dir():
        raise DataError(
            f"GLUE directory {path} does not exist: point data.glue_dir or ${GLUE_DIR_ENV} at a folder "
            "in the download_glue_data.py layout (CoLA/train.tsv, SST-2/dev.tsv, ...)"
        )
    return path


def is_regression(task: DictConfig) -> bool:
    return len(task.labels) == 0


def num_labels(task: DictConfig) -> int:
    return 1 if is_regression(task) else len(task.labels)


def load_split(task: DictConfig, split: str, data_cfg: DictConfig) -> datasets.Dataset:
    """One split ("train", "validation", "validation_matched", ...) of a GLUE task from the configured source."""
    local = glue_dir(data_cfg)
    if local is not None:
        return read_tsv_split(task, split, local)
    return load_hf_split(task, split, data_cfg.hf_dataset)


def load_hf_split(task: DictConfig, split: str, hf_dataset: str) -> datasets.Dataset:
    try:
        ds = datasets.load_dataset(hf_dataset, task.hf_config, split=split)
    except Exception as exc:  # the Hub client raises many types: network, missing config, missing split
        raise DataError(
            f"could not load {hf_dataset}/{task.hf_config} split {split!r} with Hugging Face datasets "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); offline, set "
            f"${GLUE_DIR_ENV} or data.glue_dir to a local GLUE directory in the TSV layout"
        ) from exc
    return ds.select_columns([*task.text_fields, "label", "idx"])


def read_tsv_split(task: DictConfig, split: str, root: Path) -> datasets.Dataset:
    """Read one split of the classic GLUE TSV layout into the Hugging Face schema, validating every row."""
    files: Mapping[str, str] = task.tsv.files
    if split not in files:
        raise DataError(f"task {task.name} has no split {split!r} in the TSV layout (known: {sorted(files)})")
    path = root / task.tsv.dir / files[split]
    if not path.is_file():
        raise DataError(
            f"missing data file {path} for task {task.name}: the GLUE directory must hold "
            f"{task.tsv.dir}/{files[split]} (download_glue_data.py layout), or unset data.glue_dir "
            f"/ ${GLUE_DIR_ENV} to use the Hugging Face Hub"
        )
    csv.field_size_limit(sys.maxsize)
    with path.open(encoding="utf-8-sig", newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    first_data_line = 1
    if task.tsv.header:
        if not rows:
            raise DataError(f"{path} is empty: expected a header line and data rows")
        header, rows, first_data_line = rows[0], rows[1:], 2
        position = {}
        for field, column in task.tsv.columns.items():
            if column not in header:
                raise DataError(f"{path}:1: header lacks column {column!r} (has {header}); is this the {task.name} file?")
            position[field] = header.index(column)
    else:
        position = dict(task.tsv.columns)
    if not rows:
        raise DataError(f"{path} has no data rows")

    width = max(position.values()) + 1
    columns: dict[str, list] = {field: [] for field in task.text_fields}
    columns["label"], columns["idx"] = [], []
    for offset, row in enumerate(rows):
        line = first_data_line + offset
        if len(row) < width:
            raise DataError(f"{path}:{line}: row has {len(row)} tab-separated columns, expected at least {width}")
        for field in task.text_fields:
            columns[field].append(row[position[field]])
        columns["label"].append(parse_label(task, row[position["label"]], path, line))
        columns["idx"].append(offset)
    features = datasets.Features(
        {
            **{field: datasets.Value("string") for field in task.text_fields},
            "label": datasets.Value("float32") if is_regression(task) else datasets.Value("int64"),
            "idx": datasets.Value("int32"),
        }
    )
    return datasets.Dataset.from_dict(columns, features=features)


def parse_label(task: DictConfig, raw: str, path: Path, line: int) -> int | float:
    """A label string from a TSV row as the Hugging Face id (by name, or a numeric id in range)."""
    raw = raw.strip()
    if is_regression(task):
        try:
            return float(raw)
        except ValueError:
            raise DataError(f"{path}:{line}: label {raw!r} is not a number (task {task.name} is regression)") from None
    names = list(task.labels)
    if raw in names:
        return names.index(raw)
    if raw.isdigit() and int(raw) < len(names):
        return int(raw)
    raise DataError(f"{path}:{line}: label {raw!r} is outside the label set {names} (or ids 0..{len(names) - 1})")


def subset(ds: datasets.Dataset, limit: int | None, seed: int) -> datasets.Dataset:
    """The first `limit` examples after a seeded shuffle (all of them, in file order, when limit is None)."""
    if limit is None or limit >= len(ds):
        return ds
    return ds.shuffle(seed=seed).select(range(limit)).flatten_indices()


def tokenize(ds: datasets.Dataset, task: DictConfig, tokenizer: PreTrainedTokenizerBase, max_length: int):
    """Tokenise with the teacher's tokenizer, truncated to `max_length`, unpadded (padding is per batch)."""

    def encode(batch):
        texts = [batch[field] for field in task.text_fields]
        encoded = tokenizer(*texts, truncation=True, max_length=max_length)
        encoded["length"] = [len(ids) for ids in encoded["input_ids"]]
        return encoded

    encoded = ds.map(encode, batched=True, desc=f"tokenising {task.name}", load_from_cache_file=False)
    keep = [c for c in (*TOKEN_COLUMNS, "length", "label", "idx", "example") if c in encoded.column_names]
    encoded = encoded.select_columns(keep).rename_column("label", "labels")
    encoded.set_format("torch")
    return encoded


class SeededBatches(torch.utils.data.Sampler):
    """Batches of example indices, reproducible per (seed, epoch), resumable mid-epoch.

    `shuffle`: a fresh seeded permutation each epoch. `group_by_length`: the permutation is cut into chunks of
    `megabatch` batches, each chunk sorted by length and split into batches whose order is shuffled again
    (batches of similar length, so dynamic padding wastes little). Without shuffling, batches are in length
    order (evaluation: the same examples, less padding). `set_epoch(epoch, start_batch)` positions the sampler
    (resume); `len()` is always the full epoch.
    """

    def __init__(self, lengths, batch_size: int, *, shuffle: bool, seed: int = 0, group_by_length: bool = False,
                 megabatch: int = 50):
        self.lengths = torch.as_tensor(lengths)
        self.batch_size, self.shuffle, self.seed = batch_size, shuffle, seed
        self.group_by_length, self.megabatch = group_by_length, megabatch
        self.epoch, self.start_batch = 0, 0

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        self.epoch, self.start_batch = epoch, start_batch

    def batches(self, epoch: int) -> list[list[int]]:
        n = len(self.lengths)
        if not self.shuffle:
            order = torch.sort(self.lengths, descending=True, stable=True).indices
            return [chunk.tolist() for chunk in order.split(self.batch_size)]
        generator = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
        order = torch.randperm(n, generator=generator)
        if not self.group_by_length:
            return [chunk.tolist() for chunk in order.split(self.batch_size)]
        batches = []
        for chunk in order.split(self.batch_size * self.megabatch):
            by_length = chunk[torch.sort(self.lengths[chunk], descending=True, stable=True).indices]
            batches.extend(by_length.split(self.batch_size))
        shuffled = torch.randperm(len(batches), generator=generator)
        return [batches[i].tolist() for i in shuffled]

    def __iter__(self):
        yield from self.batches(self.epoch)[self.start_batch:]

    def __len__(self) -> int:
        return -(-len(self.lengths) // self.batch_size)


def make_loader(encoded, tokenizer, batch_size: int, *, shuffle: bool, seed: int = 0,
                group_by_length: bool = False) -> DataLoader:
    """Batches padded to their own longest example (dynamic padding), from a seeded, resumable sampler."""
    sampler = SeededBatches(encoded["length"], batch_size, shuffle=shuffle, seed=seed, group_by_length=group_by_length)
    # A private generator: creating an iterator must not draw from the global RNG (dropout's), or a resumed
    # run would diverge from an uninterrupted one.
    return DataLoader(encoded, batch_sampler=sampler, collate_fn=DataCollatorWithPadding(tokenizer),
                      generator=torch.Generator().manual_seed(seed))
