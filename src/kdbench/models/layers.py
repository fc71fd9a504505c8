"""Which teacher layers: the student's initialisation (the paper's 4,8,12 / 1,8,12 / 1,2,3) and the
layer pairs an objective maps, validated once.

Layer numbers are 1-based transformer blocks, as the paper writes them; 0 is the embedding output.
"""

from __future__ import annotations

from kdbench.errors import ConfigError


def every_kth(teacher_layers: int, student_layers: int, refusal: str | None = None) -> list[int]:
    """k, 2k, ..., with k = teacher layers / student layers (4,8,12 for 12 -> 3); where the
    student's depth does not divide the teacher's, a ConfigError of `refusal` (default: the
    init's)."""
    if teacher_layers % student_layers:
        raise ConfigError(
            refusal
            or f"every k-th teacher layer (init=every_kth) needs the teacher's {teacher_layers} "
            f"layers to be a multiple of student.num_layers={student_layers}: give the layers "
            "explicitly (init=layers 'init.layers=[...]')"
        )
    k = teacher_layers // student_layers
    return [k * (i + 1) for i in range(student_layers)]


def bottom(teacher_layers: int, student_layers: int) -> list[int]:
    """The teacher's first L layers (the paper's 1,2,3 / "first 6")."""
    return list(range(1, student_layers + 1))


INIT_PRESETS = {"every_kth": every_kth, "bottom": bottom}


def resolve_init_layers(
    name: str, layers: list | None, teacher_layers: int, student_layers: int
) -> list[int] | None:
    """The teacher layers the student is initialised from (validated), or None for random init.

    `name`: random, a preset (every_kth, bottom), or layers with the explicit list `layers`."""
    if name == "random":
        return None
    if name in INIT_PRESETS:
        layers = INIT_PRESETS[name](teacher_layers, student_layers)
    elif layers is None:
        raise ConfigError("init=layers needs a layer list, e.g. 'init.layers=[4,8,12]'")
    validate_layer_list(layers, teacher_layers, student_layers, what="init.layers")
    return layers


def validate_layer_list(
    layers: list, teacher_layers: int, student_layers: int, *, what: str
) -> None:
    """One teacher layer per student layer, integers in 1..teacher_layers, strictly ascending."""
    if len(layers) != student_layers:
        raise ConfigError(
            f"{what}={layers} has {len(layers)} entries but the student has {student_layers} "
            "layers: "
            f"give one teacher layer per student layer"
        )
    for layer in layers:
        if isinstance(layer, bool) or not isinstance(layer, int):
            raise ConfigError(
                f"{what}={layers}: {layer!r} is not an integer layer number (1..{teacher_layers})"
            )
        if not 1 <= layer <= teacher_layers:
            raise ConfigError(
                f"{what}={layers}: layer {layer} does not exist; the teacher has layers "
                f"1..{teacher_layers}"
            )
    if any(b <= a for a, b in zip(layers, layers[1:])):
        raise ConfigError(
            f"{what}={layers} must be strictly ascending without repeats, e.g. [4,8,12]"
        )


def copy_mismatch(student: tuple[int, int, int], teacher: tuple[int, int, int]) -> str | None:
    """Why teacher layers cannot be copied into a student, each given as (hidden size,
    feed-forward size, head count); None when they can: the weights' shapes equal, and the heads
    that split them too (with other heads a copied block computes another function)."""
    names = ("hidden size", "feed-forward size", "head count")
    differ = [f"{n} {s} (the teacher's {t})" for n, s, t in zip(names, student, teacher) if s != t]
    verb = "differs" if len(differ) == 1 else "differ"
    return f"the student's {' and '.join(differ)} {verb}" if differ else None


def check_copyable(
    student: tuple[int, int, int], teacher: tuple[int, int, int], init_name: str
) -> None:
    """Refuses an init that copies teacher layers into a student of another (hidden size,
    feed-forward size, head count)."""
    mismatch = copy_mismatch(student, teacher)
    if mismatch is not None:
        raise ConfigError(
            f"init={init_name} copies teacher layers, which needs the teacher's block shape, but "
            f"{mismatch}: use init=random or a student of the teacher's shape "
            f"(student.hidden_size={teacher[0]} student.ffn_size={teacher[1]} "
            f"student.num_heads={teacher[2]})"
        )


def resolve_pairs(
    mapping,
    init_layers: list[int] | None,
    student_layers: int,
    teacher_layers: int,
    at: str = "objective.mapping",
) -> list[tuple[int, int]]:
    """(student layer, teacher layer) pairs of a layer mapping, validated; `at` is the config key
    that gave the mapping, which a refusal names.

    `mapping`: init (the layers the student was initialised from; uniform for random init), uniform
    (TinyBERT's g(m) = k*m), fixed (the study's released code: every k-th teacher layer whatever the
    init, 4,8,12 for 12 -> 3 and 2,4,6 for 6 -> 3; the same pairs as uniform), last, embeddings,
    or a list of teacher layers, one per student layer.
    """
    if isinstance(mapping, (list, tuple)):
        layers = list(mapping)
        validate_layer_list(layers, teacher_layers, student_layers, what=at)
        return list(zip(range(1, student_layers + 1), layers))
    if mapping == "init" and init_layers is not None:
        return list(zip(range(1, student_layers + 1), init_layers))
    if mapping in ("init", "uniform", "fixed"):
        into = " into a random student" if mapping == "init" else ""
        refusal = (
            f"{at}={mapping} maps every k-th teacher layer{into}, and the teacher's "
            f"{teacher_layers} layers are not a multiple of the student's {student_layers}: "
            f"give one teacher layer per student layer ({at}=[...])"
        )
        layers = every_kth(teacher_layers, student_layers, refusal)
        return list(zip(range(1, student_layers + 1), layers))
    if mapping == "last":
        return [(student_layers, teacher_layers)]
    if mapping == "embeddings":
        return [(0, 0)]
    raise ConfigError(
        f"unknown layer mapping {mapping!r}; valid: init, fixed, last, uniform, embeddings, "
        "or a list of teacher layers"
    )
