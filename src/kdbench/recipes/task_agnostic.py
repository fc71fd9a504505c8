"""The task-agnostic recipe (the paper's Section 5): distil a pre-trained teacher on raw text, by
steps.

1. corpus: local text or Hugging Face datasets, tokenised with the teacher's tokenizer once, packed
   into sequences of `corpus.seq_len` and cached on disk (memory-mapped);
2. teacher: the pre-trained model (no fine-tuning), frozen, its dropout on with
   `trainer.teacher_dropout` (its outputs are computed at every step in any case); student: random
   or from teacher layers;
3. `stages.distillation.steps` optimizer steps on global batches of its `batch_size` sequences,
   split over the torchrun processes and gradient-accumulation micro-batches; objectives on the
   last layer;
4. the held-out loss of every term every `stages.distillation.eval_every` steps and at the end (the
   record's metrics), without dropout in either model;
5. the student saved with `save_pretrained` for GLUE fine-tuning (`setting=finetune`).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from kdbench.data.batches import corpus_loader, heldout_loader
from kdbench.data.corpus import build_packed_corpus
from kdbench.data.masking import MaskingSpec, masked_shares, masks_inputs, smoothed_token_weights
from kdbench.data.sources import corpus_files
from kdbench.errors import ConfigError, DataError
from kdbench.models.anatomy import mlm_head
from kdbench.models.compilation import compile_backend, compile_if_asked
from kdbench.models.pretrained import pretrained_teacher, teacher_tokenizer
from kdbench.models.student import save_student
from kdbench.objectives.features import FeatureRecorder
from kdbench.objectives.terms import Objective
from kdbench.records.card import agnostic_card
from kdbench.records.steplog import StepLog
from kdbench.runtime import distributed
from kdbench.runtime.distributed import World
from kdbench.teacher.frozen import freeze, in_run_precision
from kdbench.training.checkpoint import Checkpoints
from kdbench.training.evaluate import heldout_losses
from kdbench.training.hooks import standard_hooks, stopped_together
from kdbench.training.loop import train_stage
from kdbench.training.reach import freeze_unreached_by_step
from kdbench.training.resume import Resume
from kdbench.training.steps import StepFn, StudentSide, distillation_step, teacher_records_now

# the plan's module needs omegaconf, which the synthetic runs (kdbench.measure.synthetic) go without
if TYPE_CHECKING:
    from kdbench.planning.plan import Plan


STAGE = "distillation"
# An MLM model reads no labels: its config keeps transformers' default count of two.
MLM_NUM_LABELS = 2


def run_task_agnostic(plan: Plan, run_dir: Path, log: StepLog) -> dict:
    trainer, device, spec = plan.trainer, plan.device, plan.stages[STAGE]
    world = distributed.init(device)
    with stopped_together(device):  # the processes' stops agree before DDP's first broadcast
        tokenizer = teacher_tokenizer(plan.teacher, plan.cache_dir)
        corpus = packed_corpus(plan, tokenizer)
        teacher, student, objective = distillation_models(plan)
        masking = input_masking(objective, trainer, tokenizer, corpus.train.array)
        train_loader, heldout_loader = corpus_loaders(corpus, plan, world, masking)
    checkpoints = Checkpoints(run_dir / "checkpoints", meta={"fingerprint": plan.fingerprint})
    resume = unfinished(run_dir, checkpoints, log, plan.fingerprint)
    layers = (plan.student_conf.num_hidden_layers, plan.teacher_conf.num_hidden_layers)
    with (
        recorder(student, objective, "student", layers[0]) as (student_recorder, student_logits),
        recorder(teacher, objective, "teacher", layers[1]) as (teacher_recorder, teacher_logits),
    ):
        teacher_records = teacher_records_now(
            teacher_recorder, teacher_logits, device, plan.precision
        )
        student_side = StudentSide(student_recorder, objective, student_logits)
        replica, step = reaching_step(
            student_side, teacher_records, train_loader, world, device, plan.precision
        )
        modules = [student, objective]
        measured = modules + ([teacher] if trainer.teacher_dropout else [])  # without dropout
        # the student side itself, not its replica: no collective operation between two batches
        unsynced = distillation_step(student_side, teacher_records, device, plan.precision)
        heldout = HeldoutLosses(unsynced, heldout_loader, measured, world, device, log)
        initial = heldout.logged(0)
        after_step = partial(heldout.periodic, spec.eval_every)
        hooks = standard_hooks(trainer, log, checkpoints if world.is_main else None, after_step)
        sync = [replica] if world.distributed else []  # all-reduced on a step's last micro-batch
        layout = {
            "accumulation": plan.batches.accumulation,
            "sync_modules": sync,
            "weigh": masked_shares(world, device, plan.batches.accumulation),
        }
        resumed = resume.at(STAGE)
        stats = train_stage(spec, modules, train_loader, step, device, hooks, resumed, **layout)
        start = time.perf_counter()
        final = heldout.measure()
    eval_s = time.perf_counter() - start
    outcome = distilled_result(plan, run_dir, corpus, world, stats, eval_s, initial, final)
    if world.is_main:
        save_distilled(plan, run_dir, student, objective, tokenizer, checkpoints, outcome)
    return outcome


def distilled_result(
    plan: Plan, run_dir: Path, corpus, world: World, stats: dict, eval_s: float, initial, final
) -> dict:
    """The run's record fields: the held-out losses at the start and at the end (the metrics), the
    time of distilling and of the final evaluation, the corpus and the batch layout."""
    batches = plan.batches
    return {
        "metrics": final,
        "teacher_metrics": {},
        "timing": {
            f"{STAGE}_s": stats["seconds"],
            **rate_of(stats, world),
            "eval_s": eval_s,
        },
        "initial_heldout": initial,
        "student_path": str(run_dir / "student"),
        "corpus": corpus.meta,
        "world_size": world.size,
        "batch": {
            "global": batches.global_batch,
            "per_device": batches.per_process,
            "accumulation": batches.accumulation,
        },
    }


def rate_of(stats: dict, world: World) -> dict:
    """The distillation's examples per second over the processes, where this run took steps (none
    when it resumed after the last)."""
    rate = stats["examples_per_s"] * world.size
    return {f"{STAGE}_examples_per_s": rate} if rate else {}


def unfinished(run_dir: Path, checkpoints: Checkpoints, log: StepLog, fingerprint: str) -> Resume:
    """Where the distillation resumes: mid-way, or after its last step when its student is not yet
    saved (the held-out losses at the end and the save then follow); refuses a finished one (its
    student saved: `save_student` writes the folder whole or not at all)."""
    resume = Resume.of(checkpoints, (STAGE,), log, fingerprint)
    if resume.finished(STAGE) and (run_dir / "student").is_dir():
        raise ConfigError(
            f"{run_dir} already holds a finished distillation: give a new run directory"
        )
    return resume


def distillation_models(plan: Plan):
    """The frozen pre-trained teacher (its weights in the run's precision; in train mode with
    `trainer.teacher_dropout`, still without gradients), the student and the objective, on the
    plan's device."""
    trainer = plan.trainer
    teacher = pretrained_teacher(plan.teacher, MLM_NUM_LABELS, trainer.teacher_seed, mlm=True)
    teacher = freeze(teacher).to(plan.device)
    if trainer.teacher_dropout:
        teacher.train()  # dropout on while it teaches (TinyBERT's general_distill.py)
    student = plan.build_student(teacher, mlm=True)
    compile_if_asked(plan.trainer, student, teacher)
    in_run_precision(teacher, plan.precision)
    objective = Objective(
        plan.terms,
        plan.student_conf,
        plan.teacher_conf,
        None,
        plan.seed,
        recompute=trainer.recompute_losses,
        fused=trainer.fused_losses,
        compile_backend=compile_backend(trainer),
        padding=plan.stages[STAGE].padding,
    )
    return teacher, student, objective.to(plan.device)


