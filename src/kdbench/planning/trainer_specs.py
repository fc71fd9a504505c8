"""The `trainer` group: a spec per setting over the keys every setting reads, each key declared
once.

A key's declaration (`kdbench.planning.rules.key`) carries its range, against which
`kdbench.planning.declared` checks it (`TRAINER_KEYS`: every setting's keys),
and whether it changes how a run computes rather than what (`COMPUTATION_ONLY`: a run resumes
across a change of it, and the record's design leaves it out). `ComputeSpec` holds how a run
computes; `TrainerSpec` adds the optimiser every setting has; each setting's spec (`TRAINERS`) adds
its own. The recipes read them as attributes: `plan.trainer.stage1_epochs`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from kdbench.planning.rules import (
    COUNT,
    DEVICE,
    DEVICE_BATCH,
    FLAG,
    FRACTION,
    LEARNING_RATE,
    NON_NEGATIVE,
    NON_NEGATIVE_COUNT,
    POSITIVE,
    SEED,
    WORKERS,
    choice,
    entries,
    integer,
    key,
)


@dataclass(frozen=True, kw_only=True)
class ComputeSpec:
    """The trainer keys of how a run computes, logs and keeps checkpoints: every setting's."""

    device: str = key(DEVICE)
    precision: str = key(
        choice("fp32", "bf16", "auto", meaning="auto: bf16 on a GPU that has it natively")
    )
    tf32: bool = key(FLAG, True)
    batch_size: int = key(COUNT)
    eval_batch_size: int = key(COUNT, 128)
    max_length: int = key(integer(4), 128)
    group_by_length: bool = key(FLAG, True)
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
    num_workers: int | str = key(WORKERS, "auto", how=True)  # `kdbench.device.loading_spec`


@dataclass(frozen=True, kw_only=True)
class TrainerSpec(ComputeSpec):
    """The `trainer` group's keys every setting reads: the optimiser over the compute keys."""

    name: str
    lr: float = key(LEARNING_RATE)
    warmup_ratio: float = key(FRACTION)
    # {task: ratio}, read into warmup_ratio by the config
    warmup_ratio_per_task: dict | None = key(FRACTION, None, each=True)
    weight_decay: float = key(NON_NEGATIVE)
    adam_betas: tuple[float, float] = key(entries(FRACTION, 2))
    adam_eps: float = key(POSITIVE)
    max_grad_norm: float | None = key(POSITIVE.or_null("no clipping"))
    eval_every: int = key(NON_NEGATIVE_COUNT, 0)  # steps between evaluations; 0: at the end


@dataclass(frozen=True, kw_only=True)
class DistillationTrainer(TrainerSpec):
    """The keys of both distillation settings: a teacher, and a student built for it."""

    teacher_seed: int = key(SEED, 42)
    student_dropout: float | None = key(FRACTION.or_null("the model family's"), None)


@dataclass(frozen=True, kw_only=True)
class TaskSpecificTrainer(DistillationTrainer):
    """setting=task_specific: the teacher's fine-tuning, then stage 1 and stage 2, by epochs."""

    teacher_epochs: int = key(NON_NEGATIVE_COUNT, 0)
    stage1_epochs: int = key(NON_NEGATIVE_COUNT, 0)
    stage2_epochs: int = key(NON_NEGATIVE_COUNT, 0)
    teacher_lr: float | None = key(LEARNING_RATE.or_null("the task's lr"), None)
    stage2_lr: float | None = key(LEARNING_RATE.or_null("trainer.lr"), None)
    stage1_schedule: str = key(
        choice("linear", "constant", meaning="constant: TinyBERT's stage 1"), "linear"
    )
    teacher_dropout: bool = key(FLAG, False)  # on while it teaches (no caches then)
    teacher_group_by_length: bool = key(FLAG, True)
    teacher_best_checkpoint: bool = key(FLAG, False)  # the teacher's best dev epoch, not its last
    cache_teacher_logits: bool = key(FLAG, True)
    cache_teacher_features: bool = key(FLAG, True)
    teacher_features_gib: float = key(NON_NEGATIVE, 4.0)


@dataclass(frozen=True, kw_only=True)
class TaskAgnosticTrainer(DistillationTrainer):
    """setting=task_agnostic: by steps, on global batches split into device micro-batches."""

    max_steps: int | None = key(COUNT.or_null("epochs, not steps"), None)
    device_batch_size: int | str | None = key(
        DEVICE_BATCH, None
    )  # `kdbench.measure.memory.device_batch`
    heldout_batches: int = key(NON_NEGATIVE_COUNT, 0)
    # masking by token frequency ** -smoothing; None: uniform
    mlm_smoothing: float | None = key(POSITIVE.or_null("uniform masking"), None)
    mask_inputs: str = key(
        choice("objective", "always", meaning="always: every objective's input"), "objective"
    )


@dataclass(frozen=True, kw_only=True)
class FinetuneTrainer(TrainerSpec):
    """setting=finetune: a distilled student fine-tuned on a task, by epochs."""

    finetune_epochs: int = key(NON_NEGATIVE_COUNT)


TRAINERS = {
    "task_specific": TaskSpecificTrainer,
    "task_agnostic": TaskAgnosticTrainer,
    "finetune": FinetuneTrainer,
}
TRAINER_KEYS = {f.name: f for spec in TRAINERS.values() for f in fields(spec)}  # every setting's
# Trainer settings that change how a run computes, not what: a run resumes across them (e.g. an
# out-of-memory run re-run with recomputation on).
COMPUTATION_ONLY = tuple(name for name, f in TRAINER_KEYS.items() if f.metadata.get("how"))
