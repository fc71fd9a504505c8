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

import logging
import time
from pathlib import Path

import torch
from omegaconf import DictConfig
from torch import nn
from transformers import set_seed

from kdbench import distributed, loop, models
from kdbench.checkpoint import Checkpoints
from kdbench.corpus import MaskingSpec, build_packed_corpus, mask_tokens
from kdbench.data import SeededBatches
from kdbench.distill import detached, resumable_state
from kdbench.errors import ConfigError
from kdbench.initialization import init_from_teacher
from kdbench.objectives.features import FeatureRecorder
from kdbench.objectives.objective import LOGITS, Objective, computation
from kdbench.plan import Plan
from kdbench.record import StepLog
from kdbench.teacher import freeze

logger = logging.getLogger("kdbench")


# ------------------------------------------------------------------------------------------------ batching


def batch_layout(global_batch: int, world_size: int, device_batch: int) -> tuple[int, int]:
    """(micro-batch size per process, gradient-accumulation steps) giving exactly `global_batch` per step."""
    per_process, remainder = divmod(global_batch, world_size)
    if remainder:
        raise ConfigError(f"trainer.batch_size={global_batch} is not divisible by {world_size} processes")
    micro = min(device_batch, per_process)
    if per_process % micro:
        raise ConfigError(
            f"trainer.batch_size={global_batch} over {world_size} process(es) is {per_process} per process, not a "
            f"multiple of trainer.device_batch_size={device_batch}: choose sizes that divide"
        )
    return micro, per_process // micro


