"""The per-chunk chains of the chunked losses (`fused`'s score maps, `vocabulary`'s logits), run
eagerly or, inside `compiled_chains(backend)`, compiled by `torch.compile`.

Eagerly, every step of a chunk's chain (the scale, the mask, two log-softmaxes, the exponentials,
the dot product, the gradient) is its own pass over the chunk's float32 maps (a map of 12 heads is
805 MB at a micro-batch of 1024 x 128 tokens): the chain costs far more in memory traffic than in
FLOPs. Compiled (`trainer.compile`, with the blocks), inductor fuses the chain between the matrix
products into a kernel that reads each map once and writes the gradient once. The functions and
their numbers are the same either way (to float rounding: compiled sums are taken in another order).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch

# The torch.compile backend the chains run under (None: eager); set by `compiled_chains`
_BACKEND: ContextVar[str | None] = ContextVar("kdbench_chain_backend", default=None)


@contextmanager
def compiled_chains(backend: str | None) -> Iterator[None]:
    """Within it, every `chain` runs compiled by `backend` (None: eagerly). Inside code that
    torch.compile traces (a whole compiled step) it sets nothing: the chains are traced with it."""
    if torch.compiler.is_compiling():
        yield
        return
    token = _BACKEND.set(backend)
    try:
        yield
    finally:
        _BACKEND.reset(token)


def chain(fn: Callable) -> Callable:
    """`fn` as it is, or compiled by the backend `compiled_chains` sets: one compiled form per
    backend, with dynamic shapes (chunks and batches vary in size), made at its first call and
    kept in the returned function's `compiled_forms` {backend: compiled `fn`}."""
    compiled: dict[str, Callable] = {}

    @functools.wraps(fn)
    def run(*args):
        if torch.compiler.is_compiling():  # traced into the graph that calls it
            return fn(*args)
        backend = _BACKEND.get()
        if backend is None:
            return fn(*args)
        if backend not in compiled:
            compiled[backend] = torch.compile(fn, dynamic=True, backend=backend)
        return compiled[backend](*args)

    run.compiled_forms = compiled
    return run
