"""The config groups read into their specs (`kdbench.planning.specs`), each checked on entry.

Everything a user can get wrong in a group fails here with one line (a ConfigError/DataError):
keys the group does not declare, values out of their declared range
(`kdbench.planning.group_keys`), missing data files, the labels of a given teacher, a model
shape whose heads do not divide its width.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import replace

from omegaconf import DictConfig, OmegaConf
from transformers import PretrainedConfig

from kdbench.errors import ConfigError, DataError
from kdbench.models.hub import check_saved_model, files_digest, saved_config
from kdbench.planning.declared import check_declared, with_defaults
from kdbench.planning.group_keys import TeacherKeys, declaration_at
from kdbench.planning.paths import local_path
from kdbench.planning.rules import shown
from kdbench.planning.specs import (
    AugmentSpec,
    CorpusSpec,
    DataSpec,
    HubDatasetSpec,
    LoggerSpec,
    ShapeSpec,
    TaskSpec,
    TeacherSpec,
    TsvLayout,
    from_mapping,
)
from kdbench.planning.trainer_specs import TRAINERS, TrainerSpec

GLUE_DIR_ENV = "KDBENCH_GLUE_DIR"


def container(node) -> dict | list:
    return OmegaConf.to_container(node, resolve=True)


def checked(node: DictConfig, at: str, declaration=None) -> dict:
    """The resolved values of the config group at config path `at`, each key declared and each
    value in its range (its `declaration`, by default the one at `at`:
    `kdbench.planning.group_keys.declaration_at`), one value of a list key as a list of one; a key
    interpolating another is checked after the others, so that an error names the source."""
    values = container(node)
    derived = {key for key in values if OmegaConf.is_interpolation(node, key)}
    in_order = dict(sorted(values.items(), key=lambda item: item[0] in derived))
    listed = check_declared(in_order, declaration or declaration_at(at), at)
    return {key: listed[key] for key in values}  # in the config's order


def trainer_spec(cfg: DictConfig) -> TrainerSpec:
    """The setting's trainer spec (`kdbench.planning.trainer_specs.TRAINERS`); the keys only other
    settings read are left out."""
    values = checked(cfg.trainer, "trainer")
    return from_mapping(TRAINERS[cfg.setting.name], values, "trainer")


def task_spec(task: DictConfig) -> TaskSpec:
    """The task: a GLUE task (its Hub config and TSV layout), or the user's own data
    (`conf/task/custom.yaml`)."""
    values = checked(task, "task")
    if "tsv" not in values:
        return user_task_spec(values)
    tsv = values["tsv"]
    for field, column in tsv["columns"].items():
        if isinstance(column, str) != tsv["header"]:
            raise ConfigError(
                f"task.tsv.columns.{field}={shown(column)} does not fit task.tsv.header="
                f"{shown(tsv['header'])}: name the columns of a file with a header, number those "
                "of "
                "a file without one (from 0)"
            )
    return TaskSpec(
        task.name,
        task.hf_config,
        tuple(task.text_fields),
        tuple(task.labels),
        tuple(task.metrics),
        dict(task.eval_splits),
        TsvLayout(tsv["dir"], tsv["header"], tsv["columns"], tsv["files"]),
    )


def user_task_spec(values: dict) -> TaskSpec:
    """A task of the user's files or Hub dataset, its data checked on entry
    (`kdbench.data.user_data`); a test file is evaluated after the validation split (`_test`)."""
    from kdbench.data.user_data import describe

    where, labels, metrics, content = describe(values)
    evals = dict(values["eval_splits"]) | ({"test": "test"} if "test" in where.files else {})
    return TaskSpec(
        values["name"],
        None,
        tuple(values["text_columns"]),
        labels,
        metrics,
        evals,
        None,
        where,
        content,
    )


def matching_labels(task: TaskSpec, teacher: TeacherSpec) -> TaskSpec:
    """The task, its labels checked against a given fine-tuned teacher's: by name (its id2label)
    where it names them, else by count; inferred labels of the user's data take the teacher's
    order."""
    if teacher.finetuned_path is None:
        return task
    conf = saved_config(teacher.finetuned_path, "the fine-tuned teacher")
    names = tuple(str(conf.id2label[i]) for i in range(conf.num_labels))
    where = f"teacher.finetuned_path={teacher.finetuned_path}"
    if conf.num_labels != task.num_labels:
        raise ConfigError(
            f"{where} has {conf.num_labels} output(s) and task {task.name} needs "
            f"{task.num_labels}: give a teacher fine-tuned on this task"
        )
    if task.regression or all(name == f"LABEL_{i}" for i, name in enumerate(names)):
        return task
    folded, ours = [name.casefold() for name in names], [label.casefold() for label in task.labels]
    if folded == ours:
        return task
    if sorted(folded) == sorted(ours) and task.user_data is not None:
        by_name = {label.casefold(): label for label in task.labels}
        return replace(task, labels=tuple(by_name[name] for name in folded))
    raise ConfigError(
        f"{where} predicts the labels {list(names)} and task {task.name} has "
        f"{list(task.labels)}: give a teacher fine-tuned on these labels, or set "
        "task.label_names in the teacher's order"
    )


def data_spec(data: DictConfig) -> DataSpec:
    """The data source: the configured GLUE folder, else $KDBENCH_GLUE_DIR, else (None) the Hugging
    Face Hub."""
    values = checked(data, "data")
    chosen = values.get("glue_dir") or os.environ.get(GLUE_DIR_ENV)
    glue_dir = local_path(chosen) if chosen else None
    if glue_dir is not None and not glue_dir.is_dir():
        raise DataError(
            f"GLUE directory {glue_dir} does not exist: point data.glue_dir or ${GLUE_DIR_ENV} at "
            "a folder "
            "in the download_glue_data.py layout (CoLA/train.tsv, SST-2/dev.tsv, ...)"
        )
    return from_mapping(DataSpec, values | {"glue_dir": glue_dir}, "data")


def shape_spec(shape: DictConfig, at: str, name: str | None = None) -> ShapeSpec:
    """The model shape at config path `at` (student, teacher.shape, augment.mlm_shape), named `name`
    (default: `at`) where it has no name of its own."""
    values = checked(shape, at, ShapeSpec)
    values.setdefault("name", name or at)
    spec = from_mapping(ShapeSpec, values, at)
    if spec.hidden_size % spec.num_heads:
        raise ConfigError(
            f"{at}.hidden_size={spec.hidden_size} is not divisible by "
            f"{at}.num_heads={spec.num_heads}: "
            "choose a head count that divides the width"
        )
    return spec


def teacher_spec(teacher: DictConfig) -> TeacherSpec:
    values = with_defaults(checked(teacher, "teacher"), TeacherKeys)
    shape = (
        shape_spec(teacher.shape, "teacher.shape", f"teacher {teacher.name}")
        if values["shape"] is not None
        else None
    )
    finetuned = local_path(values["finetuned_path"]) if values["finetuned_path"] else None
    if finetuned is not None and not (finetuned / "config.json").is_file():
        raise ConfigError(
            "cannot load the fine-tuned teacher from "
            f"teacher.finetuned_path={teacher.finetuned_path}: "
            "no config.json there; give a folder written by save_pretrained, or null to fine-tune "
            "the teacher"
        )
    if finetuned is not None:
        check_saved_model(finetuned, "the fine-tuned teacher")
    return TeacherSpec(
        values["name"],
        values["name_or_path"],
        shape,
        values["has_mlm_head"],
        finetuned,
        container(teacher),
    )


def hub_datasets(entries: list[dict]) -> tuple[HubDatasetSpec, ...]:
    """`corpus.hf_datasets`' checked entries with their defaults; one without `path` is refused."""
    return tuple(
        from_mapping(
            HubDatasetSpec, with_defaults(entry, HubDatasetSpec), f"corpus.hf_datasets.{i}"
        )
        for i, entry in enumerate(entries)
    )


