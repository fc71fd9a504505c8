"""`torch.compile` of the dense parts of a model's transformer blocks (`trainer.compile`)."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from kdbench.models.anatomy import encoder_layers

# a BERT-family block, less its self-attention
COMPILED_PARTS = ("attention.output", "intermediate", "output")


def compile_blocks(*models: PreTrainedModel, backend: str = "inductor") -> None:
    """`torch.compile` the dense parts of every transformer block, with dynamic shapes (batches vary
    in length), by `backend` (inductor's fused kernels; the tests trace with aot_eager).

    The self-attention stays eager: its query/key/value projections carry the hooks that read
    features (hooks inside a compiled region would not run), and SDPA is already a fused kernel.
    What is compiled is the attention output projection and the feed-forward (dense, GELU, dropout,
    residual, layer norm), whose elementwise steps inductor fuses; identical parts share one
    compiled graph."""
    for model in models:
        for block in encoder_layers(model):
            for name in COMPILED_PARTS:
                part = block.get_submodule(name)
                part.forward = torch.compile(part.forward, dynamic=True, backend=backend)


def compile_backend(trainer) -> str | None:
    """The backend `trainer.compile` compiles by (the blocks here, the losses' chains with
    `objectives.chains`), None when it is off."""
    return "inductor" if trainer.compile else None


def compile_if_asked(trainer, *models: PreTrainedModel) -> None:
    """`compile_blocks` on the models a stage trains and reads when `trainer.compile` asks for it
    (measured in benchmarks/RESULTS.md; off by default)."""
    if backend := compile_backend(trainer):
        compile_blocks(*models, backend=backend)
