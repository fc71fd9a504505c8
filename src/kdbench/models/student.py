"""The student: the teacher's model family at the student's depth and width, built, initialised from
the teacher's blocks and heads, and saved with its distillation chain."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from transformers import (
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    PretrainedConfig,
    PreTrainedModel,
)

from kdbench.models.anatomy import (
    MLM_HEADS,
    TASK_HEADS,
    embeddings,
    encoder_layers,
    prediction_head,
)
from kdbench.models.attention import prepare_for_training
from kdbench.models.configs import student_config
from kdbench.models.hub import load_model
from kdbench.planning.specs import InitSpec, ShapeSpec
from kdbench.records.record import CHAIN_FILE, PROJECTIONS_FILE, write_json
from kdbench.runtime import storage


def save_student(
    student: PreTrainedModel,
    tokenizer,
    folder: Path,
    chain: tuple[str, ...],
    *,
    labels: tuple[str, ...] | None = None,
    card: str | None = None,
    projections: dict | None = None,
    max_length: int | None = None,
) -> None:
    """The student, its tokenizer and its distillation chain in `folder`, sealed with a manifest (so
    a copy cut short is refused by name when it is loaded), written whole or not at all. `labels`
    name a task student's classes, () for a regression (`describe_task_head`), None for a student
    without a task head; `card` is its model card (README.md); `projections`: the objective's
    learnt W_e/W_h (`Objective.projections.state_dict()`), kept for a later stage that carries
    them; `max_length`: the tokens it was trained and scored on, where a truncating tokenizer
    stops (`model_max_length`)."""
    if labels is not None:
        describe_task_head(student.config, labels)
    tmp = folder.with_name(f".{folder.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    with storage.space_for(folder, storage.tensor_bytes(student.state_dict()), partial=tmp):
        student.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        if max_length is not None:
            limit_tokens(tmp / "tokenizer_config.json", max_length)
        write_json(tmp / CHAIN_FILE, {"chain": list(chain)})
        if card is not None:
            (tmp / "README.md").write_text(card)
        if projections:
            torch.save(projections, tmp / PROJECTIONS_FILE)
        if folder.exists():
            shutil.rmtree(folder)
        storage.publish(tmp, folder)


def limit_tokens(tokenizer_config: Path, max_length: int) -> None:
    """A saved tokenizer's `model_max_length` at `max_length`: with `truncation=True` (a pipeline's
    too) it reads what the model was trained on."""
    config = json.loads(tokenizer_config.read_text())
    write_json(tokenizer_config, config | {"model_max_length": max_length})


def describe_task_head(config: PretrainedConfig, labels: tuple[str, ...]) -> None:
    """The task head as `pipeline("text-classification")` reads it: named classes (id2label, and a
    softmax over them), or for a regression (no `labels`) one raw score, no function applied (its
    default for one output is a sigmoid)."""
    if not labels:
        config.problem_type = "regression"
        return
    config.problem_type = "single_label_classification"
    config.id2label = dict(enumerate(labels))
    config.label2id = {name: i for i, name in enumerate(labels)}


def build_student(
    teacher_conf: PretrainedConfig,
    shape: ShapeSpec,
    num_labels: int,
    seed: int,
    *,
    mlm: bool = False,
    dropout: float | None = None,
) -> PreTrainedModel:
    """A random student, with every dropout at `dropout` (`with_dropout`); `mlm`: with an MLM head
    (saved with save_pretrained, it loads with AutoModel and fine-tunes on GLUE), else a sequence
    classifier."""
    auto = AutoModelForMaskedLM if mlm else AutoModelForSequenceClassification
    torch.manual_seed(seed)
    student = auto.from_config(student_config(teacher_conf, shape, 2 if mlm else num_labels))
    return with_dropout(student, dropout)


def with_dropout(model: PreTrainedModel, dropout: float | None) -> PreTrainedModel:
    """`model` with every dropout module (hidden, attention, classifier) at `dropout`; None leaves
    its config's. The modules take it, not the config: the saved student keeps its family's
    dropout, so fine-tuning it and using it see that one, not the distillation's."""
    if dropout is not None:
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = dropout
    return model


def init_from_teacher(student: PreTrainedModel, teacher: PreTrainedModel, init: InitSpec) -> None:
    """Copy teacher block init.layers[i] into student block i, the embeddings (with the MLM head,
    where both have one) when `init.copy_embeddings`, and the task head (pooler, classifier) when
    `init.copy_head`."""
    student_blocks, teacher_blocks = encoder_layers(student), encoder_layers(teacher)
    for student_index, teacher_layer in enumerate(init.layers):
        student_blocks[student_index].load_state_dict(
            teacher_blocks[teacher_layer - 1].state_dict()
        )
    copied = (MLM_HEADS if init.copy_embeddings else ()) + (TASK_HEADS if init.copy_head else ())
    if init.copy_embeddings:
        embeddings(student).load_state_dict(embeddings(teacher).state_dict())
    teacher_head = prediction_head(teacher)
    for name, module in prediction_head(student).items():
        if name in copied and name in teacher_head:
            module.load_state_dict(teacher_head[name].state_dict())


def student_for(
    teacher: PreTrainedModel,
    teacher_conf: PretrainedConfig,
    shape: ShapeSpec,
    init: InitSpec,
    num_labels: int,
    seed: int,
    device: torch.device,
    *,
    dropout: float | None,
    recompute_attention: bool,
    mlm: bool = False,
) -> PreTrainedModel:
    """The student of `shape` in the teacher's family (`teacher_conf`), initialised as `init` says
    (its seed drawn first), set up for training on `device`; `mlm`: with an MLM head, else a
    classifier of `num_labels`. `compilation.compile_if_asked` compiles it with the teacher."""
    if init.path is not None:  # a distilled student's weights; the heads it lacks start fresh
        torch.manual_seed(seed)
        config = student_config(teacher_conf, shape, 2 if mlm else num_labels)
        student = load_model(
            AutoModelForMaskedLM if mlm else AutoModelForSequenceClassification,
            init.path,
            owner="the student",
            saved_as="the pretrained student (init.path)",
            config=config,
        )
    else:
        student = build_student(teacher_conf, shape, num_labels, seed, mlm=mlm)
    with_dropout(student, dropout)
    if init.layers is not None:
        init_from_teacher(student, teacher, init)
    return prepare_for_training(student, recompute_attention).to(device)
