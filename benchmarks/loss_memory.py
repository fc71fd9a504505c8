"""Peak memory and time of vanilla_kd's two vocabulary losses (mlm_kd + mlm, forward and backward)
on bf16 logits [M, 30522], by their autograd definition or as kdbench computes them (a chunk of rows
at a time; `compiled`: each chunk's chain compiled by inductor, as `trainer.compile` runs it, after
one call on 64 rows that compiles it). One process per form: the peak is the process's resident-set
peak over its inputs.

    python benchmarks/loss_memory.py {autograd,chunked,compiled} [M]
"""

from __future__ import annotations

import resource
import sys
import time

import torch
import torch.nn.functional as TF

from kdbench.objectives import losses
from kdbench.objectives.chains import compiled_chains

VOCAB = 30522


def autograd_losses(student, teacher, labels):
    """mlm_kd (temperature 1) and mlm as `losses` defines them, through autograd."""
    soft = -(TF.softmax(teacher.float(), -1) * TF.log_softmax(student.float(), -1)).sum(-1).mean()
    return soft + TF.cross_entropy(student.float(), labels)


def chunked_losses(student, teacher, labels):
    return losses.mlm_kd(student, teacher, temperature=1.0) + losses.mlm(student, None, labels)


def compiled_losses(student, teacher, labels):
    with compiled_chains("inductor"):
        return chunked_losses(student, teacher, labels)


FORMS = {"autograd": autograd_losses, "chunked": chunked_losses, "compiled": compiled_losses}


def logits(rows: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """bf16 student logits [rows, VOCAB] (requiring a gradient), the teacher's, and labels."""
    generator = torch.Generator().manual_seed(0)
    student = torch.randn(rows, VOCAB, generator=generator, dtype=torch.bfloat16).mul_(3)
    teacher = torch.randn(rows, VOCAB, generator=generator, dtype=torch.bfloat16).mul_(3)
    labels = torch.randint(0, VOCAB, (rows,), generator=generator)
    return student.requires_grad_(), teacher, labels


def main(form: str, rows: int) -> None:
    torch.set_num_threads(1)
    loss_fn = FORMS[form]
    if form == "compiled":
        loss_fn(*logits(64)).backward()
    student, teacher, labels = logits(rows)
    inputs_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    seconds = []
    for _ in range(3):
        student.grad = None
        start = time.perf_counter()
        loss_fn(student, teacher, labels).backward()
        seconds.append(time.perf_counter() - start)
    peak_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - inputs_peak) / 2**10
    best = min(seconds)
    print(f"{form} [{rows}, {VOCAB}] bf16: {best:.2f} s best of 3, peak +{peak_mib:.0f} MiB")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2048)