def corpus_spec(corpus: DictConfig) -> CorpusSpec:
    """The raw text, validated before any work: a local corpus names an existing path and a known
    format."""
    from kdbench.data.readers import READERS

    values = with_defaults(checked(corpus, "corpus"), CorpusSpec)
    if values["hf_datasets"]:  # streamed once into a local text file
        hub = {"hf_datasets": hub_datasets(values["hf_datasets"]), "path": None, "format": "text"}
        return from_mapping(CorpusSpec, values | hub, "corpus")
    if values["format"] not in READERS:
        raise ConfigError(
            f"corpus.format={values['format']!r}; valid: {', '.join(sorted(READERS))}"
        )
    if not values["path"]:
        raise ConfigError(
            "corpus=local needs corpus.path (a text file or a folder of them) or $KDBENCH_CORPUS"
        )
    path = local_path(corpus.path)
    if not path.exists():
        raise ConfigError(
            f"corpus.path={corpus.path} does not exist: give a text file or a folder of them"
        )
    return from_mapping(CorpusSpec, values | {"path": path}, "corpus")


def augment_spec(augment: DictConfig, setting: str) -> AugmentSpec | None:
    """The `augment` group checked: its keys declared and in range
    (`kdbench.planning.group_keys.AugmentKeys`), a word-vectors file that exists."""
    if augment.name == "none":
        return None
    if setting != "task_specific":
        raise ConfigError(
            f"augment={augment.name} augments a task's training set: it needs "
            "setting=task_specific, "
            f"not {setting}; use augment=none"
        )
    values = {k: v for k, v in checked(augment, "augment").items() if k != "name"}
    if values.get("mlm_shape") is not None:
        values["mlm_shape"] = shape_spec(augment.mlm_shape, "augment.mlm_shape")
    if values.get("word_vectors"):
        values["word_vectors"] = local_path(values["word_vectors"])
        if not values["word_vectors"].is_file():
            raise ConfigError(
                f"augment.word_vectors={augment.word_vectors} does not exist: give a GloVe text "
                "file "
                "(e.g. glove.42B.300d.txt from nlp.stanford.edu/projects/glove), or null to keep "
                "multi-piece words"
            )
    return from_mapping(AugmentSpec, values, "augment")


