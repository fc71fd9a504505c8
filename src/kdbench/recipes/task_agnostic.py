"""The task-agnostic recipe (the paper's Section 5): distil a pre-trained teacher on raw text, by steps.

1. corpus: local text or Hugging Face datasets, tokenised with the teacher's tokenizer once, packed into
   sequences of `corpus.seq_len` and cached on disk (memory-mapped);
2. teacher: the pre-trained model (no fine-tuning), frozen; student: random or from teacher layers;
3. `trainer.max_steps` optimizer steps on global batches of `trainer.batch_size` sequences, split over the
   torchrun processes and gradient-accumulation micro-batches; objectives on the last layer;
4. the held-out loss of every term every `trainer.eval_every` steps and at the end (the record's metrics);
5. the student saved with `save_pretrained` for GLUE fine-tuning (`setting=finetune`).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from kdbench import distributed
from kdbench.data.batches import CorpusCollator, KeyedCorpus, ShardedBatches
from kdbench.data.corpus import build_packed_corpus
from kdbench.data.masking import MaskingSpec, smoothed_token_weights
from kdbench.data.sources import corpus_files
from kdbench.errors import ConfigError, DataError
from kdbench.models.anatomy import mlm_head
from kdbench.models.compilation import compile_if_asked
from kdbench.models.pretrained import pretrained_teacher, teacher_tokenizer
from kdbench.models.student import save_student, student_for
from kdbench.objectives.features import FeatureRecorder
from kdbench.objectives.terms import Objective
from kdbench.record import StepLog
from kdbench.specs import OptimizerSpec
from kdbench.teacher import freeze, in_run_precision
from kdbench.training import loop
from kdbench.training.checkpoint import Checkpoints, resumable_state
from kdbench.training.evaluate import heldout_losses
from kdbench.training.hooks import standard_hooks
from kdbench.training.reach import freeze_unreached_by_step
from kdbench.training.steps import StudentSide, distillation_step, teacher_records_now

if TYPE_CHECKING:  # the plan's module needs omegaconf, which the synthetic runs (kdbench.synthetic) go without
    from kdbench.plan import Plan


def run_task_agnostic(plan: Plan, run_dir: Path, log: StepLog) -> dict:
    trainer, batches, device = plan.trainer, plan.batches, plan.device
    world = distributed.init(device)
    tokenizer = teacher_tokenizer(plan.teacher, plan.cache_dir)
    path, fmt = corpus_files(plan.corpus, plan.cache_dir)
    corpus = build_packed_corpus(path, fmt, tokenizer, plan.corpus.seq_len, plan.cache_dir,
                                 heldout_fraction=plan.corpus.heldout_fraction, max_docs=plan.corpus.max_docs)
    teacher = freeze(pretrained_teacher(plan.teacher, 2, trainer.teacher_seed, mlm=True)).to(device)
    student = student_for(plan, teacher, mlm=True)
    compile_if_asked(plan.trainer, student, teacher)
    in_run_precision(teacher, plan.precision)
    objective = Objective(plan.terms, plan.student_conf, plan.teacher_conf, None, plan.seed,
                          recompute=trainer.recompute_losses, fused=trainer.fused_losses).to(device)
    masking = input_masking(objective, trainer, tokenizer, corpus.train.array)
    train_loader = corpus_loader(corpus.train, batches.global_batch, plan, world, masking, plan.seed, shuffle=True)
    if len(train_loader) == 0:
        raise DataError(f"the corpus has {len(corpus.train)} training sequences, fewer than one global batch of "
                        f"trainer.batch_size={trainer.batch_size}: add text or lower the batch size")
    # Held-out batches in corpus order, dealt round-robin to the processes: the same set however many there are.
    heldout_loader = corpus_loader(corpus.heldout, batches.per_process * world.size, plan, world, masking, 0,
                                   shuffle=False)
    heldout_per_process = max(1, trainer.heldout_batches // world.size)
    checkpoints = Checkpoints(run_dir / "checkpoints", meta={"fingerprint": plan.fingerprint}) if world.is_main else None
    latest = resume_state(run_dir, plan)
    with (
        recorder(student, objective, "student", plan.student_conf.num_hidden_layers) as (student_recorder, student_logits),
        recorder(teacher, objective, "teacher", plan.teacher_conf.num_hidden_layers) as (teacher_recorder, teacher_logits),
    ):
        teacher_records = teacher_records_now(teacher_recorder, teacher_logits, device, plan.precision)
        # Only objectives that read the MLM logits (vanilla_kd, distilbert) run the student's whole
        # model; the others stop at their last layer: what they leave without a gradient is frozen.
        student_side = StudentSide(student_recorder, objective, student_logits)
        probe = distillation_step(student_side, teacher_records, device, plan.precision)
        freeze_unreached_by_step(student_side, probe, first_batch(train_loader), device)
        student_side = distributed.wrap(student_side, world, device)
        step = distillation_step(student_side, teacher_records, device, plan.precision)

        def evaluate_heldout(at_step: int) -> dict:
            values = heldout_losses(step, heldout_loader, heldout_per_process, [student, objective], world, device)
            log.log("heldout", at_step, values)
            return values

        def periodic_heldout(at_step: int) -> None:
            if trainer.eval_every and at_step % trainer.eval_every == 0:
                evaluate_heldout(at_step)

        initial = evaluate_heldout(0)
        stage = loop.Stage("distill", [student, objective], train_loader, step, OptimizerSpec.of(trainer, trainer.lr),
                           device, max_steps=trainer.max_steps, accumulation=batches.accumulation,
                           sync_modules=[student_side] if world.distributed else [])
        stats = loop.train(stage, standard_hooks(trainer, log, checkpoints, after_step=periodic_heldout), latest)
        start = time.perf_counter()
        final = heldout_losses(step, heldout_loader, heldout_per_process, [student, objective], world, device)
    timing = {"distill_s": stats["seconds"], "distill_examples_per_s": stats["examples_per_s"] * world.size,
              "eval_s": time.perf_counter() - start}
    student_dir = run_dir / "student"
    if world.is_main:
        projections = {k: v.cpu() for k, v in objective.projections.state_dict().items()}
        save_student(student, tokenizer, student_dir, plan.chain,
                     projections=projections)
        if not trainer.keep_checkpoints:
            checkpoints.clear()
    return {"metrics": final, "teacher_metrics": {}, "timing": timing, "initial_heldout": initial,
            "student_path": str(student_dir), "corpus": corpus.meta, "world_size": world.size,
            "batch": {"global": batches.global_batch, "per_device": batches.per_process,
                      "accumulation": batches.accumulation}}


def input_masking(objective: Objective, trainer, tokenizer, train_rows) -> MaskingSpec | None:
    """The inputs' MLM masking: for objectives that read MLM logits, or for every objective with
    trainer.mask_inputs=always (the study's released code masks the corpus for all objectives);
    positions drawn uniformly, or by token frequency smoothed by trainer.mlm_smoothing over
    `train_rows` (DistilBERT's)."""
    if not (objective.uses_logits or trainer.mask_inputs == "always"):
        return None
    weights = None
    if trainer.mlm_smoothing is not None:
        weights = smoothed_token_weights(train_rows, len(tokenizer), trainer.mlm_smoothing)
    return MaskingSpec.from_tokenizer(tokenizer, weights)


def corpus_loader(sequences, global_batch: int, plan: Plan, world, masking, seed: int, *, shuffle: bool):
    """This process's micro-batches of seeded global batches; masked per (seed, epoch, example) with
    `masking`, in the loader's workers (the same batches with any number of them)."""
    sampler = ShardedBatches(len(sequences), global_batch, plan.batches.per_process, world, seed, shuffle=shuffle)
    return torch.utils.data.DataLoader(KeyedCorpus(sequences), batch_sampler=sampler,
                                       collate_fn=CorpusCollator(masking, seed),
                                       generator=torch.Generator().manual_seed(seed),
                                       **plan.loading.options())


def first_batch(loader) -> dict:
    """The loader's first batch, collated in this process (no worker started, no sampler moved)."""
    keys = next(iter(loader.batch_sampler))
    return loader.collate_fn([loader.dataset[key] for key in keys])


@contextmanager
def recorder(model, objective: Objective, side: str, last_layer: int):
    """The side's feature recorder, stopping after its last needed layer, and how its logits are read: the MLM
    head at the masked positions only ([M, V]: the full [B, L, V] is never materialised), or at
    every attended token when a term reads soft targets there (`Objective.logit_positions`)."""
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


def resume_state(run_dir: Path, plan: Plan) -> dict | None:
    state = resumable_state(Checkpoints(run_dir / "checkpoints"), plan.fingerprint)
    if state is not None and state["done"]:
        raise ConfigError(f"{run_dir} already holds a finished distillation: give a new run directory")
    return state
