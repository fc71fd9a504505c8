"""The parts of a BERT-family encoder (BERT, RoBERTa, ELECTRA, ...): its blocks, embeddings and
heads."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from kdbench.errors import ConfigError

if TYPE_CHECKING:  # a type only: importing it loads transformers' modeling code
    from transformers import PreTrainedModel

MLM_HEADS = ("cls", "lm_head")  # BERT's MLM head, RoBERTa's
TASK_HEADS = ("classifier", "pooler")  # a sequence classifier and the pooler under it


def encoder_layers(model: PreTrainedModel) -> torch.nn.ModuleList:
    """The transformer blocks of a BERT-family encoder (BERT, RoBERTa, ELECTRA, ...)."""
    base = model.base_model
    layers = getattr(getattr(base, "encoder", None), "layer", None)
    if layers is None:
        raise ConfigError(
            f"{type(model).__name__} has no encoder.layer blocks: kdbench supports BERT-family "
            "encoders (BERT, RoBERTa, ELECTRA, ...)"
        )
    return layers


def embeddings(model: PreTrainedModel) -> torch.nn.Module:
    return model.base_model.embeddings


def prediction_head(model: PreTrainedModel) -> dict[str, torch.nn.Module]:
    """The modules above the encoder that the model has: the pooler, a classifier, an MLM head."""
    head = {
        name: getattr(model, name)
        for name in (*MLM_HEADS, "classifier")
        if isinstance(getattr(model, name, None), torch.nn.Module)
    }
    pooler = getattr(model.base_model, "pooler", None)
    if pooler is not None:
        head["pooler"] = pooler
    return head


def mlm_head(model: PreTrainedModel) -> torch.nn.Module:
    """The masked-language-model head (hidden states -> vocabulary logits)."""
    for name in MLM_HEADS:
        if isinstance(getattr(model, name, None), torch.nn.Module):
            return getattr(model, name)
    raise ConfigError(
        f"{type(model).__name__} has no MLM head: MLM-based objectives need a teacher with one"
    )
