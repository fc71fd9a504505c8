"""The `crd` loss's negatives: ids of training examples of other classes, drawn from its module's
CPU sampler.

Each row's K negatives are drawn uniformly with replacement, or as K distinct examples (a uniformly
random K-subset, by Floyd's algorithm) from the same K uniforms per row: either way a step takes
[B, K] uniforms from the sampler, so its state advances alike. Both draws are opaque operators: a
compiled step calls them at run time, so they draw from the sampler exactly as the eager step does.
"""

from __future__ import annotations

import itertools
import weakref

import torch
from torch import Tensor, nn

__all__ = ["positions", "register"]


# The live modules by key: `_uniform` reads a module's sampler without taking the generator as an
# argument, which `torch.compile` cannot trace.
_LIVE: weakref.WeakValueDictionary[int, nn.Module] = weakref.WeakValueDictionary()
_KEYS = itertools.count()


def register(module: nn.Module) -> int:
    """A key under which `_uniform` finds `module.sampler` (a CPU `torch.Generator`)."""
    key = next(_KEYS)
    _LIVE[key] = module
    return key


@torch.library.custom_op("kdbench::crd_uniform", mutates_args=())
def _uniform(key: int, rows: int, cols: int, device: torch.device) -> Tensor:
    """[rows, cols] float64 uniforms in [0, 1) from the sampler of the module `key`, on `device`.

    Drawn on the CPU whatever `device` (the sampler is a CPU generator), so a seed gives the same
    negatives on every device; a GPU gets them from pinned memory, a copy the host does not wait
    for."""
    sampler = _LIVE[key].sampler
    pinned = device.type == "cuda"
    drawn = torch.rand(rows, cols, generator=sampler, dtype=torch.float64, pin_memory=pinned)
    return drawn.to(device, non_blocking=True)


@_uniform.register_fake
def _(key: int, rows: int, cols: int, device: torch.device) -> Tensor:
    return torch.empty(rows, cols, device=device, dtype=torch.float64)


@torch.library.custom_op("kdbench::crd_distinct", mutates_args=())
def _distinct(uniforms: Tensor, available: Tensor) -> Tensor:
    """[B, K] positions, distinct within a row, in [0, available[b]) from [B, K] uniforms: Floyd's
    algorithm, a uniformly random K-subset of each row's range (K <= available[b]).

    The i-th draw takes t uniform in [0, n - K + i]; it keeps t unless the row holds it already,
    then the top n - K + i, which no earlier draw can hold."""
    count = uniforms.shape[1]
    chosen = torch.empty(uniforms.shape, dtype=torch.long, device=uniforms.device)
    for i in range(count):
        top = available - count + i
        drawn = torch.minimum((uniforms[:, i] * (top + 1)).long(), top)
        held = (chosen[:, :i] == drawn[:, None]).any(dim=1)
        chosen[:, i] = torch.where(held, top, drawn)
    return chosen


@_distinct.register_fake
def _(uniforms: Tensor, available: Tensor) -> Tensor:
    return torch.empty(uniforms.shape, dtype=torch.long, device=uniforms.device)


def positions(key: int, available: Tensor, count: int, distinct: bool) -> Tensor:
    """[B, count] positions in [0, available[b]) (`available` long [B]) from the sampler of the
    module `key`: uniform with replacement, or distinct within each row."""
    uniforms = _uniform(key, len(available), count, available.device)
    if distinct:
        return _distinct(uniforms, available)
    return torch.minimum((uniforms * available[:, None]).long(), available[:, None] - 1)
