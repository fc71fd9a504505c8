"""What the features and the losses share: the records key of the logits, the score a masked entry
takes, heads split from a projection, the padding mask, the padding modes and what each counts in a
score map, TinyBERT's released attention map, and a loss computed outside autocast."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

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


# `padding`: how a loss counts padded positions. "masked": real tokens only (kdbench's). The
# score-map KLs (`losses.att_kl`, `losses.val_kl`, a term's `params.padding`) also take "rows",
# padded tokens as keys only, every query row of the padded batch counted (the study's released
# attention KL, its maps [B*H, L, L] with -inf at padded keys, summed and divided by B*H*L), and
# "none", nothing left out (the study's released value relation). The MSE losses
# (`losses.att_mse`, `losses.hid_mse`, a stage's `padding`) also take "tinybert", every position of
# a batch padded to the maximum length averaged, [PAD] included, as TinyBERT's released code does.
KL_PADDINGS = ("masked", "rows", "none")
MSE_PADDINGS = ("masked", "tinybert")
# TinyBERT's released BERT adds this to the scores of padded keys; its task_distill.py and
# general_distill.py then zero every score at or below RELEASED_FLOOR on each side before the MSE
RELEASED_MASK_SCORE = -10000.0
RELEASED_FLOOR = -1.0e2


def check_padding(padding: str, what: str, accepted: tuple[str, ...]) -> None:
    """`padding` is one of `accepted` (the paddings the loss `what` names takes)."""
    if padding not in accepted:
        raise ValueError(f"{what}: padding must be one of {', '.join(accepted)}, got {padding!r}")


def rows_and_keys(mask: Tensor, padding: str) -> tuple[Tensor, Tensor]:
    """The query rows and the keys a score-map KL counts, bool [B, L] each, from a float32 padding
    mask [B, L] (`padding_mask`) and one of KL_PADDINGS."""
    check_padding(padding, "score-map KL", KL_PADDINGS)
    valid = mask > 0
    every = torch.ones_like(valid)
    return (valid if padding == "masked" else every), (every if padding == "none" else valid)


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
        if isinstance(arg, Mapping):
            arg = list(arg.values())
        found = _first_tensor(arg) if isinstance(arg, (tuple, list)) else arg
        if isinstance(found, Tensor):
            return found
    return None


def outside_autocast(loss: Callable) -> Callable:
    """`loss` computed with autocast off on the device of its first tensor argument (in a tuple,
    list or mapping too): the loss casts its inputs to float32, and every matmul and reduction in
    it then runs in float32 whatever autocast region calls it."""

    @functools.wraps(loss)
    def computed(*args, **kwargs):
        tensor = _first_tensor(args)
        device_type = tensor.device.type if tensor is not None else "cpu"
        with torch.autocast(device_type, enabled=False):
            return loss(*args, **kwargs)

    return computed
