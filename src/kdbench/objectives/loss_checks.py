"""Shape checks of the losses' inputs: a ValueError names the loss and the layout it expects."""

from __future__ import annotations

from torch import Tensor


def check_same_shape(student: Tensor, teacher: Tensor, what: str) -> None:
    if student.shape != teacher.shape:
        raise ValueError(
            f"{what}: student and teacher shapes differ: {tuple(student.shape)} vs "
            f"{tuple(teacher.shape)}"
        )


def check_ndim(x: Tensor, ndims: tuple[int, ...], what: str, layout: str) -> None:
    if x.dim() not in ndims:
        raise ValueError(f"{what}: expected a tensor of shape {layout}, got shape {tuple(x.shape)}")


def check_logits(
    student_logits: Tensor, teacher_logits: Tensor, temperature: float, what: str, layout: str
) -> None:
    check_ndim(student_logits, (2,), what, layout)
    check_same_shape(student_logits, teacher_logits, what)
    if temperature <= 0:
        raise ValueError(f"{what}: temperature must be positive, got {temperature}")


def check_scores(student_scores: Tensor, teacher_scores: Tensor, what: str) -> None:
    check_ndim(student_scores, (4,), what, "[B, H, L, L]")
    check_same_shape(student_scores, teacher_scores, what)
    if student_scores.shape[-1] != student_scores.shape[-2]:
        raise ValueError(
            f"{what}: scores must be square in the last two dims [B, H, L, L], "
            f"got {tuple(student_scores.shape)}"
        )


def check_hidden(student: Tensor, teacher: Tensor, mask: Tensor | None, what: str) -> None:
    check_ndim(student, (2, 3), what, "[B, L, D] or [B, D]")
    check_same_shape(student, teacher, what)
    if student.dim() == 2 and mask is not None:
        raise ValueError(
            f"{what}: a mask is only supported for [B, L, D] inputs, got [B, D] inputs"
        )


def check_values(student_values: Tensor, teacher_values: Tensor, scale_by: str) -> None:
    """val_kl's [B, H, L, d] values (head sizes may differ, head counts and [B, L] may not) and its
    scale."""
    if scale_by not in ("own", "teacher"):
        raise ValueError(f"val_kl: scale_by must be 'own' or 'teacher', got {scale_by!r}")
    check_ndim(student_values, (4,), "val_kl", "[B, H, L, d]")
    check_ndim(teacher_values, (4,), "val_kl", "[B, H, L, d]")
    if student_values.shape[1] != teacher_values.shape[1]:
        raise ValueError(
            f"val_kl: student and teacher must have the same number of heads, got "
            f"{student_values.shape[1]} (student) vs {teacher_values.shape[1]} (teacher); "
            "use relation_kl to compare different head counts"
        )
    if student_values.shape[:3] != teacher_values.shape[:3]:
        raise ValueError(
            f"val_kl: student and teacher [B, H, L] differ: "
            f"{tuple(student_values.shape[:3])} vs {tuple(teacher_values.shape[:3])}"
        )


def check_relation_inputs(student_x: Tensor, teacher_x: Tensor, num_heads: int) -> None:
    """relation_kl's [B, L, D] inputs (widths may differ) and a positive head count."""
    check_ndim(student_x, (3,), "relation_kl", "[B, L, D]")
    check_ndim(teacher_x, (3,), "relation_kl", "[B, L, D]")
    if student_x.shape[:2] != teacher_x.shape[:2]:
        raise ValueError(
            f"relation_kl: student and teacher [B, L] differ: "
            f"{tuple(student_x.shape[:2])} vs {tuple(teacher_x.shape[:2])}"
        )
    if num_heads < 1:
        raise ValueError(f"relation_kl: num_heads must be >= 1, got {num_heads}")
