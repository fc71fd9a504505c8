"""What the features and the losses share: the records key of the logits, the score a masked entry
takes, heads split from a projection, the padding mask, TinyBERT's released attention map, and a
loss computed outside autocast."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import Tensor

LOGITS = "logits"  # the records key of the model's outputs (not a layer)

# A masked (query, key) score is replaced by this before a softmax over keys: exp() underflows to
# exactly 0 against any realistic score, and a row that is entirely masked stays finite (a uniform
# softmax) instead of nan.
MASKED_SCORE = -1.0e9


def split_heads(x: Tensor, num_heads: int, what: str = "split_heads") -> Tensor:
    """[B, L, H*d] -> [B, H, L, d], a view where the layout allows one. `what` names the caller in
    the error."""
    batch, length, width = x.shape
    if width % num_heads != 0:
        raise ValueError(f"{what}: hidden size {width} is not divisible by num_heads={num_heads}")
    return x.reshape(batch, length, num_heads, width // num_heads).transpose(1, 2)


def padding_mask(mask: Tensor | None, batch: int, length: int, device: torch.device) -> Tensor:
    """A padding mask [B, L] of any dtype (non-zero = a real token; None = every token real) as
    float32 0.0 / 1.0."""
    if mask is None:
        return torch.ones(batch, length, dtype=torch.float32, device=device)
    if mask.shape != (batch, length):
        raise ValueError(
            f"mask: expected shape {(batch, length)} ([B, L]), got {tuple(mask.shape)}"
        )
    return (mask.to(device) != 0).to(torch.float32)


# `padding`: a loss's average over real tokens only (kdbench's), or over every position of a batch
# padded to the maximum length, [PAD] included, as TinyBERT's released code averages its MSE losses
PADDINGS = ("masked", "tinybert")
# TinyBERT's released BERT adds this to the scores of padded keys; its task_distill.py and
# general_distill.py then zero every score at or below RELEASED_FLOOR on each side before the MSE
RELEASED_MASK_SCORE = -10000.0
RELEASED_FLOOR = -1.0e2


def check_padding(padding: str, what: str) -> None:
    """`padding` is one of PADDINGS; `what` names the caller in the error."""
    if padding not in PADDINGS:
        raise ValueError(f"{what}: padding must be one of {', '.join(PADDINGS)}, got {padding!r}")


def released_masked(scores: Tensor, mask: Tensor) -> Tensor:
    """Float32 scores [B, H, L, L] without an additive mask, RELEASED_MASK_SCORE added at the padded
    keys of the float32 padding mask [B, L], as the released BERT adds it."""
    return scores + (1.0 - mask)[:, None, None, :] * RELEASED_MASK_SCORE


def released_scores(scores: Tensor, mask: Tensor) -> Tensor:
    """The attention map TinyBERT's released code compares (`released_masked` of float32 scores
    [B, H, L, L] and a padding mask [B, L], every entry <= RELEASED_FLOOR zeroed): padded keys and
    any real score that low are zero, padded queries keep their scores against real keys."""
    masked = released_masked(scores, mask)
    return torch.where(masked <= RELEASED_FLOOR, masked.new_zeros(()), masked)


def _first_tensor(args) -> Tensor | None:
    for arg in args:
        found = _first_tensor(arg) if isinstance(arg, (tuple, list)) else arg
        if isinstance(found, Tensor):
            return found
    return None


def outside_autocast(loss: Callable) -> Callable:
    """`loss` computed with autocast off on its inputs' device: the loss casts its inputs to
    float32, and every matmul and reduction in it then runs in float32 whatever autocast region
    calls it."""

    @functools.wraps(loss)
    def computed(*args, **kwargs):
        tensor = _first_tensor(args)
        device_type = tensor.device.type if tensor is not None else "cpu"
        with torch.autocast(device_type, enabled=False):
            return loss(*args, **kwargs)

    return computed
