"""Reading a model's intermediate features by forward hooks, only at the layers an objective maps.

The models keep their fast attention (SDPA): attention scores are not taken from `output_attentions`, they
are recomputed inside the loss from the query/key projections captured here, and only at mapped layers.
A forward can also stop right after the last layer a stage needs (the teacher in stage 1 never runs its
upper layers or its classifier).

Layer numbers are 1-based transformer blocks; layer 0 is the embedding output.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import torch
from torch import nn

from kdbench.models import embeddings, encoder_layers

# Raw features a hook can record at a layer.
PROJECTION_NAMES = {
    "query": ("query", "q_proj", "q_lin"),
    "key": ("key", "k_proj", "k_lin"),
    "value": ("value", "v_proj", "v_lin"),
}
RAW_FEATURES = (*PROJECTION_NAMES, "hidden")


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """[B, L, H*d] -> [B, H, L, d]."""
    batch, length, width = x.shape
    return x.view(batch, length, num_heads, width // num_heads).transpose(1, 2)


def attention_scores(raw: Mapping[str, torch.Tensor], num_heads: int) -> torch.Tensor:
    """Pre-softmax scores Q K^T / sqrt(d_head), [B, H, L, L], float32, no mask added."""
    q = split_heads(raw["query"].float(), num_heads)
    k = split_heads(raw["key"].float(), num_heads)
    return q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])


# Features a loss term can read: the raw features each needs and how it is derived from them.
FEATURES: dict[str, tuple[tuple[str, ...], Callable[[Mapping[str, torch.Tensor], int], torch.Tensor]]] = {
    "attention_scores": (("query", "key"), attention_scores),
    "values": (("value",), lambda raw, heads: split_heads(raw["value"], heads)),
    "query": (("query",), lambda raw, heads: raw["query"]),
    "key": (("key",), lambda raw, heads: raw["key"]),
    "value": (("value",), lambda raw, heads: raw["value"]),
    "hidden": (("hidden",), lambda raw, heads: raw["hidden"]),
    "cls": (("hidden",), lambda raw, heads: raw["hidden"][:, 0]),
}
TOKEN_LEVEL = {"attention_scores", "values", "query", "key", "value", "hidden"}


class _StopForward(Exception):
    """Raised by a hook to end a forward pass once the last needed layer has run."""


def _first(output):
    return output[0] if isinstance(output, tuple) else output


class FeatureRecorder:
    """Hooks recording raw features at chosen layers, optionally stopping the forward after `stop_after`.

    `needs` maps a layer number (0 = embeddings) to the raw features wanted there. Use as a context manager
    (hooks are removed on exit); `forward(**batch)` returns the model output, or None when stopped early.
    """

    def __init__(self, model: nn.Module, needs: Mapping[int, set[str]], stop_after: int | None = None):
        self.model = model  # called by `forward`; hooks go on its layers
        self.records: dict[int, dict[str, torch.Tensor]] = {}
        self._handles = []
        blocks = encoder_layers(model)
        for layer, wanted in needs.items():
            unknown = set(wanted) - set(RAW_FEATURES)
            if unknown:
                raise ValueError(f"unknown raw features {sorted(unknown)}; known: {RAW_FEATURES}")
            if layer == 0:
                if wanted - {"hidden"}:
                    raise ValueError("layer 0 (embeddings) has only the 'hidden' feature")
                continue
            block = blocks[layer - 1]
            for name in wanted & set(PROJECTION_NAMES):
                module = _find_projection(block, name)
                self._handles.append(module.register_forward_hook(self._keeper(layer, name)))
        hidden_layers = {layer for layer, wanted in needs.items() if "hidden" in wanted}
        if stop_after is not None:
            hidden_layers.add(stop_after)
        for layer in sorted(hidden_layers):
            module = embeddings(model) if layer == 0 else blocks[layer - 1]
            keep = "hidden" in needs.get(layer, ())
            self._handles.append(module.register_forward_hook(self._block_hook(layer, keep, layer == stop_after)))

    def _keeper(self, layer: int, name: str):
        def hook(module, inputs, output):
            self.records.setdefault(layer, {})[name] = _first(output)

        return hook

    def _block_hook(self, layer: int, keep: bool, stop: bool):
        def hook(module, inputs, output):
            if keep:
                self.records.setdefault(layer, {})["hidden"] = _first(output)
            if stop:
                raise _StopForward

        return hook

    def forward(self, **batch):
        self.records = {}
        try:
            return self.model(**batch)
        except _StopForward:
            return None

    def __enter__(self) -> FeatureRecorder:
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


def _find_projection(block: nn.Module, name: str) -> nn.Module:
    aliases = PROJECTION_NAMES[name]
    for module_name, module in block.named_modules():
        if module_name.rsplit(".", 1)[-1] in aliases and isinstance(module, nn.Linear):
            return module
    raise ValueError(f"no {name} projection ({'/'.join(aliases)}) found in {type(block).__name__}")
