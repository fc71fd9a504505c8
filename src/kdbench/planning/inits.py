"""The student's initialisation read into its `InitSpec`: the teacher layers it copies (init=auto
choosing them or none), or a saved student of the student's shape (init=pretrained)."""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig
from transformers import PretrainedConfig

from kdbench.errors import ConfigError
from kdbench.models.hub import saved_config
from kdbench.models.layers import check_copyable, copy_mismatch, resolve_init_layers
from kdbench.planning.declared import with_defaults
from kdbench.planning.groups import checked
from kdbench.planning.paths import local_path
from kdbench.planning.specs import InitSpec, ShapeSpec

log = logging.getLogger("kdbench")


def init_spec(init: DictConfig, teacher_conf: PretrainedConfig, student: ShapeSpec) -> InitSpec:
    values = with_defaults(checked(init, "init"), InitSpec)
    if init.name == "pretrained":
        return InitSpec(
            "pretrained",
            None,
            path=pretrained_student(values["path"], student),
            carry_projections=values["carry_projections"],
        )
    name = auto_init(teacher_conf, student) if init.name == "auto" else init.name
    layers = resolve_init_layers(
        name, values.get("layers"), teacher_conf.num_hidden_layers, student.num_layers
    )
    if layers is not None:
        check_copyable(block_shape(student), teacher_block_shape(teacher_conf), name)
    return InitSpec(
        name,
        None if layers is None else tuple(layers),
        values["copy_embeddings"],
        values["copy_head"],
    )


SHAPE_KEYS = {
    "num_layers": "num_hidden_layers",
    "hidden_size": "hidden_size",
    "num_heads": "num_attention_heads",
    "ffn_size": "intermediate_size",
}


def pretrained_student(path: str | None, student: ShapeSpec) -> Path:
    """init=pretrained's saved student, checked to be a model of the student's shape."""
    folder = local_path(path)
    if not path or not (folder / "config.json").is_file():
        raise ConfigError(
            "init=pretrained needs init.path, a folder written by save_pretrained (a "
            "task-agnostic "
            f"run's student/); {path} holds no config.json"
        )
    saved = saved_config(folder, "a distilled student")
    differ = [
        f"{key} {getattr(saved, theirs)} vs {getattr(student, key)}"
        for key, theirs in SHAPE_KEYS.items()
        if getattr(saved, theirs, None) != getattr(student, key)
    ]
    if differ:
        raise ConfigError(
            f"init.path={path} holds a model of another shape than student={student.name} "
            f"({'; '.join(differ)}): choose the student config it was saved as"
        )
    return folder


def block_shape(student: ShapeSpec) -> tuple[int, int, int]:
    return student.hidden_size, student.ffn_size, student.num_heads


def teacher_block_shape(teacher_conf: PretrainedConfig) -> tuple[int, int, int]:
    return (
        teacher_conf.hidden_size,
        teacher_conf.intermediate_size,
        teacher_conf.num_attention_heads,
    )


def auto_init(teacher_conf: PretrainedConfig, student: ShapeSpec) -> str:
    """init=auto: every k-th teacher layer when the student can take them (the teacher's hidden
    and feed-forward sizes and head count, a depth dividing the teacher's), random otherwise; the
    choice is logged in one line."""
    teacher_layers = teacher_conf.num_hidden_layers
    mismatch = copy_mismatch(block_shape(student), teacher_block_shape(teacher_conf))
    if mismatch is not None:
        reason = mismatch
    elif teacher_layers % student.num_layers:
        reason = (
            f"the teacher's {teacher_layers} layers are not "
            f"a multiple of the student's {student.num_layers}"
        )
    else:
        log.info(
            "init=auto: every_kth (teacher layers copied: the student has the teacher's shape)"
        )
        return "every_kth"
    log.info("init=auto: random (%s)", reason)
    return "random"
