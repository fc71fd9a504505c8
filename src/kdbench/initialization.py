"""Student initialisation: random, or copied from chosen teacher layers (the paper's 4,8,12 / 1,8,12 / 1,2,3).

Layer numbers are 1-based transformer blocks of the teacher, as the paper writes them.
"""

from __future__ import annotations

from omegaconf import DictConfig
from transformers import PreTrainedModel

from kdbench.errors import ConfigError
from kdbench.models import embeddings, encoder_layers, prediction_head


def every_kth(teacher_layers: int, student_layers: int) -> list[int]:
    """k, 2k, ..., with k = teacher layers / student layers (4,8,12 for 12 -> 3)."""
    if teacher_layers % student_layers:
        raise ConfigError(
            f"init=every_kth needs the teacher's {teacher_layers} layers to be a multiple of the student's "
            f"{student_layers}: give the layers explicitly (init=layers 'init.layers=[...]')"
        )
    k = teacher_layers // student_layers
    return [k * (i + 1) for i in range(student_layers)]


def bottom(teacher_layers: int, student_layers: int) -> list[int]:
    """The teacher's first L layers (the paper's 1,2,3 / "first 6")."""
    return list(range(1, student_layers + 1))


INIT_PRESETS = {"every_kth": every_kth, "bottom": bottom}


def resolve_init_layers(init: DictConfig, teacher_layers: int, student_layers: int) -> list[int] | None:
    """The teacher layers the student is initialised from (validated), or None for random init."""
    if init.name == "random":
        return None
    if init.name in INIT_PRESETS:
        layers = INIT_PRESETS[init.name](teacher_layers, student_layers)
    else:
        layers = init.get("layers")
        if layers is None:
            raise ConfigError("init=layers needs a layer list, e.g. 'init.layers=[4,8,12]'")
        layers = list(layers)
    validate_layer_list(layers, teacher_layers, student_layers, what="init.layers")
    return layers


def validate_layer_list(layers: list, teacher_layers: int, student_layers: int, *, what: str) -> None:
    """One teacher layer per student layer, integers in 1..teacher_layers, strictly ascending."""
    if len(layers) != student_layers:
        raise ConfigError(
            f"{what}={layers} has {len(layers)} entries but the student has {student_layers} layers: "
            f"give one teacher layer per student layer"
        )
    for layer in layers:
        if isinstance(layer, bool) or not isinstance(layer, int):
            raise ConfigError(f"{what}={layers}: {layer!r} is not an integer layer number (1..{teacher_layers})")
        if not 1 <= layer <= teacher_layers:
            raise ConfigError(f"{what}={layers}: layer {layer} does not exist; the teacher has layers 1..{teacher_layers}")
    if any(b <= a for a, b in zip(layers, layers[1:])):
        raise ConfigError(f"{what}={layers} must be strictly ascending without repeats, e.g. [4,8,12]")


def check_width(student_hidden: int, teacher_hidden: int, init_name: str) -> None:
    if student_hidden != teacher_hidden:
        raise ConfigError(
            f"init={init_name} copies teacher layers, which needs the student's hidden size ({student_hidden}) "
            f"to equal the teacher's ({teacher_hidden}): use init=random or a student of width {teacher_hidden}"
        )


def init_from_teacher(
    student: PreTrainedModel,
    teacher: PreTrainedModel,
    layers: list[int],
    *,
    copy_embeddings: bool = True,
    copy_head: bool = True,
) -> None:
    """Copy teacher block layers[i] into student block i (and the embeddings / pooler+classifier if asked)."""
    student_blocks, teacher_blocks = encoder_layers(student), encoder_layers(teacher)
    for student_index, teacher_layer in enumerate(layers):
        student_blocks[student_index].load_state_dict(teacher_blocks[teacher_layer - 1].state_dict())
    if copy_embeddings:
        embeddings(student).load_state_dict(embeddings(teacher).state_dict())
    if copy_head:  # the heads both models have (a fine-tuned classifier, an MLM head, a pooler)
        teacher_head = prediction_head(teacher)
        for name, module in prediction_head(student).items():
            if name in teacher_head:
                module.load_state_dict(teacher_head[name].state_dict())