def packed_corpus(plan: Plan, tokenizer):
    """The corpus tokenised with the teacher's tokenizer, packed and split (cached on disk)."""
    path, fmt = corpus_files(plan.corpus, plan.cache_dir)
    return build_packed_corpus(
        path,
        fmt,
        tokenizer,
        plan.corpus.seq_len,
        plan.cache_dir,
        heldout_fraction=plan.corpus.heldout_fraction,
        max_docs=plan.corpus.max_docs,
    )


def corpus_loaders(corpus, plan: Plan, world, masking: MaskingSpec | None):
    """This process's training loader (shuffled global batches) and held-out loader (the first
    `trainer.heldout_batches` held-out batches in corpus order, dealt round-robin to the
    processes: the same set however many there are)."""
    batches = plan.batches
    loading = plan.loading
    train = corpus_loader(
        corpus.train, batches.per_process, batches.global_batch, loading, world, masking, plan.seed
    )
    if len(train) == 0:
        raise DataError(
            f"the corpus has {len(corpus.train)} training sequences, fewer than one "
            f"global batch of stages.distillation.batch_size={plan.stages[STAGE].batch_size}: add "
            "text or lower the batch size"
        )
    heldout = heldout_loader(
        corpus.heldout, batches.heldout_batch, plan.trainer.heldout_batches, loading, world, masking
    )
    return train, heldout


