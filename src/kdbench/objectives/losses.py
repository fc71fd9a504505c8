"""Distillation losses as pure functions over tensors, and `LOSSES`, the registry the objective
configs name.

Every function here takes student and teacher tensors (and optionally a padding
mask) and returns a scalar float32 loss. There is no model or config inside.
A config's `loss: X` is computed by the function `X` here (`LOSSES[X].fn`; the MLM
losses `mlm_kd` and `mlm` are `vocabulary`'s), or by its form in `fused`
(`LOSSES[X].fused`) where it has one; `LOSSES[X].rules` declares the ranges of the
parameters a term gives it.

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
  even ``inf`` or ``nan``, change neither the loss nor the student gradients;
  except under a ``padding`` that counts them (`tensors`): ``"rows"`` and
  ``"none"`` (att_kl, val_kl: a term's ``params.padding``, the study's
  released KLs) and ``"tinybert"`` (att_mse, hid_mse: a stage's `padding`,
  every position averaged as TinyBERT's released code does).
* The teacher side is detached: gradients only flow into the student inputs.
* Without padding the normalisations coincide with the ones used by the
  original implementations (TinyBERT / MiniLM / MiniLMv2 / DistilBERT).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from kdbench.objectives import fused
from kdbench.objectives.contrastive import crd
from kdbench.objectives.loss_checks import (
    check_hidden,
    check_logits,
    check_relation_inputs,
    check_scores,
    check_values,
)
from kdbench.objectives.loss_entry import LossEntry
from kdbench.objectives.score_maps import masked_row_kl, relation_scores
from kdbench.objectives.tensors import (
    KL_PADDINGS,
    LOGITS,
    MSE_PADDINGS,
    check_padding,
    outside_autocast,
    padding_mask,
    released_scores,
    rows_and_keys,
    split_heads,
)
from kdbench.objectives.vocabulary import mlm, mlm_kd
from kdbench.planning.rules import COUNT, POSITIVE, PROBABILITY, choice

__all__ = ["kd", "att_mse", "att_kl", "val_kl", "relation_kl", "hid_mse", "cosine", "mlm_kd", "mlm"]


# --- private helpers
def _f32(x: Tensor) -> Tensor:
    return x.to(torch.float32)


# --- logits
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
    check_logits(student_logits, teacher_logits, temperature, "kd", "[B, C]")
    batch, num_classes = student_logits.shape
    s = _f32(student_logits)
    t = _f32(teacher_logits).detach()

    if labels is not None and labels.shape != (batch,):
        raise ValueError(f"kd: labels must have shape {(batch,)} ([B]), got {tuple(labels.shape)}")

    if num_classes == 1:
        return _kd_regression(s[:, 0], t[:, 0], labels, alpha)
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


def _kd_regression(s: Tensor, t: Tensor, labels: Tensor | None, alpha: float) -> Tensor:
    """`kd` for one output (``C == 1``): MSE to the teacher, mixed with MSE to any labels."""
    soft = F.mse_loss(s, t)
    if labels is None:
        return soft
    hard = F.mse_loss(s, _f32(labels.to(s.device)))
    return alpha * soft + (1.0 - alpha) * hard


# --- attention / relations
@outside_autocast
def att_mse(
    student_scores: Tensor,
    teacher_scores: Tensor,
    mask: Tensor | None = None,
    *,
    padding: str = "masked",
) -> Tensor:
    """TinyBERT attention MSE.

    Shapes: ``student_scores``, ``teacher_scores``: ``[B, H, L, L]``
    pre-softmax scores (no additive mask); ``mask``: ``[B, L]`` or ``None``.

    ``padding="masked"``: ``loss = sum_{b, h, i, j valid} (s - t)^2 / (H * sum_b n_b^2)``, i.e.
    the mean squared difference over heads and valid (query, key) pairs, with ``n_b`` the number of
    valid tokens of example ``b``. ``padding="tinybert"``: the released code's mean over all
    ``B * H * L * L`` entries of the maps `tensors.released_scores` gives (padded keys zeroed,
    padded queries kept, scores <= -100 zeroed on each side).
    """
    check_scores(student_scores, teacher_scores, "att_mse")
    check_padding(padding, "att_mse", MSE_PADDINGS)
    batch, num_heads, length, _ = student_scores.shape
    m = padding_mask(mask, batch, length, student_scores.device)
    s, t = _f32(student_scores), _f32(teacher_scores).detach()
    if padding == "tinybert":
        return (released_scores(s, m) - released_scores(t, m)).pow(2).mean()
    valid = m > 0
    pair = valid[:, None, :, None] & valid[:, None, None, :]
    s, t = s.masked_fill(~pair, 0.0), t.masked_fill(~pair, 0.0)
    denom = (num_heads * (m.sum(dim=1) ** 2).sum()).clamp_min(1.0)
    return (s - t).pow(2).sum() / denom


@outside_autocast
def att_kl(
    student_scores: Tensor,
    teacher_scores: Tensor,
    mask: Tensor | None = None,
    *,
    padding: str = "masked",
) -> Tensor:
    """Attention-distribution KL (MiniLM).

    Shapes: ``student_scores``, ``teacher_scores``: ``[B, H, L, L]``
    pre-softmax scores (no additive mask); ``mask``: ``[B, L]`` or ``None``.

    For each head ``h`` and valid query row ``i`` of example ``b``::

        KL(softmax(t[b, h, i, valid keys]) || softmax(s[b, h, i, valid keys]))

    Reduction: sum over heads and valid rows divided by ``H * sum_b n_b``.
    Finite for any padding pattern (including fully padded examples). That is
    ``padding="masked"``; ``"rows"`` counts every query row of the padded batch
    and divides by ``B * H * L``, as the study's released code (its maps are
    ``[B*H, L, L]``, ``-inf`` at padded keys); ``"none"`` counts padded keys too.
    """
    check_scores(student_scores, teacher_scores, "att_kl")
    batch, _, length, _ = student_scores.shape
    m = padding_mask(mask, batch, length, student_scores.device)
    rows, keys = rows_and_keys(m, padding)
    return masked_row_kl(_f32(student_scores), _f32(teacher_scores).detach(), rows, keys)


@outside_autocast
def val_kl(
    student_values: Tensor,
    teacher_values: Tensor,
    mask: Tensor | None = None,
    *,
    scale_by: str = "own",
    padding: str = "masked",
) -> Tensor:
    """Value-relation KL (MiniLM).

    Shapes: ``student_values``: ``[B, H, L, d_s]``, ``teacher_values``:
    ``[B, H, L, d_t]`` (head sizes may differ, head counts may not);
    ``mask``: ``[B, L]`` or ``None``.

    The value relation ``V V^T / sqrt(d)`` is used as pre-softmax scores and
    reduced exactly like :func:`att_kl`: mean KL over heads and valid query
    rows, i.e. ``sum / (H * sum_b n_b)``. ``scale_by``: ``"own"`` divides
    each side by its own head size, ``"teacher"`` both by the teacher's
    ``d_t`` (MiniLM's Eq. 8 writes one ``d_k``; the two differ only when the
    head sizes do, as across an assistant chain). ``padding``: as :func:`att_kl`'s;
    ``"none"`` is the study's released value relation.
    """
    check_values(student_values, teacher_values, scale_by)
    batch, _, length, _ = student_values.shape
    m = padding_mask(mask, batch, length, student_values.device)
    rows, keys = rows_and_keys(m, padding)
    head_size = teacher_values.shape[-1] if scale_by == "teacher" else None
    s_rel = relation_scores(_f32(student_values), rows, keys, head_size)
    t_rel = relation_scores(_f32(teacher_values).detach(), rows, keys)
    return masked_row_kl(s_rel, t_rel, rows, keys)


@outside_autocast
def relation_kl(
    student_x: Tensor, teacher_x: Tensor, num_heads: int, mask: Tensor | None = None
) -> Tensor:
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
    check_relation_inputs(student_x, teacher_x, num_heads)
    return val_kl(
        split_heads(student_x, num_heads, "relation_kl (student)"),
        split_heads(teacher_x, num_heads, "relation_kl (teacher)"),
        mask,
    )


# --- hidden states
@outside_autocast
def hid_mse(
    student_hidden: Tensor,
    teacher_hidden: Tensor,
    mask: Tensor | None = None,
    *,
    padding: str = "masked",
) -> Tensor:
    """Hidden-state MSE (TinyBERT).

    Shapes: ``student_hidden``, ``teacher_hidden``: ``[B, L, D]`` (student
    already projected to the teacher width) with ``mask`` ``[B, L]`` or
    ``None``; or ``[B, D]`` (e.g. [CLS] states) with ``mask=None``.

    ``[B, L, D]``: ``sum_{valid tokens, dims} (s - t)^2 / ((sum_b n_b) * D)``; with
    ``padding="tinybert"`` the released code's plain mean over every position, [PAD] included.
    ``[B, D]``: plain mean of ``(s - t)^2``.
    """
    check_hidden(student_hidden, teacher_hidden, mask, "hid_mse")
    check_padding(padding, "hid_mse", MSE_PADDINGS)
    s = _f32(student_hidden)
    t = _f32(teacher_hidden).detach()
    if s.dim() == 2 or padding == "tinybert":
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
    check_hidden(student_hidden, teacher_hidden, mask, "cosine")
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


# --- the registry: config name -> how a term applies the loss
SCALE_BY = choice("own", "teacher", meaning="teacher: both relations by the teacher's head size")
PADDING = choice(*KL_PADDINGS, meaning="rows: every query row counted; none: no padding mask")
ATT_KL, VAL_KL = {"padding": PADDING}, {"padding": PADDING, "scale_by": SCALE_BY}
CRD = {
    "feat_dim": COUNT,
    "num_negatives": COUNT,
    "temperature": POSITIVE,
    "momentum": PROBABILITY,
    "form": choice("infonce", "nce", meaning="nce: CRD as released"),
}
LOSSES: dict[str, LossEntry] = {
    "kd": LossEntry(
        kd,
        (LOGITS,),
        classification_params=("temperature",),
        rules={"temperature": POSITIVE, "alpha": PROBABILITY},
    ),
    "mlm_kd": LossEntry(mlm_kd, (LOGITS,), mlm=True, rules={"temperature": POSITIVE}),
    "mlm": LossEntry(mlm, (LOGITS,), mlm=True),
    "att_mse": LossEntry(att_mse, ("attention_scores",), fused=fused.att_mse),
    "att_kl": LossEntry(att_kl, ("attention_scores",), fused=fused.att_kl, rules=ATT_KL),
    # att_kl on the maps V V^T
    "val_kl": LossEntry(val_kl, ("values",), fused=fused.att_kl, rules=VAL_KL),
    # att_kl on X X^T
    "relation_kl": LossEntry(
        relation_kl, ("query", "key", "value"), fused=fused.att_kl, rules={"num_heads": COUNT}
    ),
    "hid_mse": LossEntry(hid_mse, ("hidden", "cls"), projected=True),
    "cosine": LossEntry(cosine, ("hidden", "cls"), projected=True),
    "crd": LossEntry(crd, ("cls",), module=True, classification_only=True, rules=CRD),
}
