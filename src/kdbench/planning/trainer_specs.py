"""The `trainer` group: the run-wide keys of a recipe (how a run computes, logs, keeps checkpoints
and how the teacher teaches), a spec per setting, each key declared once; the stages' own keys are
`kdbench.planning.stage_specs`'s.

A key's declaration (`kdbench.planning.rules.key`) carries its range, against which
`kdbench.planning.declared` checks it (`TRAINER_KEYS`: every setting's keys), and whether it
changes how a run computes rather than what (`COMPUTATION_ONLY`: a run resumes across a change of
it, and the record's design leaves it out). The recipes read them as attributes:
`plan.trainer.teacher_dropout`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from kdbench.planning.rules import (
    COUNT,
    DEVICE,
    FLAG,
    FRACTION,
    NON_NEGATIVE,
    NON_NEGATIVE_COUNT,
    POSITIVE,
    SEED,
    WORKERS,
    choice,
    integer,
    key,
)


@dataclass(frozen=True, kw_only=True)
class ComputeSpec:
    """The trainer keys of how a run computes, logs and keeps checkpoints: every setting's."""

    device: str = key(DEVICE)
    precision: str = key(
        choice(
            "fp32",
            "bf16",
            "auto",
            meaning="auto: bf16 on a GPU that has it natively for a student >= 768 wide, else fp32",
        )
    )
    tf32: bool = key(FLAG, True)
    eval_batch_size: int = key(COUNT, 128)
    max_length: int = key(integer(4), 128)
    log_every: int = key(COUNT)
    checkpoint_every: int = key(NON_NEGATIVE_COUNT)
    checkpoint_epochs: bool = key(FLAG, True)
    keep_checkpoints: bool = key(FLAG, False)
    # how, not what: a run resumes across a change of these
    progress_bar: bool = key(FLAG, True, how=True)
    compile: bool = key(FLAG, False, how=True)
    fused_losses: bool = key(FLAG, True, how=True)
    recompute_losses: bool = key(FLAG, False, how=True)
    recompute_attention: bool = key(FLAG, False, how=True)
    num_workers: int | str = key(WORKERS, "auto", how=True)  # `kdbench.runtime.device.loading_spec`


@dataclass(frozen=True, kw_only=True)
class TrainerSpec(ComputeSpec):
    """The `trainer` group's keys every setting reads: the recipe's name over the compute keys."""

    name: str


@dataclass(frozen=True, kw_only=True)
class DistillationTrainer(TrainerSpec):
    """The keys of both distillation settings: a teacher (its dropout on or off while it teaches),
    and a student built for it."""

    teacher_seed: int = key(SEED, 42)
    student_dropout: float | None = key(FRACTION.or_null("the model family's"), None)
    teacher_dropout: bool = key(
        FLAG, False, help="the teacher's dropout on while it teaches; its outputs then every step"
    )


@dataclass(frozen=True, kw_only=True)
class TaskSpecificTrainer(DistillationTrainer):
    """setting=task_specific: the teacher's checkpoint, where its outputs are kept, and which of
    the student's checkpoints is scored."""

    teacher_best_checkpoint: bool = key(FLAG, False)  # the teacher's best dev epoch, not its last
    student_best_checkpoint: bool = key(
        FLAG,
        False,
        help="the student scored at its best dev evaluation, every stages.prediction.eval_every "
        "steps, not at its last step",
    )
    cache_teacher_logits: bool = key(FLAG, True)
    cache_teacher_features: bool = key(FLAG, True)
    teacher_features_gib: float = key(NON_NEGATIVE, 4.0)
    teacher_features_store: str = key(
        choice("auto", "disk", "memory", meaning="auto: disk on a CPU, memory on a GPU"),
        "auto",
        how=True,
        help="where the teacher's features table lives: a disk cache entry later runs read, or "
        "the run's memory alone",
    )


@dataclass(frozen=True, kw_only=True)
class TaskAgnosticTrainer(DistillationTrainer):
    """setting=task_agnostic: the held-out sample and the input masking of raw text."""

    # the held-out loss is the run's metric: every evaluation reads at least one batch
    heldout_batches: int = key(COUNT, 1)
    # masking by token frequency ** -smoothing; None: uniform
    mlm_smoothing: float | None = key(POSITIVE.or_null("uniform masking"), None)
    mask_inputs: str = key(
        choice("objective", "always", meaning="always: every objective's input"), "objective"
    )


def kept_on_disk(store: str, device_type: str) -> bool:
    """Whether the teacher's features table is a disk cache entry later runs read (`store`:
    `teacher_features_store`). auto: on a CPU, where the teacher's pass over the training set takes
    longer than reading the entry back; on a GPU the pass takes less than writing, hashing and
    reading the entry (8,000 SST-2 examples through MiniLM-L6 at 3 layers: a 1.48 GB entry)."""
    return store == "disk" or (store == "auto" and device_type == "cpu")


TRAINERS = {
    "task_specific": TaskSpecificTrainer,
    "task_agnostic": TaskAgnosticTrainer,
    "finetune": TrainerSpec,
}
TRAINER_KEYS = {f.name: f for spec in TRAINERS.values() for f in fields(spec)}  # every setting's
# Trainer settings that change how a run computes, not what: a run resumes across them (e.g. an
# out-of-memory run re-run with recomputation on).
COMPUTATION_ONLY = tuple(name for name, f in TRAINER_KEYS.items() if f.metadata.get("how"))
