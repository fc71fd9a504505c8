"""Distillation losses as pure functions over tensors, and `LOSSES`, the registry the objective configs name.

Every function here takes student and teacher tensors (and optionally a padding
mask) and returns a scalar float32 loss. There is no model or config inside.
A config's `loss: X` is computed by the function `X` here (`LOSSES[X].fn`), or by
its form in `fused` (`LOSSES[X].fused`) where it has one.

Conventions shared by all functions:

* ``mask`` is ``[B, L]`` with 1 (any non-zero value) for real tokens and 0 for
  padding; any dtype (bool, int, float) is accepted. ``None`` means every
  position is real.
* Attention scores are the pre-softmax ``Q K^T / sqrt(d_head)`` *without* any
  additive attention mask: the functions apply the mask themselves.
* Every function runs with autocast off (``outside_autocast``) and casts its
  inputs to float32 before any arithmetic, so under a bf16 autocast region
  too every matmul and reduction runs in float32, and bf16/fp16 inputs give
  finite values and gradients.
* Padded positions never reach the arithmetic: they are replaced (with
  ``masked_fill`` / ``torch.where``) before use, so arbitrary values there,
  even ``inf`` or ``nan``, change neither the loss nor the student gradients.
* The teacher side is detached: gradients only flow into the student inputs.
* Without padding the normalisations coincide with the ones used by the
  original implementations (TinyBERT / MiniLM / MiniLMv2 / DistilBERT).
"""

from __future__ import annotations

import inspect
import math
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import torch
import torch.nn.functional as F
from torch import Tensor

from kdbench.objectives import fused
from kdbench.objectives.contrastive import crd
from kdbench.objectives.tensors import LOGITS, MASKED_SCORE, outside_autocast, padding_mask, split_heads

__all__ = [
    "kd",
    "att_mse",
    "att_kl",
    "val_kl",
    "relation_kl",
    "hid_mse",
    "cosine",
    "mlm_kd",
    "mlm",
]


# --------------------------------------------------------------------------- #
# private helpers
# --------------------------------------------------------------------------- #
def _f32(x: Tensor) -> Tensor:
    return x.to(torch.float32)


def _check_same_shape(student: Tensor, teacher: Tensor, what: str) -> None:
    if student.shape != teacher.shape:
        raise ValueError(
            f"{what}: student and teacher shapes differ: {tuple(student.shape)} vs {tuple(teacher.shape)}"
        )


def _check_ndim(x: Tensor, ndims: tuple[int, ...], what: str, layout: str) -> None:
    if x.dim() not in ndims:
        raise ValueError(f"{what}: expected a tensor of shape {layout}, got shape {tuple(x.shape)}")


def _check_logits(student_logits: Tensor, teacher_logits: Tensor, temperature: float, what: str, layout: str) -> None:
    _check_ndim(student_logits, (2,), what, layout)
    _check_same_shape(student_logits, teacher_logits, what)
    if temperature <= 0:
        raise ValueError(f"{what}: temperature must be positive, got {temperature}")


def _masked_row_kl(student_scores: Tensor, teacher_scores: Tensor, mask: Tensor) -> Tensor:
    """Masked row-wise KL reduction shared by the attention/relation losses.

    ``student_scores``/``teacher_scores``: float32 ``[B, H, L, L]`` pre-softmax
    scores; ``mask``: float32 ``[B, L]`` from :func:`tensors.padding_mask`.

    For every head and valid query row ``i`` of example ``b`` computes
    ``KL(softmax(t[b, h, i, K_b]) || softmax(s[b, h, i, K_b]))`` with ``K_b``
    the valid keys, and returns ``sum / (H * sum_b n_b)``.
    """
    _, num_heads, _, _ = student_scores.shape
    valid = mask > 0
    pair = valid[:, None, :, None] & valid[:, None, None, :]  # [B, 1, L, L]

    # Replace every invalid (query, key) entry before the softmax: invalid keys
    # drop out of the normalisation and invalid query rows become a harmless
    # uniform row; nothing non-finite survives into the graph.
    logp_s = torch.log_softmax(student_scores.masked_fill(~pair, MASKED_SCORE), dim=-1)
    logp_t = torch.log_softmax(teacher_scores.masked_fill(~pair, MASKED_SCORE), dim=-1)
    zero = logp_s.new_zeros(())
    logp_s = torch.where(pair, logp_s, zero)
    logp_t = torch.where(pair, logp_t, zero)
    p_t = torch.where(pair, logp_t.exp(), zero)

    row_kl = (p_t * (logp_t - logp_s)).sum(dim=-1)  # [B, H, L]
    row_kl = torch.where(valid[:, None, :], row_kl, zero)
    denom = (num_heads * mask.sum()).clamp_min(1.0)
    return row_kl.sum() / denom


