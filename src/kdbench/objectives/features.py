"""The features an objective compares, and reading them from a model by forward hooks at the mapped
layers only.

The models keep their fast attention (SDPA): attention scores are not taken from
`output_attentions`, they are recomputed inside the loss from the query/key projections captured
here, and only at mapped layers. A forward can also stop right after the last layer a stage needs
(the teacher in stage 1 never runs its upper layers or its classifier), and, where that layer is
read at its query/key/value projections only, right after those projections.

Layer numbers are 1-based transformer blocks; layer 0 is the embedding output. A layer's records
hold its raw features (`RAW_FEATURES`); the features a loss reads (`FEATURES`) are derived from
them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from kdbench.models.anatomy import embeddings, encoder_layers
from kdbench.objectives.tensors import LOGITS, outside_autocast, split_heads

# Raw features a hook can record at a layer: the attention projections, by their module names in
# BERT, RoBERTa and DistilBERT, and the layer's output ("hidden").
PROJECTION_NAMES = {
    "query": ("query", "q_proj", "q_lin"),
    "key": ("key", "k_proj", "k_lin"),
    "value": ("value", "v_proj", "v_lin"),
}
RAW_FEATURES = (*PROJECTION_NAMES, "hidden")


@outside_autocast
def attention_scores(raw: Mapping[str, Tensor], num_heads: int) -> Tensor:
    """Pre-softmax scores Q K^T / sqrt(d_head), [B, H, L, L], float32 (the product too, under
    autocast), no mask added."""
    q = split_heads(raw["query"].float(), num_heads)
    k = split_heads(raw["key"].float(), num_heads)
    return q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])


@dataclass(frozen=True)
class Feature:
    """A feature a loss term can read at a layer."""

    raw: tuple[str, ...]  # the raw features it is derived from (the hooks record them)
    derive: Callable[
        [Mapping[str, Tensor], int], Tensor
    ]  # (the layer's raw features, its head count) -> feature
    token_level: bool = (
        True  # one vector per token, [B, L, ...] or [B, H, L, ...], masked by padding
    )
    per_head: bool = (
        False  # split into the attention heads: student and teacher compare head by head
    )


def _recorded(name: str) -> Feature:
    """A raw feature read as recorded, [B, L, D]."""
    return Feature((name,), lambda raw, heads: raw[name])


FEATURES: dict[str, Feature] = {
    "attention_scores": Feature(("query", "key"), attention_scores, per_head=True),  # [B, H, L, L]
    "values": Feature(
        ("value",), lambda raw, heads: split_heads(raw["value"], heads), per_head=True
    ),  # [B, H, L, d]
    "query": _recorded("query"),
    "key": _recorded("key"),
    "value": _recorded("value"),
    "hidden": _recorded("hidden"),
    "cls": Feature(
        ("hidden",), lambda raw, heads: raw["hidden"][:, 0], token_level=False
    ),  # [B, D]
}


def token_level(feature: str) -> bool:
    """Whether `feature` (a FEATURES key or LOGITS) has one vector per token, masked by padding."""
    return feature != LOGITS and FEATURES[feature].token_level


class _StopForward(Exception):
    """Raised by a hook to end a forward pass once the last needed layer has run."""


def _first(output):
    return output[0] if isinstance(output, tuple) else output


class FeatureRecorder:
    """Hooks recording raw features at chosen layers, optionally stopping the forward after
    `stop_after`.

    `needs` maps a layer number (0 = embeddings) to the raw features wanted there. When `stop_after`
    needs only projections, the forward stops as soon as they are recorded: that block's attention
    and feed-forward never run. Use as a context manager (hooks are removed on exit);
    `forward(**batch)` returns the model output, or None when stopped early.
    """

    def __init__(
        self, model: nn.Module, needs: Mapping[int, set[str]], stop_after: int | None = None
    ):
        self.model = model  # called by `forward`; hooks go on its layers
        self.records: dict[int, dict[str, torch.Tensor]] = {}
        self._handles = []
        blocks = encoder_layers(model)
        # A last layer read at its projections only stops once they have run (no attention, no
        # feed-forward).
        last = set(needs.get(stop_after, ())) if stop_after is not None else set()
        stop_projections = set() if "hidden" in last else last & set(PROJECTION_NAMES)
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
                stop = stop_projections if layer == stop_after else set()
                self._handles.append(module.register_forward_hook(self._keeper(layer, name, stop)))
        hidden_layers = {layer for layer, wanted in needs.items() if "hidden" in wanted}
        if stop_after is not None and not stop_projections:
            hidden_layers.add(stop_after)
        for layer in sorted(hidden_layers):
            module = embeddings(model) if layer == 0 else blocks[layer - 1]
            keep = "hidden" in needs.get(layer, ())
            self._handles.append(
                module.register_forward_hook(self._block_hook(layer, keep, layer == stop_after))
            )

    def _keeper(self, layer: int, name: str, stop_once: set[str]):
        """Records the projection; ends the forward once every projection in `stop_once` is
        recorded."""

        def hook(module, inputs, output):
            recorded = self.records.setdefault(layer, {})
            recorded[name] = _first(output)
            if stop_once and all(name in recorded for name in stop_once):
                raise _StopForward

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
