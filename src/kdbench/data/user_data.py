"""A task of the user's own data: files (CSV, TSV, JSON/JSONL, Parquet) or a Hub dataset, read with
`datasets`.

`describe` checks the data where it enters (before any heavy work) and finds what the task is: its
label names, its metrics and a hash of its content; it warns of given splits that share inputs with
train. `split_columns` gives a split in the schema every task has: the text columns, `label` (the
label's id, or its value for a regression) and `idx` (the row number in its split). A CSV file's
cells are missing only where empty (`NA`, `None` and `null` are text) and its labels are read as
written (`01` stays `01`).
"""

from __future__ import annotations

import hashlib
import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import datasets
from pandas.errors import ParserWarning

from kdbench.data.carving import carve, warn_shared
from kdbench.data.columns import column_list
from kdbench.data.files import DELIMITERS, TAB, check_utf8, csv_delimiter, folder_files, no_rows
from kdbench.data.labels import check_known, class_names, label_text, label_values, number
from kdbench.data.texts import check_text, check_whole_rows
from kdbench.errors import ConfigError, DataError
from kdbench.planning.specs import UserData
from kdbench.runtime.loggers import library_progress_bars
from kdbench.runtime.storage import sha256_of

FORMATS = {".csv": "csv", ".tsv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}
SPLIT_FILES = {"train": "train_file", "validation": "validation_file", "test": "test_file"}
CLASS_METRICS = ("accuracy", "f1", "f1_macro", "mcc")
REGRESSION_METRICS = ("pearson", "spearman")


def data_file(value, key: str) -> Path:
    """The configured data file `task.<key>`: an existing file of a known format."""
    path, kinds = Path(str(value)).expanduser(), ", ".join(FORMATS)
    if path.is_dir():
        raise ConfigError(f"task.{key}={value} is a folder: give a data file ({kinds})")
    if not path.is_file():
        raise ConfigError(
            f"task.{key}={value} does not exist: give an existing data file ({kinds})"
        )
    if path.suffix.lower() not in FORMATS:
        raise ConfigError(
            f"task.{key}={value} is not a data file kdbench reads: give a {kinds} file"
        )
    return path


def user_data(task: dict) -> UserData:
    """Where the task's data lives, from its config (`conf/task/custom.yaml`'s keys)."""
    if bool(task.get("train_file")) == bool(task.get("dataset_name")):
        raise ConfigError(
            f"task={task['name']} needs its data: task.train_file=... (a file) or "
            "task.dataset_name=... (a Hub dataset), one of them"
        )
    text_fields = tuple(task["text_columns"])
    if len(text_fields) not in (1, 2):
        raise ConfigError(
            f"task.text_columns={list(text_fields)} must name one text column, or two for a pair"
        )
    files = {
        split: data_file(task[key], key) for split, key in SPLIT_FILES.items() if task.get(key)
    }
    name, config = task.get("dataset_name"), task.get("dataset_config")
    if name and (local := folder_files(Path(str(name)).expanduser(), FORMATS)):
        files, name = local, None  # read as the files they are, as task.train_file=... is
    formats = {FORMATS[path.suffix.lower()] for path in files.values()}
    if len(formats) > 1:
        raise ConfigError(
            f"the data files ({', '.join(sorted(map(str, files.values())))}) differ in "
            "format: give every split in one format"
        )
    carve = "validation" not in (hub_splits(str(name), config) if name else files)
    return UserData(
        files,
        formats.pop() if formats else None,
        name and str(name),
        config,
        task["label_column"],
        task["validation_fraction"],
        task["split_seed"],
        carve,
        task.get("delimiter"),
        text_fields,
    )


def hub_splits(name: str, config: str | None) -> list[str]:
    """The splits of a Hub dataset (or of a local folder in the Hub's layout: train.csv,
    validation.csv, ...)."""
    try:
        with quiet():
            return datasets.get_dataset_split_names(name, config)
    except Exception as exc:  # the Hub client raises many types
        raise DataError(
            f"cannot read the dataset task.dataset_name={name} ({type(exc).__name__}): "
            "give a Hub dataset id (offline: one in the local Hugging Face cache) or a "
            "folder in the Hub layout (train.csv, validation.csv, ...)"
        ) from exc


def where(user: UserData, split: str) -> str:
    """How messages name a split's source: its file, or the Hub dataset and split."""
    if split in user.files:
        return str(user.files[split])
    hub = f"{user.dataset_name}{'/' + user.dataset_config if user.dataset_config else ''}"
    if user.carve and split == "validation":
        source = user.files.get("train") or f"{hub} split train"
        return f"{source} (the validation split carved from it)"
    return f"{hub} split {split}"


def read_raw(user: UserData, split: str) -> datasets.Dataset:
    """A split as stored, every column (the carved validation split is cut from train here)."""
    if user.carve and split in ("train", "validation"):
        return carved(user, read_source(user, "train"), split)
    return read_source(user, split)


def carved(user: UserData, train: datasets.Dataset, split: str) -> datasets.Dataset:
    """The `split` ("train" or "validation") carved from the training data `train` (`carve`)."""
    rows = carve(
        train,
        user.text_fields,
        user.label_column,
        user.validation_fraction,
        user.split_seed,
        where(user, "train"),
    )
    return train.select(rows[split == "validation"])


@contextmanager
def quiet() -> Iterator[None]:
    """`datasets` without its progress bars and its own error log lines (an error on entry stays
    one line, kdbench's)."""
    verbosity = datasets.logging.get_verbosity()
    datasets.logging.set_verbosity(logging.CRITICAL)
    try:
        with library_progress_bars(False):
            yield
    finally:
        datasets.logging.set_verbosity(verbosity)


def read_source(user: UserData, split: str) -> datasets.Dataset:
    """A split as stored (a file, or the Hub dataset's split), refused in one line when it cannot be
    read or is empty."""
    options = {} if user.dataset_name else file_options(user, user.files[split])
    try:
        with quiet(), warnings.catch_warnings():
            warnings.simplefilter("error", ParserWarning)  # a row longer than its header
            if user.dataset_name:
                ds = datasets.load_dataset(user.dataset_name, user.dataset_config, split=split)
            else:
                ds = datasets.load_dataset(
                    user.format, data_files={split: str(user.files[split])}, split=split, **options
                )
    except Exception as exc:  # parsers and the Hub client raise many types
        if split in user.files and no_rows(user.files[split]):
            raise empty(user, split) from None
        raise unreadable(user, split, exc, options.get("delimiter")) from exc
    if len(ds) == 0:
        raise empty(user, split)
    return ds


def file_options(user: UserData, path: Path) -> dict:
    """How `datasets` reads the file `path`, checked to be UTF-8 text unless Parquet: under a
    config name holding its content's hash (else its cache is keyed by the file's modification
    time, which an edit can keep), and for a CSV file with its delimiter, only an empty cell
    missing and the label column as text."""
    if user.format != "parquet":
        check_utf8(path, "re-encode the file as UTF-8")
    options = {"name": f"sha256-{sha256_of(path)}"}
    if user.format != "csv":
        return options
    return options | {
        "delimiter": csv_delimiter(path, user.delimiter),
        "keep_default_na": False,
        "na_values": [""],
        "index_col": False,
        "converters": {user.label_column: str},
    }


def unreadable(user: UserData, split: str, exc: Exception, delimiter: str | None) -> DataError:
    """The error for a split that cannot be read: the parser's own words (the cause `datasets`
    wraps), and for a CSV file the delimiter it was read with and the key that sets it."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    if isinstance(exc, ParserWarning):
        reason = "its first row has more fields than its header"
    if delimiter is None:
        return DataError(
            f"cannot read {where(user, split)} ({reason}): give a readable "
            f"{user.format or 'Hub'} dataset with a header naming its columns"
        )
    used = f"task.delimiter={delimiter!r}" if user.delimiter else f"the delimiter {delimiter!r}"
    return DataError(
        f"cannot read {where(user, split)} with {used} ({reason}): set task.delimiter to the "
        f"file's delimiter (e.g. \"task.delimiter=';'\" or \"task.delimiter='{TAB}'\"), or quote "
        "the fields that hold it"
    )


def empty(user: UserData, split: str) -> DataError:
    return DataError(
        f"{where(user, split)} is empty: give a file with a header and at least one example"
    )


def check_columns(ds: datasets.Dataset, user: UserData, split: str) -> None:
    """The text columns hold text and the label column exists."""
    for column in (*user.text_fields, user.label_column):
        if column not in ds.column_names:
            key = "task.label_column" if column == user.label_column else "task.text_columns"
            fix = f"set {key} to its columns"
            if user.format == "csv" and any(set(DELIMITERS) & set(n) for n in ds.column_names):
                fix = "set task.delimiter to the file's delimiter (its header holds one)"
            raise DataError(
                f"{where(user, split)} has no column {column!r} (it has "
                f"{', '.join(ds.column_names)}): {fix}"
            )
    for column in user.text_fields:
        check_text(ds, column, where(user, split))


def task_metrics(metric, regression: bool, num_classes: int) -> tuple[str, ...]:
    """The task's metrics (the first one its score): as configured, or the kind's default."""
    valid = REGRESSION_METRICS if regression else CLASS_METRICS
    metrics = tuple(metric) if metric else valid[:2] if regression else ("accuracy",)
    for name in metrics:
        if name not in valid:
            kind = "a regression" if regression else "classes"
            raise ConfigError(f"task.metric={name} does not fit {kind}: use {', '.join(valid)}")
        if name == "f1" and num_classes > 2:
            raise ConfigError(
                f"task.metric=f1 is binary F1, and the task has {num_classes} classes: use f1_macro"
            )
    return metrics


def content_hash(user: UserData, raw: dict[str, datasets.Dataset], reading: tuple) -> str:
    """Identifies the data as the task reads it: the bytes of its files, or the Hub dataset's name
    and `datasets` fingerprints, and `reading` (its columns, classes or regression, and split), so
    that a cache built for one reading is never another's."""
    digest = hashlib.sha256(repr(reading).encode())
    for split, path in sorted(user.files.items()):
        digest.update(split.encode())
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    if user.dataset_name:
        digest.update(f"{user.dataset_name}/{user.dataset_config}".encode())
        for split, ds in sorted(raw.items()):
            digest.update(f"{split}:{ds._fingerprint}".encode())
    return digest.hexdigest()[:16]


def describe(task: dict) -> tuple[UserData, tuple[str, ...], tuple[str, ...], str]:
    """The task's data checked on entry, and (where it lives, its label names, its metrics, its
    content hash)."""
    user, regression = user_data(task), task["regression"]
    splits = [
        "train",
        *([] if user.carve else ["validation"]),
        *(["test"] if "test" in user.files else []),
    ]
    raw = {split: read_source(user, split) for split in splits}
    labels = {split: checked_labels(ds, user, split, regression) for split, ds in raw.items()}
    given, train = task.get("label_names"), where(user, "train")
    check_quotes(user, raw, labels, regression, given)
    names = () if regression else class_names(labels["train"], train, given)
    for split in splits if names else ():
        check_known(labels[split], names, where(user, split), train, given)
    if user.carve:  # carving refuses data it cannot split: here, before any heavy work
        carved(user, raw["train"], "validation")
    for split in splits[1:]:
        sources = (where(user, split), where(user, "train"))
        warn_shared(raw[split], raw["train"], user.text_fields, sources)
    metrics = task_metrics(task.get("metric"), regression, len(names))
    carving = ("distinct inputs by label", user.validation_fraction, user.split_seed)
    reading = (
        user.label_column,
        user.delimiter,
        carving if user.carve else None,
        user.text_fields,
        names,
        regression,
    )
    return user, names, metrics, content_hash(user, raw, reading)


def check_quotes(user: UserData, raw: dict, labels: dict, regression: bool, given) -> None:
    """No text of a CSV file's split (`raw`) holds a whole row (`check_whole_rows`): a line ending
    in the delimiter and a number for a regression, else a label read in a split (`labels`) or
    given (`task.label_names`)."""
    known = {str(name) for name in given or ()}.union(*labels.values())

    def is_label(text: str) -> bool:
        label = label_text(text) or ""
        return number(label) is not None if regression else label in known

    for split in raw if user.format == "csv" else ():
        delimiter, source = csv_delimiter(user.files[split], user.delimiter), where(user, split)
        for field in user.text_fields:
            texts = column_list(raw[split], field)
            check_whole_rows(texts, source, delimiter, is_label)


def checked_labels(ds: datasets.Dataset, user: UserData, split: str, regression: bool) -> list:
    """The labels of a split as stored, its columns checked (`check_columns`, `label_values`)."""
    check_columns(ds, user, split)
    values = column_list(ds, user.label_column)
    return label_values(values, where(user, split), user.label_column, regression)


def split_columns(task, split: str) -> dict[str, list]:
    """A split of the task (a TaskSpec with `user_data`) as columns of the common schema: the text
    columns, `label` and `idx`."""
    user = task.user_data
    ds = read_raw(user, split)
    ids = {name: i for i, name in enumerate(task.labels)}
    labels = [
        number(label_text(v)) if task.regression else ids[label_text(v)]
        for v in column_list(ds, user.label_column)
    ]
    texts = {field: column_list(ds, field) for field in task.text_fields}
    return texts | {"label": labels, "idx": list(range(len(ds)))}
