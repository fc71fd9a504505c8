"""Casts and kernel-level ops per bf16 task-agnostic step, counted at the dispatcher on the CPU
(`kdbench.measure.timing.OpCounts`; a GPU launches a kernel for each): `python
benchmarks/step_ops.py [OBJECTIVE ...]` prints one JSON line per objective, at the tests' small
shapes (a 2x64 student, a 4x64 teacher, 4 sequences of 32 tokens), dropout on as a run has it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.helpers import small_shapes  # noqa: E402

from kdbench.measure import synthetic  # noqa: E402
from kdbench.measure.timing import OpCounts  # noqa: E402
from kdbench.training.steps import to_device  # noqa: E402

CPU = torch.device("cpu")


def step_ops(objective: str) -> dict:
    """The second step's counts (the first builds what steps reuse)."""
    with synthetic.distillation(objective, small_shapes(), CPU, "bf16", steps=2) as stage:
        batches = iter(stage.loader)
        stage.step(to_device(next(batches), CPU))["total"].backward()
        batch = to_device(next(batches), CPU)  # collated outside the count
        with OpCounts() as ops:
            stage.step(batch)["total"].backward()
    return {"objective": objective, **ops.counts}


if __name__ == "__main__":
    for name in sys.argv[1:] or ["att_kl+val_kl", "hid_seq", "vanilla_kd"]:
        print(json.dumps(step_ops(name)))
