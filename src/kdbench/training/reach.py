"""Which parameters a loss reaches, and freezing the others: a forward that stops below a model's
upper layers or heads leaves them without a gradient, which a data-parallel wrapper would otherwise
search for at every step."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from kdbench.training.steps import StepFn, to_device


def reached_leaves(loss: Tensor) -> set[int]:
    """The ids of the leaf tensors whose gradient `loss`'s backward accumulates (the graph is only
    walked, not run)."""
    reached: set[int] = set()
    seen: dict[int, object] = {}  # by id, and kept alive so that no id is reused during the walk
    pending = [loss.grad_fn]
    while pending:
        node = pending.pop()
        if node is None or id(node) in seen:
            continue
        seen[id(node)] = node
        leaf = getattr(node, "variable", None)  # an AccumulateGrad node holds its leaf
        if leaf is not None:
            reached.add(id(leaf))
        pending.extend(following for following, _ in node.next_functions)
    return reached


def freeze_unreached(module: nn.Module, loss: Tensor) -> list[str]:
    """Freeze (requires_grad False) the trainable parameters of `module` that `loss` does not
    depend on; returns their names."""
    reached = reached_leaves(loss)
    frozen = [
        name
        for name, param in module.named_parameters()
        if param.requires_grad and id(param) not in reached
    ]
    for name, param in module.named_parameters():
        if name in frozen:
            param.requires_grad_(False)
    return frozen


def freeze_unreached_by_step(
    module: nn.Module, step: StepFn, batch: dict, device: torch.device
) -> list[str]:
    """`freeze_unreached` with the total loss of one forward of `step` on `batch`; the RNG streams
    are left as they were (the forward's dropout draws nothing a run would see)."""
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        loss = step(to_device(batch, device))["total"]
        return freeze_unreached(module, loss)
