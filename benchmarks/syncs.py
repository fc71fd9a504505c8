"""Synchronising calls per optimizer step of each recipe, counted as `tests/smoke/test_no_syncs.py`
counts them (host reads and data-dependent shapes, the data pipeline excluded), on tiny runs.

    PYTHONPATH=src:. python benchmarks/syncs.py

Prints, per recipe and stage, the mean over the steps that are not log steps (log_every=3) and
over all steps (log steps read the losses once).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from tests.helpers import agnostic_overrides, tiny_overrides, write_tiny_corpus, write_tiny_glue
from tests.smoke.test_no_syncs import LOG_EVERY, TRAINER, counted_run


def cases(root: Path) -> dict[str, list[str]]:
    glue, corpus = write_tiny_glue(root / "glue"), write_tiny_corpus(root / "corpus")
    specific = ("stages.teacher.epochs=1", *TRAINER)
    agnostic = ("stages.distillation.steps=7", "stages.distillation.eval_every=0", *TRAINER)
    return {
        "task-specific att_kl+val_kl, features cache": tiny_overrides(
            glue, root / "a", "objective=att_kl+val_kl", "trainer.teacher_features_gib=4", *specific
        ),
        "task-specific hid_seq, teacher every step": tiny_overrides(
            glue, root / "b", "objective=hid_seq", "trainer.teacher_features_gib=0", *specific
        ),
        "task-agnostic att_kl+val_kl": agnostic_overrides(
            corpus, root / "c", "objective=att_kl+val_kl", *agnostic
        ),
        "task-agnostic distilbert (MLM)": agnostic_overrides(
            corpus, root / "d", "objective=distilbert", *agnostic
        ),
    }


def main() -> None:
    root = Path(tempfile.mkdtemp())
    for index, (name, overrides) in enumerate(cases(root).items()):
        os.environ["KDBENCH_CACHE"] = str(root / f"cache-{index}")  # the teacher is fine-tuned
        patches = pytest.MonkeyPatch()
        counts = counted_run(overrides, patches)
        patches.undo()
        stages: dict[str, tuple[list[int], list[int]]] = {}
        for stage, step, last, calls in counts:
            between, every = stages.setdefault(stage, ([], []))
            every.append(calls)
            if step % LOG_EVERY and not last:
                between.append(calls)
        for stage, (between, every) in stages.items():
            print(
                f"{name:46s} {stage:8s} steps={len(every):2d} "
                f"between log steps={sum(between) / len(between):5.1f} "
                f"all steps={sum(every) / len(every):5.1f}"
            )


if __name__ == "__main__":
    main()
