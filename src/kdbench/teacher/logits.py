"""The teacher's logits for every training example: the prediction stage's targets, computed once
and cached.

The teacher is deterministic in eval mode, so its prediction-layer targets are computed once per
(fine-tuned teacher, task subset, tokenisation, precision) and cached on disk, then shared by every
epoch, seed and objective of a sweep.
"""

from __future__ import annotations

import torch

from kdbench.data.batches import make_loader
from kdbench.objectives.tensors import LOGITS
from kdbench.teacher.cache import cached_tensors, derived_key
from kdbench.teacher.frozen import FineTuned
from kdbench.training.evaluate import logits_table


def teacher_logits_table(
    teacher: FineTuned, train_set, tokenizer, plan, augmented: str | None = None
) -> torch.Tensor:
    """The teacher's logits for every training example, [N, C] float32 by `example` number;
    `augmented` names the augmented set's cache entry."""

    def build():
        loader = make_loader(
            train_set, tokenizer, plan.trainer.eval_batch_size, shuffle=False, loading=plan.loading
        )
        return logits_table(
            teacher.model, loader, len(train_set), plan.num_labels, plan.device, plan.precision
        )

    key = derived_key(teacher.identity, train_set, tokenizer, plan, augmented)
    return cached_tensors(
        plan.cache_dir / "teacher_logits",
        plan.task.name,
        key,
        build,
        4 * len(train_set) * plan.num_labels,
        "the teacher-logits cache entry",
    )


class LogitsRows:
    """The logits table read as a stage's teacher records: a batch's rows by example number."""

    def __init__(self, table: torch.Tensor):
        self.table = table

    def records(self, batch: dict) -> dict:
        return {LOGITS: self.table[batch["example"]]}
