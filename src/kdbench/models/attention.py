"""The attention a model trains with: SDPA with its maps recomputed in backward
(`trainer.recompute_attention`), its input cast once under autocast, and the attention mask a
forward is given."""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from kdbench.models.anatomy import encoder_layers

# the attention implementation `recompute_attention` registers
RECOMPUTED_SDPA = "kdbench_recomputed_sdpa"


def _recomputed_sdpa(module, query, key, value, attention_mask, dropout: float = 0.0, **kwargs):
    """Transformers' SDPA attention, its [B, H, L, L] maps recomputed in backward where it would
    keep them.

    On CPU, SDPA with dropout runs the unfused kernel, which keeps the softmax output, the dropout
    mask and the dropped probabilities of every layer for backward (about 2.25 maps per layer).
    Under activation checkpointing only q, k, v and the mask are kept, and the maps of one layer at
    a time are rebuilt in backward from the saved RNG state: the same dropout mask, so outputs and
    gradients are bitwise those of plain SDPA. The fused GPU kernels keep no maps (dropout
    included), so there, and without dropout, this is plain SDPA."""
    if dropout > 0 and query.device.type == "cpu" and torch.is_grad_enabled():
        return checkpoint(
            sdpa_attention_forward,
            module,
            query,
            key,
            value,
            attention_mask,
            dropout=dropout,
            use_reentrant=False,
            **kwargs,
        )
    return sdpa_attention_forward(
        module, query, key, value, attention_mask, dropout=dropout, **kwargs
    )


def _one_cast_for_projections(module, args: tuple, kwargs: dict):
    """A self-attention module's float32 input (a LayerNorm's output under autocast) cast once to
    autocast's dtype: its query, key and value projections would each cast it again, a kernel
    forward and one backward apiece."""
    hidden = args[0] if args else kwargs["hidden_states"]
    device_type = hidden.device.type
    if hidden.dtype != torch.float32 or not torch.is_autocast_enabled(device_type):
        return None
    hidden = hidden.to(torch.get_autocast_dtype(device_type))
    return ((hidden, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": hidden})


def share_projection_casts(model: PreTrainedModel) -> None:
    """Every block's self-attention casts its input once under autocast
    (`_one_cast_for_projections`), registered once per module."""
    for block in encoder_layers(model):
        attention = getattr(getattr(block, "attention", None), "self", None)
        if attention is not None and not getattr(attention, "_kdbench_one_cast", False):
            attention.register_forward_pre_hook(_one_cast_for_projections, with_kwargs=True)
            attention._kdbench_one_cast = True


def prepare_for_training(model: PreTrainedModel, recompute_attention: bool) -> PreTrainedModel:
    """A model about to be trained: its self-attention casts its input once under autocast
    (`share_projection_casts`); with `recompute_attention` (`trainer.recompute_attention`), its
    attention becomes `_recomputed_sdpa`, with SDPA's form of the padding mask. Not saved with the
    model."""
    share_projection_casts(model)
    if recompute_attention:
        AttentionInterface.register(RECOMPUTED_SDPA, _recomputed_sdpa)
        AttentionMaskInterface.register(RECOMPUTED_SDPA, sdpa_mask)
        model.set_attn_implementation(RECOMPUTED_SDPA)
    return model


# attention implementations whose mask is SDPA's boolean one (`sdpa_mask`)
SDPA_IMPLEMENTATIONS = ("sdpa", RECOMPUTED_SDPA)


def attention_mask(
    model: PreTrainedModel, mask: torch.Tensor, padded: bool | None
) -> torch.Tensor | None:
    """The attention mask to give `model` for a [B, L] padding `mask` (non-zero = a real token).

    Transformers' mask builder reads a [B, L] mask's values to decide whether it can drop it (a
    host-device synchronisation in every forward). Where the host knows (`padded`, from the
    collator), a batch without padding gets no mask (SDPA may then choose its flash kernel); every
    other batch gets SDPA's own form, built on the device from `mask` and passed as is: [B, 1, 1, L]
    booleans, True where a key is attended, for every query. An attention implementation with
    another form of mask (eager) is given `mask` and builds its own.
    """
    if padded is False:
        return None
    if model.config._attn_implementation not in SDPA_IMPLEMENTATIONS:
        return mask
    return (mask != 0)[:, None, None, :]