def _check_scores(student_scores: Tensor, teacher_scores: Tensor, what: str) -> None:
    _check_ndim(student_scores, (4,), what, "[B, H, L, L]")
    _check_same_shape(student_scores, teacher_scores, what)
    if student_scores.shape[-1] != student_scores.shape[-2]:
        raise ValueError(
            f"{what}: scores must be square in the last two dims [B, H, L, L], "
            f"got {tuple(student_scores.shape)}"
        )


def _relation_scores(x: Tensor, valid: Tensor, head_size: int | None = None) -> Tensor:
    """``X X^T / sqrt(d)`` for float32 ``x`` of shape ``[B, H, L, d]`` (or ``d = head_size``).

    Padded tokens (``valid`` is bool ``[B, L]``) are zeroed first so that
    arbitrary padded values cannot overflow the product.
    """
    x = x.masked_fill(~valid[:, None, :, None], 0.0)
    return torch.matmul(x, x.transpose(-1, -2)) / math.sqrt(head_size or x.shape[-1])


# --------------------------------------------------------------------------- #
# logits
# --------------------------------------------------------------------------- #
@outside_autocast
def kd(
    student_logits: Tensor,
    teacher_logits: Tensor,
    labels: Tensor | None = None,
    *,
    temperature: float = 2.0,
    alpha: float = 0.5,
) -> Tensor:
    """Logit distillation (Hinton et al.) with an optional hard-label term.

    Shapes: ``student_logits``, ``teacher_logits``: ``[B, C]``; ``labels``:
    ``[B]`` (class indices for ``C > 1``, floats for regression ``C == 1``).

    Classification (``C > 1``), with ``T = temperature``::

        soft = T^2 * KL(softmax(t / T) || softmax(s / T))
        hard = CE(s, labels)
        loss = alpha * soft + (1 - alpha) * hard      # with labels
        loss = soft                                   # labels is None

    KL is summed over classes and averaged over the batch; CE is the batch mean.

    Regression (``C == 1``, e.g. STS-B): ``soft = MSE(s, t)`` (no temperature)
    and ``hard = MSE(s, labels)``, combined the same way; both are batch means.
    """
    _check_logits(student_logits, teacher_logits, temperature, "kd", "[B, C]")
    batch, num_classes = student_logits.shape
    s = _f32(student_logits)
    t = _f32(teacher_logits).detach()

    if labels is not None and labels.shape != (batch,):
        raise ValueError(f"kd: labels must have shape {(batch,)} ([B]), got {tuple(labels.shape)}")

    if num_classes == 1:
        s, t = s[:, 0], t[:, 0]
        soft = F.mse_loss(s, t)
        if labels is None:
            return soft
        hard = F.mse_loss(s, _f32(labels.to(s.device)))
        return alpha * soft + (1.0 - alpha) * hard

    soft = F.kl_div(
        F.log_softmax(s / temperature, dim=-1),
        F.log_softmax(t / temperature, dim=-1),
        reduction="batchmean",
        log_target=True,
    ) * (temperature**2)
    if labels is None:
        return soft
    hard = F.cross_entropy(s, labels.to(s.device).long())
    return alpha * soft + (1.0 - alpha) * hard


@outside_autocast
def mlm_kd(student_logits: Tensor, teacher_logits: Tensor, *, temperature: float = 1.0) -> Tensor:
    """Soft cross-entropy to the teacher's distribution (DistilBERT's MLM distillation).

    Shapes: ``[M, V]`` (M = the masked positions gathered from the batch, V = vocabulary)::

        loss = T^2 * mean_m sum_v -softmax(t_m / T)_v * log softmax(s_m / T)_v

    It differs from ``T^2 * KL`` by the teacher's entropy, a constant: the gradients are the same.
    Zero positions (M == 0) give 0.
    """
    _check_logits(student_logits, teacher_logits, temperature, "mlm_kd", "[M, V]")
    if student_logits.shape[0] == 0:
        return _f32(student_logits).sum()
    target = F.softmax(_f32(teacher_logits).detach() / temperature, dim=-1)
    log_student = F.log_softmax(_f32(student_logits) / temperature, dim=-1)
    return -(target * log_student).sum(-1).mean() * temperature**2


