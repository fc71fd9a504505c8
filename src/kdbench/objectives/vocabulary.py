"""The vocabulary-wide losses of MLM logits (`mlm_kd`, `mlm`, which `losses.LOSSES` names), a chunk
of rows at a time, with their gradient formed in the forward pass.

Through autograd, a loss over [M, V] logits (M masked positions, V = 30522 for BERT) keeps float32
[M, V] copies alive until backward (the float32 cast, the log-softmax, the teacher's distribution)
and the backward writes more of them: at the paper's micro-batch of 512 x 128 tokens, M is about
9,800 and one such tensor 1.2 GB. Here the gradient with respect to the student's logits has a
closed form (soft targets: T (p_s - p_t) / M; hard labels: (p_s - onehot) / M), so the forward pass
computes it chunk by chunk and keeps only it, in the logits' own dtype (what autograd would cast it
to): the float32 temporaries are one chunk of rows. The losses are those of `losses` to float32
rounding (sums over chunks instead of one reduction). A chunk's loss and gradient (`_soft_rows`,
`_hard_rows`) are `chains.chain`s: compiled, with `trainer.compile`, into a kernel or two.
"""

from __future__ import annotations

import torch
from torch import Tensor

from kdbench.objectives.chains import chain
from kdbench.objectives.loss_checks import check_logits, check_ndim
from kdbench.objectives.tensors import outside_autocast

# Rows per chunk are chosen so that one float32 [rows, V] temporary is about this size
CHUNK_BYTES = 64 * 2**20
IGNORE_INDEX = -100  # F.cross_entropy's: a label that leaves the mean


@chain
def _soft_rows(
    student: Tensor, teacher: Tensor, temperature: float, grad_scale: Tensor
) -> tuple[Tensor, Tensor]:
    """sum over rows of -sum_v p_t log p_s (p = softmax(logits / T)) for logits [rows, V] taken in
    float32, and grad_scale (p_s - p_t), float32 (the gradient is T (p_s - p_t))."""
    student, teacher = student.float(), teacher.float()
    if temperature != 1.0:  # x / 1 is x: the division is skipped, not approximated
        student, teacher = student / temperature, teacher / temperature
    log_student = torch.log_softmax(student, dim=-1)
    del student
    p_teacher = torch.softmax(teacher, dim=-1)
    value = -torch.dot(p_teacher.flatten(), log_student.flatten())
    return value, log_student.exp_().sub_(p_teacher).mul_(grad_scale)


@chain
def _hard_rows(student: Tensor, labels: Tensor, grad_scale: Tensor) -> tuple[Tensor, Tensor]:
    """sum over rows of -log p_s[label] for logits [rows, V] taken in float32 and labels [rows],
    and grad_scale (p_s - onehot(label)), float32; ignored rows (`IGNORE_INDEX`) give neither."""
    kept = labels != IGNORE_INDEX
    index = labels.clamp_min(0)[:, None]
    log_student = torch.log_softmax(student.float(), dim=-1)
    picked = log_student.gather(1, index).squeeze(1)
    value = -torch.where(kept, picked, picked.new_zeros(())).sum()
    grad = log_student.exp_().scatter_add_(1, index, -kept[:, None].to(log_student.dtype))
    return value, grad.masked_fill_(~kept[:, None], 0.0).mul_(grad_scale)


