"""The score-map losses with their gradient formed in the forward pass, a chunk of heads at a time.

att_kl and att_mse (maps Z = Q K^T / sqrt(d)), val_kl and relation_kl (maps Z = X X^T / sqrt(d)) are
sums over heads of a function of the student's and the teacher's [B, h, L, L] score maps. Through
autograd, every one of those maps and the loss's intermediates stay alive until backward: at length
512 and batch 8, 100 MiB per map and about 2 GiB for att_kl+val_kl over three layer pairs. Here the
gradient with respect to the student's map has a closed form (KL: p_s - p_t on valid entries; MSE: 2
(z_s - z_t)), so the forward pass turns it into the gradients of the student's projections, dA = G B
/ sqrt(d) and dB = G^T A / sqrt(d) ([B, L, H*d], as small as the projections), and keeps only those;
the maps of one chunk of heads exist at a time. The definitions, masking and normalisations are
those of `losses` (the reference the tests compare with): the same losses and gradients to float32
rounding, in one pass instead of a forward and a backward through the maps.

`att_kl` and `att_mse` here are the fused forms the registry `losses.LOSSES` gives those losses (and
val_kl and relation_kl, att_kl on self-relation maps). A chunk's products and the loss between them
(`_chunk`) are a `chains.chain`: compiled, with `trainer.compile`, into one kernel between the
products.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from kdbench.objectives.chains import chain
from kdbench.objectives.tensors import (
    MASKED_SCORE,
    MSE_PADDINGS,
    RELEASED_FLOOR,
    check_padding,
    outside_autocast,
    padding_mask,
    released_masked,
    released_scores,
    rows_and_keys,
    split_heads,
)

# Heads per chunk are chosen so that one [B, h, L, L] float32 map is about this size: every head at
# once on GLUE-length batches, a few heads at a time at length 512 (a chunk holds about four maps at
# once).
CHUNK_BYTES = 64 * 2**20


def _heads_view(x: Tensor, start: int, stop: int, heads: int, zeroed: Tensor | None) -> Tensor:
    """Heads [start, stop) of a projection [B, L, heads*d] as float32 [B, h, L, d], the tokens
    `zeroed` [B, L] marks (those a loss leaves out, or None) zeroed."""
    d = x.shape[-1] // heads
    chunk = x[..., start * d : stop * d]
    if chunk.dtype != torch.float32:
        chunk = chunk.float()
    if zeroed is not None:
        chunk = chunk.masked_fill(zeroed[:, :, None], 0.0)
    return split_heads(chunk, stop - start)


def _merge_heads(x: Tensor) -> Tensor:
    """[B, h, L, d] -> [B, L, h*d], the projections' layout."""
    batch, _, length, _ = x.shape
    return x.transpose(1, 2).reshape(batch, length, -1)


def _kl_rows(student: Tensor, teacher: Tensor, pair: Tensor) -> tuple[Tensor, Tensor]:
    """sum over counted (query, key) of p_t (log p_t - log p_s), and its gradient p_s - p_t, for
    [B, h, L, L] maps.

    Both maps are consumed (overwritten). Keys left out leave the softmax; rows left out contribute
    nothing. The value is one dot product of p_t with log p_t - log p_s: both log-maps are finite
    everywhere (invalid entries hold MASKED_SCORE, not -inf) and p_t is zero off the valid pairs, so
    neither the difference needs masking nor the product a map of its own.
    """
    left_out = ~pair
    log_student = torch.log_softmax(student.masked_fill_(left_out, MASKED_SCORE), dim=-1)
    log_teacher = torch.log_softmax(teacher.masked_fill_(left_out, MASKED_SCORE), dim=-1)
    del student, teacher
    p_teacher = log_teacher.exp().masked_fill_(left_out, 0.0)
    value = torch.dot(p_teacher.flatten(), log_teacher.sub_(log_student).flatten())
    grad = log_student.exp_().sub_(p_teacher).masked_fill_(left_out, 0.0)
    return value, grad


def _squared_error(student: Tensor, teacher: Tensor, pair: Tensor) -> tuple[Tensor, Tensor]:
    """sum over valid (query, key) of (s - t)^2, and its gradient 2 (s - t)."""
    diff = student.sub_(teacher).masked_fill_(~pair, 0.0)
    return diff.square().sum(), diff.mul_(2.0)