@outside_autocast
def mlm(student_logits: Tensor, teacher_logits: Tensor | None = None, labels: Tensor | None = None) -> Tensor:
    """Masked-language-model cross-entropy: ``[M, V]`` logits at the masked positions, ``[M]`` original ids.

    ``teacher_logits`` is not used (the hard MLM term reads the labels); it keeps every term's call alike.
    """
    if labels is None:
        raise ValueError("mlm needs labels (the original token ids at the masked positions)")
    _check_ndim(student_logits, (2,), "mlm", "[M, V]")
    if student_logits.shape[0] == 0:
        return _f32(student_logits).sum()
    return F.cross_entropy(_f32(student_logits), labels.to(student_logits.device).long())


# --------------------------------------------------------------------------- #
# attention / relations
# --------------------------------------------------------------------------- #
@outside_autocast
def att_mse(student_scores: Tensor, teacher_scores: Tensor, mask: Tensor | None = None) -> Tensor:
    """TinyBERT attention MSE.

    Shapes: ``student_scores``, ``teacher_scores``: ``[B, H, L, L]``
    pre-softmax scores (no additive mask); ``mask``: ``[B, L]`` or ``None``.

    ``loss = sum_{b, h, i, j valid} (s - t)^2 / (H * sum_b n_b^2)``, i.e. the
    mean squared difference over heads and valid (query, key) pairs, with
    ``n_b`` the number of valid tokens of example ``b``.
    """
    _check_scores(student_scores, teacher_scores, "att_mse")
    batch, num_heads, length, _ = student_scores.shape
    m = padding_mask(mask, batch, length, student_scores.device)
    valid = m > 0
    pair = valid[:, None, :, None] & valid[:, None, None, :]
    s = _f32(student_scores).masked_fill(~pair, 0.0)
    t = _f32(teacher_scores).detach().masked_fill(~pair, 0.0)
    denom = (num_heads * (m.sum(dim=1) ** 2).sum()).clamp_min(1.0)
    return (s - t).pow(2).sum() / denom


@outside_autocast
def att_kl(student_scores: Tensor, teacher_scores: Tensor, mask: Tensor | None = None) -> Tensor:
    """Attention-distribution KL (MiniLM).

    Shapes: ``student_scores``, ``teacher_scores``: ``[B, H, L, L]``
    pre-softmax scores (no additive mask); ``mask``: ``[B, L]`` or ``None``.

    For each head ``h`` and valid query row ``i`` of example ``b``::

        KL(softmax(t[b, h, i, valid keys]) || softmax(s[b, h, i, valid keys]))

    Reduction: sum over heads and valid rows divided by ``H * sum_b n_b``.
    Finite for any padding pattern (including fully padded examples).
    """
    _check_scores(student_scores, teacher_scores, "att_kl")
    batch, _, length, _ = student_scores.shape
    m = padding_mask(mask, batch, length, student_scores.device)
    return _masked_row_kl(_f32(student_scores), _f32(teacher_scores).detach(), m)


@outside_autocast
def val_kl(student_values: Tensor, teacher_values: Tensor, mask: Tensor | None = None, *,
           scale_by: str = "own") -> Tensor:
    """Value-relation KL (MiniLM).

    Shapes: ``student_values``: ``[B, H, L, d_s]``, ``teacher_values``:
    ``[B, H, L, d_t]`` (head sizes may differ, head counts may not);
    ``mask``: ``[B, L]`` or ``None``.

    The value relation ``V V^T / sqrt(d)`` is used as pre-softmax scores and
    reduced exactly like :func:`att_kl`: mean KL over heads and valid query
    rows, i.e. ``sum / (H * sum_b n_b)``. ``scale_by``: ``"own"`` divides
    each side by its own head size, ``"teacher"`` both by the teacher's
    ``d_t`` (MiniLM's Eq. 8 writes one ``d_k``; the two differ only when the
    head sizes do, as across an assistant chain).
    """
    if scale_by not in ("own", "teacher"):
        raise ValueError(f"val_kl: scale_by must be 'own' or 'teacher', got {scale_by!r}")
    _check_ndim(student_values, (4,), "val_kl", "[B, H, L, d]")
    _check_ndim(teacher_values, (4,), "val_kl", "[B, H, L, d]")
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
    batch, _, length, _ = student_values.shape
    valid = padding_mask(mask, batch, length, student_values.device) > 0
    head_size = teacher_values.shape[-1] if scale_by == "teacher" else None
    s_rel = _relation_scores(_f32(student_values), valid, head_size)
    t_rel = _relation_scores(_f32(teacher_values).detach(), valid)
    return att_kl(s_rel, t_rel, mask)