class _VocabularyLoss(torch.autograd.Function):
    """mean over rows of a per-row loss of logits [M, V]; `target` is the teacher's logits [M, V]
    (soft targets, `temperature` T, scaled by T^2) or labels [M] (hard, temperature None)."""

    @staticmethod
    def forward(ctx, student, target, temperature, with_grad: bool):
        rows, vocab = student.shape
        hard = temperature is None
        count = (target != IGNORE_INDEX).sum() if hard else rows
        scale = 1.0 if hard else temperature**2
        grad = torch.empty_like(student) if with_grad else None
        # d(T^2 mean)/ds = T (p_s - p_t) / M; hard: (p_s - onehot) / M. A tensor made on the
        # device: dynamo specialises a compiled chain on a float input where
        # torch._dynamo.config.specialize_float is set, recompiling it at every new M
        if hard:
            grad_scale = 1.0 / count
        else:
            grad_scale = torch.full((), temperature / rows, device=student.device)
        step = max(1, CHUNK_BYTES // (4 * vocab))
        total = torch.zeros((), dtype=torch.float32, device=student.device)
        for start in range(0, rows, step):
            chunk, targets = student[start : start + step], target[start : start + step]
            if hard:
                value, chunk_grad = _hard_rows(chunk, targets, grad_scale)
            else:
                value, chunk_grad = _soft_rows(chunk, targets, temperature, grad_scale)
            total += value
            if with_grad:  # cast to the logits' dtype as it is written
                grad[start : start + step] = chunk_grad
        if with_grad:
            ctx.save_for_backward(grad)
        return total * scale / count

    @staticmethod
    def backward(ctx, grad_output):
        (grad,) = ctx.saved_tensors
        return grad_output * grad, None, None, None


def _with_grad(student: Tensor) -> bool:
    return torch.is_grad_enabled() and student.requires_grad


def soft_cross_entropy(student: Tensor, teacher: Tensor, temperature: float) -> Tensor:
    """``T^2 * mean_m sum_v -softmax(t_m / T)_v * log softmax(s_m / T)_v`` of logits [M, V] (M >
    0), float32 scalar; gradients reach the student only."""
    return _VocabularyLoss.apply(student, teacher.detach(), float(temperature), _with_grad(student))


def cross_entropy(student: Tensor, labels: Tensor) -> Tensor:
    """``F.cross_entropy(student.float(), labels)`` of logits [M, V] (M > 0) and labels [M] (rows
    labelled `IGNORE_INDEX` left out of the mean), float32 scalar."""
    return _VocabularyLoss.apply(student, labels.long(), None, _with_grad(student))


@outside_autocast
def mlm_kd(student_logits: Tensor, teacher_logits: Tensor, *, temperature: float = 1.0) -> Tensor:
    """Soft cross-entropy to the teacher's distribution (DistilBERT's MLM distillation).

    Shapes: ``[M, V]`` (M = the masked positions gathered from the batch, V = vocabulary)::

        loss = T^2 * mean_m sum_v -softmax(t_m / T)_v * log softmax(s_m / T)_v

    It differs from ``T^2 * KL`` by the teacher's entropy, a constant: the gradients are the same.
    Zero positions (M == 0) give 0. Computed a chunk of rows at a time, its gradient formed in the
    forward pass (`soft_cross_entropy`): no float32 [M, V] tensor outlives a chunk.
    """
    check_logits(student_logits, teacher_logits, temperature, "mlm_kd", "[M, V]")
    if student_logits.shape[0] == 0:
        return student_logits.float().sum()
    return soft_cross_entropy(student_logits, teacher_logits, temperature)


@outside_autocast
def mlm(
    student_logits: Tensor, teacher_logits: Tensor | None = None, labels: Tensor | None = None
) -> Tensor:
    """Masked-language-model cross-entropy: ``[M, V]`` logits at the masked positions, ``[M]``
    original ids.

    ``teacher_logits`` is not used (the hard MLM term reads the labels); it keeps every term's call
    alike. ``F.cross_entropy`` of the float32 logits (labels -100 left out), computed a chunk of
    rows at a time as `mlm_kd` is.
    """
    if labels is None:
        raise ValueError("mlm needs labels (the original token ids at the masked positions)")
    check_ndim(student_logits, (2,), "mlm", "[M, V]")
    if student_logits.shape[0] == 0:
        return student_logits.float().sum()
    return cross_entropy(student_logits, labels.to(student_logits.device))