class ShardedBatches(torch.utils.data.Sampler):
    """This process's micro-batches of seeded global batches, as (epoch, example) keys.

    Global batch g is cut into `world_size * accumulation` micro-batches; process r takes micro-batches
    r, r + world_size, ...: one process with accumulation a sees the same micro-batches, in the same order of
    steps, as a processes with accumulation 1 (so their updates agree). The epoch travels with each key, so an
    example's mask depends only on (seed, epoch, example), never on how the batch was split.
    """

    def __init__(self, num_examples: int, global_batch: int, micro: int, world: distributed.World, seed: int,
                 shuffle: bool = True):
        self.global_batches = SeededBatches(torch.zeros(num_examples), global_batch, shuffle=shuffle, seed=seed)
        self.micro, self.world = micro, world
        self.accumulation = global_batch // world.size // micro

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:  # start_batch counts this process's micro-batches
        self.global_batches.set_epoch(epoch, start_batch // self.accumulation)
        self.skip = start_batch % self.accumulation

    def __iter__(self):
        epoch, skip = self.global_batches.epoch, getattr(self, "skip", 0)
        for batch in self.global_batches:
            if len(batch) < self.global_batches.batch_size:
                return  # an epoch's incomplete last global batch is dropped (a step is always the full batch)
            for j in range(self.accumulation):
                if skip:
                    skip -= 1
                    continue
                start = (j * self.world.size + self.world.rank) * self.micro
                yield [(epoch, index) for index in batch[start:start + self.micro]]

    def __len__(self) -> int:
        return len(self.global_batches) * self.accumulation


class KeyedCorpus(torch.utils.data.Dataset):
    """Packed sequences looked up by (epoch, example) keys, carrying the keys to the collator."""

    def __init__(self, sequences):
        self.sequences = sequences

    def __len__(self) -> int:
        return len(self.sequences)

    def __getitem__(self, key):
        epoch, index = key
        return {**self.sequences[index], "epoch": epoch, "example": index}


class Collator:
    """Stacks packed sequences; with MLM objectives, masks each one with its own (seed, epoch, example) RNG."""

    def __init__(self, masking: MaskingSpec | None, seed: int, mlm_probability: float = 0.15):
        self.masking, self.seed, self.mlm_probability = masking, seed, mlm_probability

    def __call__(self, examples):
        batch = {k: torch.stack([e[k] for e in examples]) for k in ("input_ids", "attention_mask")}
        if self.masking is None:
            return batch
        masked, labels = [], []
        for example in examples:
            key = ((self.seed * 1_000_003 + example["epoch"]) * 4_294_967_311 + example["example"]) % 2**63
            generator = torch.Generator().manual_seed(key)
            ids, lab = mask_tokens(example["input_ids"][None], self.masking, mlm_probability=self.mlm_probability,
                                   generator=generator, attention_mask=example["attention_mask"][None])
            masked.append(ids[0])
            labels.append(lab[0])
        return batch | {"input_ids": torch.stack(masked), "labels": torch.stack(labels)}


# ------------------------------------------------------------------------------------------------ the step


def mlm_records(records: dict, model: nn.Module, last_layer: int, positions: torch.Tensor) -> dict:
    """Add the MLM logits at the masked positions only ([M, V]: the full [B, L, V] is never materialised)."""
    return records | {LOGITS: models.mlm_head(model)(records[last_layer]["hidden"][positions])}


class DistillationStep(nn.Module):
    """The student's side of one step (its forward, MLM logits, the objective) as one module.

    Data-parallel training wraps this module, so the student, its learnable objective parts and the MLM head
    are all synchronised, and an early-stopped forward stays inside the wrapper's forward.
    """

    def __init__(self, student: nn.Module, objective: Objective, recorder: FeatureRecorder, last_layer: int):
        super().__init__()
        self.student, self.objective = student, objective
        self.recorder, self.last_layer = recorder, last_layer

    def forward(self, inputs: dict, teacher_records: dict, targets: dict) -> dict[str, torch.Tensor]:
        self.recorder.forward(**inputs)
        records = dict(self.recorder.records)
        if self.objective.uses_mlm:
            records = mlm_records(records, self.student, self.last_layer, targets["positions"])
        return self.objective(records, teacher_records, targets)


def needs_with_mlm(objective: Objective, side: str, last_layer: int) -> dict[int, set[str]]:
    needs = objective.needs(side)
    if objective.uses_mlm:
        needs.setdefault(last_layer, set()).add("hidden")
    return needs


def make_step(step_module: nn.Module, objective: Objective, teacher_recorder: FeatureRecorder, teacher: nn.Module,
              teacher_last: int, device, precision: str):
    def step(batch):
        inputs = loop.model_inputs(batch)
        targets = {"attention_mask": batch["attention_mask"]}
        if objective.uses_mlm:
            targets["positions"] = batch["labels"] != -100
            targets["labels"] = batch["labels"][targets["positions"]]
        with torch.inference_mode(), loop.autocast(device, precision):
            teacher_recorder.forward(**inputs)
            teacher_records = dict(teacher_recorder.records)
            if objective.uses_mlm:
                teacher_records = mlm_records(teacher_records, teacher, teacher_last, targets["positions"])
        teacher_records = detached(teacher_records)
        with loop.autocast(device, precision):
            return step_module(inputs, teacher_records, targets)

    return step


def heldout_losses(step, loader, max_batches: int, modules, world, device) -> dict[str, float]:
    """Mean of every term over the held-out batches (eval mode: no dropout), averaged over processes."""
    for module in modules:
        module.eval()
    totals: dict[str, float] = {}
    count = 0
    with torch.no_grad():
        for batch in loader:
            if count == max_batches:
                break
            for name, value in step(loop.to_device(batch, device)).items():
                totals[name] = totals.get(name, 0.0) + float(value)
            count += 1
    for module in modules:
        module.train()
    means = {name: value / max(count, 1) for name, value in totals.items()}
    means = distributed.mean_over_ranks(means, world, device)
    return {"heldout_loss": means.pop("total", 0.0), **means}


# ------------------------------------------------------------------------------------------------ the recipe


def load_corpus(cfg: DictConfig, tokenizer, cache_dir: Path):
    from kdbench.corpus_sources import corpus_files

    path, fmt = corpus_files(cfg.corpus, cache_dir)
    return build_packed_corpus(path, fmt, tokenizer, cfg.corpus.seq_len, cache_dir,
                               heldout_fraction=cfg.corpus.heldout_fraction, max_docs=cfg.corpus.max_docs)


def run_task_agnostic(cfg: DictConfig, plan: Plan, run_dir: Path, log: StepLog) -> dict:
    trainer, precision = cfg.trainer, plan.precision
    world = distributed.init(plan.device)
    device = distributed.device_for(world, plan.device)
    tokenizer = models.teacher_tokenizer(cfg.teacher, plan.cache_dir)
    corpus = load_corpus(cfg, tokenizer, plan.cache_dir)
    teacher = freeze(models.pretrained_encoder(cfg.teacher, trainer.teacher_seed)).to(device)

    set_seed(cfg.seed)
    student = models.build_mlm_student(plan.teacher_conf, cfg.student, cfg.seed, dropout=trainer.get("student_dropout"))
    if plan.init_layers is not None:
        init_from_teacher(student, teacher, plan.init_layers, copy_embeddings=cfg.init.get("copy_embeddings", True),
                          copy_head=cfg.init.get("copy_head", True))
    models.prepare_for_training(student, trainer).to(device)
    objective = Objective(plan.terms, plan.student_conf, plan.teacher_conf, None, cfg.seed, **computation(trainer)).to(device)

    micro, accumulation = batch_layout(trainer.batch_size, world.size, trainer.device_batch_size)
    masking = MaskingSpec.from_tokenizer(tokenizer) if objective.uses_mlm else None
    train_sampler = ShardedBatches(len(corpus.train), trainer.batch_size, micro, world, cfg.seed)
    train_loader = torch.utils.data.DataLoader(KeyedCorpus(corpus.train), batch_sampler=train_sampler,
                                               collate_fn=Collator(masking, cfg.seed),
                                               generator=torch.Generator().manual_seed(cfg.seed))
    if len(train_sampler) == 0:
        raise ConfigError(f"the corpus has {len(corpus.train)} training sequences, fewer than one global batch of "
                          f"trainer.batch_size={trainer.batch_size}: add text or lower the batch size")
    # Held-out batches in corpus order, dealt round-robin to the processes: the same set however many there are.
    heldout_sampler = ShardedBatches(len(corpus.heldout), micro * world.size, micro, world, seed=0, shuffle=False)
    heldout_per_process = max(1, trainer.heldout_batches // world.size)
    heldout_loader = torch.utils.data.DataLoader(KeyedCorpus(corpus.heldout), batch_sampler=heldout_sampler,
                                                 collate_fn=Collator(masking, seed=0))

    student_last, teacher_last = plan.student_conf.num_hidden_layers, plan.teacher_conf.num_hidden_layers
    student_needs = needs_with_mlm(objective, "student", student_last)
    teacher_needs = needs_with_mlm(objective, "teacher", teacher_last)
    checkpoints = Checkpoints(run_dir / "checkpoints", meta={"fingerprint": plan.fingerprint}) if world.is_main else None
    latest = plan_resume(run_dir, plan)
    with (
        FeatureRecorder(student, student_needs, stop_after=max(student_needs)) as student_recorder,
        FeatureRecorder(teacher, teacher_needs, stop_after=max(teacher_needs)) as teacher_recorder,
    ):
        step_module = distributed.wrap(DistillationStep(student, objective, student_recorder, student_last), world, device)
        step = make_step(step_module, objective, teacher_recorder, teacher, teacher_last, device, precision)
        heldout_history = []

        def evaluate_heldout(at_step: int) -> None:
            if trainer.eval_every and at_step % trainer.eval_every == 0:
                values = heldout_losses(step, heldout_loader, heldout_per_process, [student, objective], world, device)
                heldout_history.append({"step": at_step, **values})
                log.log("heldout", at_step, values)

        initial = heldout_losses(step, heldout_loader, heldout_per_process, [student, objective], world, device)
        log.log("heldout", 0, initial)
        stats = loop.train("distill", [student, objective], train_loader, 0, trainer.lr, step, trainer, log, device,
                           checkpoints, latest, max_steps=trainer.max_steps, accumulation=accumulation,
                           sync_modules=[step_module] if world.distributed else [], after_step=evaluate_heldout)
        start = time.perf_counter()
        final = heldout_losses(step, heldout_loader, heldout_per_process, [student, objective], world, device)
    timing = {"distill_s": stats["seconds"], "distill_examples_per_s": stats["examples_per_s"] * world.size,
              "eval_s": time.perf_counter() - start}
    student_dir = run_dir / "student"
    if world.is_main:
        student.save_pretrained(str(student_dir))
        tokenizer.save_pretrained(str(student_dir))
        if not trainer.keep_checkpoints:
            checkpoints.clear()
    return {"metrics": final, "teacher_metrics": {}, "timing": timing, "initial_heldout": initial,
            "student_path": str(student_dir), "corpus": corpus.meta, "world_size": world.size,
            "batch": {"global": trainer.batch_size, "per_device": micro, "accumulation": accumulation}}


def plan_resume(run_dir: Path, plan: Plan) -> dict | None:
    state = resumable_state(Checkpoints(run_dir / "checkpoints"), plan.fingerprint)
    if state is not None and state["done"]:
        raise ConfigError(f"{run_dir} already holds a finished distillation: give a new run directory")
    return state