@outside_autocast
def relation_kl(student_x: Tensor, teacher_x: Tensor, num_heads: int, mask: Tensor | None = None) -> Tensor:
    """Self-attention relation KL (MiniLMv2).

    Shapes: ``student_x``: ``[B, L, D_s]``, ``teacher_x``: ``[B, L, D_t]``
    (queries, keys or values of one layer with heads concatenated);
    ``mask``: ``[B, L]`` or ``None``.

    Each side is split into ``num_heads`` relation heads of size
    ``d_r = D / num_heads`` (``D`` must be divisible), relation scores are
    ``X_r X_r^T / sqrt(d_r)``, then the :func:`att_kl` reduction (mean KL over
    relation heads and valid query rows). Works for any student width and
    attention-head count since only ``num_heads`` relation heads are used.
    """
    _check_ndim(student_x, (3,), "relation_kl", "[B, L, D]")
    _check_ndim(teacher_x, (3,), "relation_kl", "[B, L, D]")
    if student_x.shape[:2] != teacher_x.shape[:2]:
        raise ValueError(
            f"relation_kl: student and teacher [B, L] differ: "
            f"{tuple(student_x.shape[:2])} vs {tuple(teacher_x.shape[:2])}"
        )
    if num_heads < 1:
        raise ValueError(f"relation_kl: num_heads must be >= 1, got {num_heads}")
    return val_kl(
        split_heads(student_x, num_heads, "relation_kl (student)"),
        split_heads(teacher_x, num_heads, "relation_kl (teacher)"),
        mask,
    )


# --------------------------------------------------------------------------- #
# hidden states
# --------------------------------------------------------------------------- #
def _check_hidden(student: Tensor, teacher: Tensor, mask: Tensor | None, what: str) -> None:
    _check_ndim(student, (2, 3), what, "[B, L, D] or [B, D]")
    _check_same_shape(student, teacher, what)
    if student.dim() == 2 and mask is not None:
        raise ValueError(f"{what}: a mask is only supported for [B, L, D] inputs, got [B, D] inputs")


@outside_autocast
def hid_mse(student_hidden: Tensor, teacher_hidden: Tensor, mask: Tensor | None = None) -> Tensor:
    """Hidden-state MSE (TinyBERT).

    Shapes: ``student_hidden``, ``teacher_hidden``: ``[B, L, D]`` (student
    already projected to the teacher width) with ``mask`` ``[B, L]`` or
    ``None``; or ``[B, D]`` (e.g. [CLS] states) with ``mask=None``.

    ``[B, L, D]``: ``sum_{valid tokens, dims} (s - t)^2 / ((sum_b n_b) * D)``.
    ``[B, D]``: plain mean of ``(s - t)^2``.
    """
    _check_hidden(student_hidden, teacher_hidden, mask, "hid_mse")
    s = _f32(student_hidden)
    t = _f32(teacher_hidden).detach()
    if s.dim() == 2:
        return (s - t).pow(2).mean()
    batch, length, width = s.shape
    m = padding_mask(mask, batch, length, s.device)
    valid = (m > 0)[:, :, None]
    s = s.masked_fill(~valid, 0.0)
    t = t.masked_fill(~valid, 0.0)
    denom = (m.sum() * width).clamp_min(1.0)
    return (s - t).pow(2).sum() / denom


