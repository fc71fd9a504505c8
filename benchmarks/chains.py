"""Time of the chunked losses eager and with their chains compiled by inductor (as
`trainer.compile` runs them), forward and backward, on this machine, best of 5 after a call that
compiles: the score-map KL of att_kl (12 heads of [B, 128, 768] float32 projections, a few padded
examples) and vanilla_kd's mlm_kd + mlm on bf16 logits [M, 30522].

    python benchmarks/chains.py [B] [M]
"""

from __future__ import annotations

import sys
import time

import torch
from loss_memory import chunked_losses, logits  # this folder's: run as a script

from kdbench.objectives.chains import compiled_chains
from kdbench.objectives.fused import score_map_loss

HEADS, LENGTH, WIDTH = 12, 128, 768


def projections(batch: int) -> tuple[tuple, tuple, torch.Tensor]:
    """The student's (Q, K) [batch, LENGTH, WIDTH] (requiring gradients), the teacher's, and a
    mask whose examples are 40 to 128 tokens long."""
    g = torch.Generator().manual_seed(0)
    student = tuple(torch.randn(batch, LENGTH, WIDTH, generator=g).requires_grad_() for _ in "qk")
    teacher = tuple(torch.randn(batch, LENGTH, WIDTH, generator=g) for _ in "qk")
    lengths = 40 + torch.arange(batch) * 11 % (LENGTH - 40)
    return student, teacher, (torch.arange(LENGTH)[None] < lengths[:, None]).long()


def best_ms(loss, backend: str | None) -> float:
    """The fastest of 5 forward and backward passes of `loss()`, after one that compiles."""
    seconds = []
    for _ in range(6):
        start = time.perf_counter()
        with compiled_chains(backend):
            value = loss()
        value.backward()
        seconds.append(time.perf_counter() - start)
    return 1000 * min(seconds[1:])


def main(batch: int = 16, rows: int = 2048) -> None:
    student, teacher, mask = projections(batch)
    vocabulary = logits(rows)
    losses = {
        f"att_kl [{batch}, {HEADS}, {LENGTH}, {LENGTH}] fp32": lambda: score_map_loss(
            "kl", student, teacher, HEADS, mask
        ),
        f"mlm_kd + mlm [{rows}, 30522] bf16": lambda: chunked_losses(*vocabulary),
    }
    for name, loss in losses.items():
        eager, compiled = best_ms(loss, None), best_ms(loss, "inductor")
        print(f"{name}: eager {eager:.1f} ms, compiled {compiled:.1f} ms ({eager / compiled:.2f}x)")


if __name__ == "__main__":
    main(*(int(arg) for arg in sys.argv[1:3]))