def _released_squared_error(
    student: Tensor, teacher: Tensor, mask: Tensor
) -> tuple[Tensor, Tensor]:
    """sum over every (query, key) of (s' - t')^2, with s', t' the maps `released_scores` keeps
    (`mask`: float32 [B, L]), and its gradient 2 (s' - t') where the student's entry is kept."""
    student = released_masked(student, mask)
    kept = student > RELEASED_FLOOR
    diff = torch.where(kept, student, student.new_zeros(())).sub_(released_scores(teacher, mask))
    return diff.square().sum(), diff.masked_fill_(~kept, 0.0).mul_(2.0)


# kind -> (the sum over a chunk's entries and its gradient, the normaliser's count from the counted
# query rows and keys per example [B] (`tensors.rows_and_keys`), or None: tinybert_mse counts every
# position and leaves no token out, as TinyBERT's released code averages)
KINDS = {
    "kl": (_kl_rows, lambda rows, keys: rows.sum()),  # counted query rows: sum_b n_b
    "mse": (_squared_error, lambda rows, keys: (rows * keys).sum()),  # pairs: sum_b n_b^2
    "tinybert_mse": (_released_squared_error, None),
}


def _entries(
    kind: str, m: Tensor, heads: int, padding: str
) -> tuple[Tensor, tuple[Tensor | None, Tensor | None], Tensor]:
    """What the kind's sum reads beside the maps (the counted (query, key) pairs [B, 1, L, L], or
    the padding mask [B, L] itself), the tokens zeroed before the products as query rows (A) and as
    keys (B) (None: none), and the normaliser; `padding`: the rows and keys counted, as
    `tensors.rows_and_keys` gives them."""
    _, count = KINDS[kind]
    if count is None:
        return m, (None, None), m.new_tensor(heads * m.numel() * m.shape[1])
    rows, keys = rows_and_keys(m, padding)
    denom = (heads * count(rows.sum(dim=1), keys.sum(dim=1))).clamp_min(1)
    return rows[:, None, :, None] & keys[:, None, None, :], (~rows, ~keys), denom


def _cast_gradients(
    grad_a: Tensor, grad_b: Tensor, student_a: Tensor, student_b: Tensor, self_relation: bool
) -> tuple[Tensor, ...]:
    """The gradients to save, in the projections' dtypes: a self-relation's one tensor gets the sum
    of both roles, taken in float32 before the cast."""
    if self_relation:
        return (grad_a.add_(grad_b).to(student_a.dtype),)
    return grad_a.to(student_a.dtype), grad_b.to(student_b.dtype)