@outside_autocast
def cosine(student_hidden: Tensor, teacher_hidden: Tensor, mask: Tensor | None = None) -> Tensor:
    """Cosine embedding loss (DistilBERT).

    Shapes: ``student_hidden``, ``teacher_hidden``: ``[B, L, D]`` with
    ``mask`` ``[B, L]`` or ``None``; or ``[B, D]`` with ``mask=None``.

    ``loss = mean over valid tokens of (1 - cos(s_i, t_i))`` where the cosine
    is taken over the last dim: ``sum_{valid i} (1 - cos_i) / sum_b n_b``.
    """
    _check_hidden(student_hidden, teacher_hidden, mask, "cosine")
    s = _f32(student_hidden)
    t = _f32(teacher_hidden).detach()
    if s.dim() == 2:
        return (1.0 - F.cosine_similarity(s, t, dim=-1)).mean()
    batch, length, _ = s.shape
    m = padding_mask(mask, batch, length, s.device)
    valid = m > 0
    # Padded tokens become identical unit-direction vectors (cos = 1, well
    # defined gradient) and are then excluded from the sum.
    s = s.masked_fill(~valid[:, :, None], 1.0)
    t = t.masked_fill(~valid[:, :, None], 1.0)
    per_token = torch.where(valid, 1.0 - F.cosine_similarity(s, t, dim=-1), s.new_zeros(()))
    return per_token.sum() / m.sum().clamp_min(1.0)


# --------------------------------------------------------------------------- #
# the registry: config name -> how a term applies the loss
# --------------------------------------------------------------------------- #
@dataclass(frozen=True)
class LossEntry:
    """How an objective's term applies a loss, named in configs as `fn` is named.

    A loss is called on each mapped layer pair's (student, teacher) features and summed over the pairs; a
    `module` loss instead builds a learnable module, called once on the features of all mapped layers concatenated.
    """

    fn: Callable[..., Tensor]  # the loss on one layer pair's features; for a `module` loss, its module's factory
    features: tuple[str, ...]  # the features it reads (`features.FEATURES` or LOGITS); the first is the default
    fused: Callable[..., Tensor] | None = None  # the same loss on the raw projections, its gradient formed in forward
    projected: bool = False  # a learnable student->teacher width projection precedes it
    module: bool = False  # `fn(student_width, teacher_width, train_labels, seed, **params)` builds an nn.Module
    classification_only: bool = False  # contrasts examples by their task labels
    mlm: bool = False  # reads masked-language-model logits (task-agnostic setting, a teacher with an MLM head)

    # Read at every step, so plain attributes (a step compiled by torch.compile traces them):
    # called with the batch's labels (the task's labels, or the MLM's original token ids)
    takes_labels: bool = field(init=False)
    # takes `num_heads` (relation heads; a term's default is the teacher's head count)
    takes_num_heads: bool = field(init=False)

    def __post_init__(self):
        parameters = inspect.signature(self.fn).parameters
        object.__setattr__(self, "takes_labels", "labels" in parameters)
        object.__setattr__(self, "takes_num_heads", "num_heads" in parameters)

    @cached_property
    def param_names(self) -> frozenset[str]:
        """What a term's `params` may set: `fn`'s arguments after the two features, less the mask and labels a
        step passes; for a `module` loss, the keyword arguments of the module it builds."""
        if self.module:
            builds = typing.get_type_hints(self.fn)["return"]
            keywords = inspect.signature(builds).parameters.values()
            return frozenset(p.name for p in keywords if p.kind is p.KEYWORD_ONLY) - {"seed"}
        return frozenset(list(inspect.signature(self.fn).parameters)[2:]) - {"mask", "labels"}


LOSSES: dict[str, LossEntry] = {
    "kd": LossEntry(kd, (LOGITS,)),
    "mlm_kd": LossEntry(mlm_kd, (LOGITS,), mlm=True),
    "mlm": LossEntry(mlm, (LOGITS,), mlm=True),
    "att_mse": LossEntry(att_mse, ("attention_scores",), fused=fused.att_mse),
    "att_kl": LossEntry(att_kl, ("attention_scores",), fused=fused.att_kl),
    "val_kl": LossEntry(val_kl, ("values",), fused=fused.att_kl),  # att_kl on the maps V V^T
    "relation_kl": LossEntry(relation_kl, ("query", "key", "value"), fused=fused.att_kl),  # att_kl on X X^T
    "hid_mse": LossEntry(hid_mse, ("hidden", "cls"), projected=True),
    "cosine": LossEntry(cosine, ("hidden", "cls"), projected=True),
    "crd": LossEntry(crd, ("cls",), module=True, classification_only=True),
}