def reaching_step(
    student_side: StudentSide,
    teacher_records,
    loader,
    world: World,
    device: torch.device,
    precision: str,
):
    """The student side ready to train and its distillation step: the parameters its loss does not
    reach on the loader's first batch frozen, then wrapped for data parallelism. Only objectives
    that read the MLM logits (vanilla_kd, distilbert) run the student's whole model; the others
    stop at their last layer, and what they leave without a gradient is frozen."""
    probe = distillation_step(student_side, teacher_records, device, precision)
    freeze_unreached_by_step(student_side, probe, first_batch(loader), device)
    student_side = distributed.wrap(student_side, world, device)
    return student_side, distillation_step(student_side, teacher_records, device, precision)


@dataclass
class HeldoutLosses:
    """The held-out loss of every term with `step`, over the held-out sample (`loader`: this
    process's share of it), logged as stage `heldout` when asked."""

    step: StepFn
    loader: torch.utils.data.DataLoader
    modules: list
    world: World
    device: torch.device
    log: StepLog

    def measure(self) -> dict:
        return heldout_losses(self.step, self.loader, self.modules, self.world, self.device)

    def logged(self, at_step: int) -> dict:
        values = self.measure()
        self.log.log("heldout", at_step, values)
        return values

    def periodic(self, every: int, at_step: int) -> None:
        """Logged every `every` steps (0: never)."""
        if every and at_step % every == 0:
            self.logged(at_step)


def save_distilled(
    plan: Plan,
    run_dir: Path,
    student,
    objective: Objective,
    tokenizer,
    checkpoints: Checkpoints,
    outcome: dict,
) -> None:
    """The student in `run_dir`/student with the objective's learnt projections and its model card
    (`outcome`: the run's record fields), for GLUE fine-tuning; the checkpoints cleared unless
    `trainer.keep_checkpoints`."""
    projections = {k: v.cpu() for k, v in objective.projections.state_dict().items()}
    card = agnostic_card(plan, outcome)
    save_student(
        student, tokenizer, run_dir / "student", plan.chain, card=card, projections=projections
    )
    if not plan.trainer.keep_checkpoints:
        checkpoints.clear()


def input_masking(objective: Objective, trainer, tokenizer, train_rows) -> MaskingSpec | None:
    """The inputs' MLM masking: for objectives that read MLM logits, or for every objective with
    trainer.mask_inputs=always (the study's released code masks the corpus for all objectives);
    positions drawn uniformly, or by token frequency smoothed by trainer.mlm_smoothing over
    `train_rows` (DistilBERT's)."""
    if not masks_inputs(objective.terms, trainer.mask_inputs):
        return None
    weights = None
    if trainer.mlm_smoothing is not None:
        weights = smoothed_token_weights(train_rows, len(tokenizer), trainer.mlm_smoothing)
    return MaskingSpec.from_tokenizer(tokenizer, weights)


def first_batch(loader) -> dict:
    """The loader's first batch, collated in this process (no worker started, no sampler moved)."""
    keys = next(iter(loader.batch_sampler))
    return loader.collate_fn([loader.dataset[key] for key in keys])


@contextmanager
def recorder(model, objective: Objective, side: str, last_layer: int):
    """The side's feature recorder, stopping after its last needed layer, and how its logits are
    read: the MLM head at the masked positions only ([M, V]: the full [B, L, V] is never
    materialised), or at every attended token when a term reads soft targets there
    (`Objective.logit_positions`)."""
    needs = objective.needs(side)
    logits = None
    if objective.uses_logits:
        needs.setdefault(last_layer, set()).add("hidden")
        head = mlm_head(model)
        attended = objective.logit_positions == "attended"
        where = "attended_positions" if attended else "mlm_positions"

        def logits(records, output, batch):
            hidden = records[last_layer]["hidden"].flatten(0, 1)
            return head(hidden.index_select(0, batch[where]))

    with FeatureRecorder(model, needs, stop_after=max(needs)) as features:
        yield features, logits
