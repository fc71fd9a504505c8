"""The teacher's and the student's architecture configs, without weights or modeling code: what a
plan checks before anything is loaded."""

from __future__ import annotations

from transformers import AutoConfig, PretrainedConfig

from kdbench.models.hub import load
from kdbench.models.tiny import tiny_config
from kdbench.planning.specs import ShapeSpec, TeacherSpec


def teacher_config(teacher: TeacherSpec) -> PretrainedConfig:
    """The teacher's architecture config, cheaply (no weights): used to validate before heavy
    work."""
    if teacher.shape is not None:
        return tiny_config(teacher.shape, 2)
    return load(AutoConfig, teacher.name_or_path)


def student_config(
    teacher_conf: PretrainedConfig, shape: ShapeSpec, num_labels: int
) -> PretrainedConfig:
    """The teacher's config with the student's depth and width: the student is the teacher's model
    family, its dropout too (`kdbench.models.student.with_dropout` sets a distillation's own on the
    modules only)."""
    config = teacher_conf.__class__.from_dict(teacher_conf.to_dict())
    config.num_hidden_layers = shape.num_layers
    config.hidden_size = shape.hidden_size
    config.num_attention_heads = shape.num_heads
    config.intermediate_size = shape.ffn_size
    config.num_labels = num_labels
    return config
