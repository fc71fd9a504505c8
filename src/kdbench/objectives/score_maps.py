"""Score maps shared by the attention and relation losses: the relation map ``X X^T / sqrt(d)`` and
the masked row-wise KL between two maps."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from kdbench.objectives.tensors import MASKED_SCORE


def masked_row_kl(
    student_scores: Tensor, teacher_scores: Tensor, rows: Tensor, keys: Tensor
) -> Tensor:
    """Masked row-wise KL reduction shared by the attention/relation losses.

    ``student_scores``/``teacher_scores``: float32 ``[B, H, L, L]`` pre-softmax
    scores; ``rows``, ``keys``: bool ``[B, L]``, the query rows and the keys
    counted (`tensors.rows_and_keys`).

    For every head and counted query row ``i`` of example ``b`` computes
    ``KL(softmax(t[b, h, i, K_b]) || softmax(s[b, h, i, K_b]))`` with ``K_b``
    the counted keys, and returns ``sum / (H * number of counted rows)``.
    """
    _, num_heads, _, _ = student_scores.shape
    pair = rows[:, None, :, None] & keys[:, None, None, :]  # [B, 1, L, L]

    # Replace every left-out (query, key) entry before the softmax: left-out keys
    # drop out of the normalisation and left-out query rows become a harmless
    # uniform row; nothing non-finite survives into the graph.
    logp_s = torch.log_softmax(student_scores.masked_fill(~pair, MASKED_SCORE), dim=-1)
    logp_t = torch.log_softmax(teacher_scores.masked_fill(~pair, MASKED_SCORE), dim=-1)
    zero = logp_s.new_zeros(())
    logp_s = torch.where(pair, logp_s, zero)
    logp_t = torch.where(pair, logp_t, zero)
    p_t = torch.where(pair, logp_t.exp(), zero)

    row_kl = (p_t * (logp_t - logp_s)).sum(dim=-1)  # [B, H, L]
    row_kl = torch.where(rows[:, None, :], row_kl, zero)
    denom = (num_heads * rows.sum()).clamp_min(1)
    return row_kl.sum() / denom


def relation_scores(x: Tensor, rows: Tensor, keys: Tensor, head_size: int | None = None) -> Tensor:
    """``X X^T / sqrt(d)`` for float32 ``x`` of shape ``[B, H, L, d]`` (or ``d = head_size``).

    Tokens left out (``rows`` as query rows, ``keys`` as keys, bool ``[B, L]``)
    are zeroed first so that arbitrary padded values cannot overflow the product.
    """
    query = x.masked_fill(~rows[:, None, :, None], 0.0)
    key = x.masked_fill(~keys[:, None, :, None], 0.0)
    return torch.matmul(query, key.transpose(-1, -2)) / math.sqrt(head_size or x.shape[-1])