@chain
def _chunk(
    kind: str,
    sa: Tensor,
    sb: Tensor,
    ta: Tensor,
    tb: Tensor,
    entries: Tensor,
    denom: Tensor,
    with_grad: bool,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """The kind's sum over one chunk of heads' maps A B^T / sqrt(d) (float32 [B, h, L, d] factors
    of each side), and the gradients of the student's A and B ([B, L, h*d], float32) of the sum
    divided by `denom` (None, None without a gradient)."""
    student_scale, teacher_scale = 1 / math.sqrt(sa.shape[-1]), 1 / math.sqrt(ta.shape[-1])
    value, grad = KINDS[kind][0](
        (sa @ sb.transpose(-1, -2)).mul_(student_scale),
        (ta @ tb.transpose(-1, -2)).mul_(teacher_scale),
        entries,
    )
    if not with_grad:
        return value, None, None
    grad.mul_(student_scale / denom)
    # dA = G B and dB = G^T A, back in the projections' [B, L, h*d] layout
    return value, _merge_heads(grad @ sb), _merge_heads(grad.transpose(-1, -2) @ sa)


class _ScoreMapLoss(torch.autograd.Function):
    """The loss of the maps A B^T; B is None for a self-relation (B = A: the tensor is taken once,
    and its gradient sums both roles in float32 before one cast to its dtype)."""

    @staticmethod
    def forward(
        ctx,
        student_a,
        student_b,
        teacher_a,
        teacher_b,
        mask,
        heads: int,
        kind: str,
        with_grad: bool,
        padding: str,
    ):
        batch, length, _ = student_a.shape
        m = padding_mask(mask, batch, length, student_a.device)
        entries, zeroed, denom = _entries(kind, m, heads, padding)
        self_relation = student_b is None
        student_b = student_a if self_relation else student_b
        teacher_b = teacher_a if teacher_b is None else teacher_b
        step = max(1, CHUNK_BYTES // (4 * batch * length * length))
        values, grads_a, grads_b = [], [], []
        for start in range(0, heads, step):
            stop = min(heads, start + step)
            sides = zip((student_a, student_b, teacher_a, teacher_b), zeroed * 2)
            factors = (_heads_view(x, start, stop, heads, out) for x, out in sides)
            value, chunk_a, chunk_b = _chunk(kind, *factors, entries, denom, with_grad)
            values.append(value)
            grads_a.append(chunk_a)
            grads_b.append(chunk_b)
        if with_grad:
            grad_a, grad_b = (g[0] if len(g) == 1 else torch.cat(g, -1) for g in (grads_a, grads_b))
            ctx.save_for_backward(
                *_cast_gradients(grad_a, grad_b, student_a, student_b, self_relation)
            )
        total = values[0] if len(values) == 1 else torch.stack(values).sum()
        return total / denom

    @staticmethod
    def backward(ctx, grad_output):
        grads = [grad_output * grad for grad in ctx.saved_tensors]
        second = grads[1] if len(grads) == 2 else None
        return grads[0], second, None, None, None, None, None, None, None


@outside_autocast
def score_map_loss(
    kind: str,
    student: tuple[Tensor, Tensor],
    teacher: tuple[Tensor, Tensor],
    heads: int,
    mask: Tensor | None = None,
    padding: str = "masked",
) -> Tensor:
    """The loss between per-head maps A B^T / sqrt(d) of the student and of the teacher, float32
    scalar.

    `student`, `teacher`: (A, B) projections [B, L, heads*d] (each side its own d; A and B may be
    the same tensor, a self-relation, passed to autograd once, its gradient summing both roles);
    `mask`: [B, L] or None. kind "kl": `losses.att_kl` on the maps (sum / (heads * sum_b n_b));
    "mse": `losses.att_mse`; "tinybert_mse": `losses.att_mse` with padding="tinybert". `padding`
    (`tensors.KL_PADDINGS`, kinds kl and mse): the rows and keys the mask leaves out, as
    `losses.att_kl`'s. Tokens left out are zeroed before the product, as `losses`' relations do
    (tinybert_mse: none, padded queries count). Gradients reach the student only.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown score-map loss {kind!r}; valid: {', '.join(KINDS)}")
    for name, x in (("student", student[0]), ("teacher", teacher[0])):
        if x.dim() != 3 or x.shape[-1] % heads:
            raise ValueError(
                f"score_map_loss: {name} projections must be [B, L, heads*d] with {heads} heads, "
                f"got {tuple(x.shape)}"
            )
    if student[0].shape[:2] != teacher[0].shape[:2]:
        raise ValueError(
            f"score_map_loss: student and teacher [B, L] differ: {tuple(student[0].shape[:2])} vs "
            f"{tuple(teacher[0].shape[:2])}"
        )
    with_grad = torch.is_grad_enabled() and (student[0].requires_grad or student[1].requires_grad)
    student_b = None if student[1] is student[0] else student[1]
    teacher_b = None if teacher[1] is teacher[0] else teacher[1].detach()
    return _ScoreMapLoss.apply(
        student[0], student_b, teacher[0].detach(), teacher_b, mask, heads, kind, with_grad, padding
    )


def att_kl(
    student: tuple[Tensor, Tensor],
    teacher: tuple[Tensor, Tensor],
    num_heads: int,
    mask: Tensor | None = None,
    *,
    padding: str = "masked",
) -> Tensor:
    """`losses.att_kl` on the per-head maps A B^T / sqrt(d) of (A, B) projections [B, L,
    num_heads*d], float32.

    (Q, K) gives att_kl on the attention scores; (V, V) `losses.val_kl`; (X, X) with `num_heads`
    relation heads `losses.relation_kl`. `mask`: [B, L] or None; `padding`: as `losses.att_kl`'s.
    """
    return score_map_loss("kl", student, teacher, num_heads, mask, padding)


def att_mse(
    student: tuple[Tensor, Tensor],
    teacher: tuple[Tensor, Tensor],
    num_heads: int,
    mask: Tensor | None = None,
    *,
    padding: str = "masked",
) -> Tensor:
    """`losses.att_mse` (with its `padding`) on the per-head maps Q K^T / sqrt(d) of (Q, K)
    projections [B, L, num_heads*d], float32."""
    check_padding(padding, "att_mse", MSE_PADDINGS)
    kind = "tinybert_mse" if padding == "tinybert" else "mse"
    return score_map_loss(kind, student, teacher, num_heads, mask)