def logger_spec(cfg: DictConfig, design: tuple) -> LoggerSpec:
    """The logger; its run's name joins `design`, what sets the run apart from the other jobs of a
    sweep (the task, the student's objective, shape, init and seed; a fine-tuning's grid point),
    less its parts that are None."""
    settings = {k: v for k, v in checked(cfg.logger, "logger").items() if k != "name"}
    name = "-".join(str(part) for part in design if part is not None)
    return LoggerSpec(cfg.logger.name, settings, name)


def check_data_files(task: TaskSpec, data: DataSpec) -> None:
    """With a local GLUE directory, every split the run reads must exist (read errors come with line
    numbers later)."""
    if data.glue_dir is None or task.tsv is None:
        return
    for split in task.splits:
        files = task.tsv.files
        if split not in files or not (data.glue_dir / task.tsv.dir / files[split]).is_file():
            where = data.glue_dir / task.tsv.dir / files.get(split, f"<{split}>")
            raise ConfigError(
                f"task {task.name} needs {where}, which is missing: the local GLUE directory lacks "
                "this "
                "task or split; choose another task, or unset data.glue_dir / $KDBENCH_GLUE_DIR to "
                "use the Hub"
            )


def with_glue_content(task: TaskSpec, data: DataSpec) -> TaskSpec:
    """A GLUE task read from a local folder, keyed by what it reads there (`content_hash`): the
    bytes of the splits a run reads and how it reads them (text fields, label names, layout), so a
    file written again or read another way gives new cache entries."""
    if data.glue_dir is None or task.tsv is None:
        return task
    files = [data.glue_dir / task.tsv.dir / task.tsv.files[split] for split in task.splits]
    reading = [task.text_fields, task.labels, task.tsv.header, dict(task.tsv.columns)]
    key = json.dumps([reading, files_digest(files)], sort_keys=True)
    return replace(task, content_hash=hashlib.sha256(key.encode()).hexdigest()[:16])


def check_positions(
    conf: PretrainedConfig, trainer: TrainerSpec, corpus: CorpusSpec | None
) -> None:
    """The sequences fit the model's position embeddings (RoBERTa's positions start after its
    padding id)."""
    key, length = (
        ("corpus.seq_len", corpus.seq_len) if corpus else ("trainer.max_length", trainer.max_length)
    )
    positions = conf.max_position_embeddings - (
        conf.pad_token_id + 1 if "roberta" in conf.model_type else 0
    )
    if length > positions:
        raise ConfigError(
            f"{key}={length} is longer than the model's {positions} positions (its max_positions): "
            f"lower {key}"
        )
