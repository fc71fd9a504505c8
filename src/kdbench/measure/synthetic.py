"""A task-agnostic distillation built without a config: a random BERT-shaped teacher, a random
student, random token sequences, through the recipe's own parts (recorders, step, collator, loop).

The bench and the GPU checks use it: they run where Hydra, omegaconf and datasets may not be
installed, so nothing here imports them. The objective is read from its packaged YAML
(`conf/objective/NAME.yaml`).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch
import yaml
from transformers import BertConfig, BertForMaskedLM

from kdbench.data.batches import IN_PROCESS, corpus_loader
from kdbench.data.masking import MaskingSpec
from kdbench.measure import memory
from kdbench.models.attention import prepare_for_training
from kdbench.models.compilation import compile_blocks
from kdbench.models.configs import student_config
from kdbench.models.student import build_student
from kdbench.objectives.term_specs import build_terms
from kdbench.objectives.terms import Objective
from kdbench.planning.hydra_config import config_dir
from kdbench.planning.specs import LoadingSpec, ShapeSpec
from kdbench.planning.stage_specs import OptimizerSpec
from kdbench.recipes.task_agnostic import MLM_NUM_LABELS, reaching_step, recorder
from kdbench.runtime.distributed import World
from kdbench.teacher.frozen import freeze, in_run_precision
from kdbench.training import loop
from kdbench.training.steps import StudentSide, teacher_records_now

BERT_VOCAB = 30522
SPECIAL_IDS = (0, 100, 101, 102, 103)  # BERT's [PAD], [UNK], [CLS], [SEP], [MASK]
MASK_ID = 103
# The paper's Table 5 recipe (conf/trainer/agnostic.yaml): AdamW, lr 5e-4, betas (0.9, 0.99), eps
# 1e-6.
SINGLE = World()  # one process
AGNOSTIC_OPTIMIZER = OptimizerSpec(
    lr=5e-4, weight_decay=0.01, betas=(0.9, 0.99), eps=1e-6, warmup_ratio=0.06
)


@dataclass(frozen=True)
class Shapes:
    """The models and batches of a synthetic distillation; the defaults are the paper's Table 2
    run."""

    teacher: ShapeSpec = ShapeSpec("12x768", 12, 768, 12, 3072)
    student: ShapeSpec = ShapeSpec("6x768", 6, 768, 12, 3072)
    vocab: int = BERT_VOCAB
    length: int = 128
    micro_batch: int = 64
    accumulation: int = 16  # 1024 sequences per optimizer step on one device


@dataclass(frozen=True)
class Timing:
    """How a bench runs a synthetic distillation: `warmup` steps, then `steps` timed ones, loaded
    as `loading` says, with both models' blocks and the losses' chains compiled by
    `compile_backend` (None: eager); with `profile`, then a profile of a few micro-steps, forward
    and backward (the agnostic mode's)."""

    steps: int
    warmup: int
    loading: LoadingSpec = IN_PROCESS
    compile_backend: str | None = None
    profile: bool = False


def teacher_config(shapes: Shapes) -> BertConfig:
    shape = shapes.teacher
    return BertConfig(
        vocab_size=shapes.vocab,
        hidden_size=shape.hidden_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        intermediate_size=shape.ffn_size,
        max_position_embeddings=max(512, shapes.length),
        attn_implementation="sdpa",
    )


def objective_terms(name: str, student_conf, teacher_conf, *, agnostic: bool = True) -> list:
    """The objective's terms from its packaged YAML: task-agnostic ones last layer to last layer, or
    its task-specific (stage-1) ones by its own mapping (uniform for a random student)."""
    spec = yaml.safe_load((config_dir() / "objective" / f"{name}.yaml").read_text())
    terms = (spec.get("terms_task_agnostic") or spec["terms"]) if agnostic else spec["terms"]
    return build_terms(
        name,
        terms,
        "last" if agnostic else spec["mapping"],
        None,
        student_conf,
        teacher_conf,
        regression=False,
        agnostic=agnostic,
        teacher_has_mlm_head=agnostic,
    )


def meta_objective(name: str, shapes: Shapes) -> tuple[Objective, BertConfig, BertConfig]:
    """The objective's task-agnostic module at `shapes`, built on the meta device (no memory, no
    compute), with the student's and the teacher's configs."""
    teacher = teacher_config(shapes)
    student = student_config(teacher, shapes.student, MLM_NUM_LABELS)
    with torch.device("meta"):
        objective = Objective(objective_terms(name, student, teacher), student, teacher)
    return objective, student, teacher


def step_memory(name: str, shapes: Shapes, precision: str) -> memory.StepMemory:
    """`kdbench.measure.memory`'s bound on a step of the objective at `shapes`."""
    objective, student, teacher = meta_objective(name, shapes)
    return memory.step_memory(objective, student, teacher, shapes.length, precision)


def random_sequences(count: int, shapes: Shapes, seed: int = 0) -> list[dict]:
    """Packed, unpadded sequences of random ordinary tokens, [CLS] first and [SEP] last, as the
    corpus holds."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(999, shapes.vocab, (count, shapes.length), generator=generator)
    ids[:, 0], ids[:, -1] = 101, 102
    mask = torch.ones(shapes.length, dtype=torch.long)
    return [{"input_ids": row, "attention_mask": mask} for row in ids]


def loader(
    shapes: Shapes,
    masking: MaskingSpec | None,
    steps: int,
    seed: int = 0,
    world: World = SINGLE,
    loading: LoadingSpec = IN_PROCESS,
) -> torch.utils.data.DataLoader:
    """This process's micro-batches of `steps` global batches of random sequences, collated and
    masked by the recipe's collator (a global batch is `micro_batch * accumulation * world.size`
    sequences), loaded as `loading` says."""
    global_batch = shapes.micro_batch * shapes.accumulation * world.size
    sequences = random_sequences(global_batch * steps, shapes, seed)
    return corpus_loader(sequences, shapes.micro_batch, global_batch, loading, world, masking, seed)


def random_models(shapes: Shapes, device, precision: str, seed: int, dropout: float | None):
    """A frozen random teacher of `shapes` in the run's precision (as the recipe keeps it) and a
    random student with an MLM head, on `device`."""
    torch.manual_seed(seed)
    teacher = freeze(BertForMaskedLM(teacher_config(shapes))).to(device)
    student = build_student(
        teacher.config, shapes.student, MLM_NUM_LABELS, seed + 1, mlm=True, dropout=dropout
    )
    return in_run_precision(teacher, precision), prepare_for_training(student, False).to(device)


def compiled_objective(
    name: str, teacher: BertForMaskedLM, student: torch.nn.Module, seed: int, backend: str | None
) -> Objective:
    """The objective `name` between the two models, on their device, its loss chains and both
    models' blocks compiled by `backend` (None: eager)."""
    if backend is not None:
        compile_blocks(student, teacher, backend=backend)
    terms = objective_terms(name, student.config, teacher.config)
    objective = Objective(terms, student.config, teacher.config, seed=seed, compile_backend=backend)
    return objective.to(teacher.device)


@contextmanager
def distillation(
    objective_name: str,
    shapes: Shapes,
    device: torch.device,
    precision: str,
    steps: int,
    seed: int = 0,
    *,
    world: World = SINGLE,
    dropout: float | None = None,
    loading: LoadingSpec = IN_PROCESS,
    compile_backend: str | None = None,
):
    """Yields the `loop.Stage` of `steps` optimizer steps of the objective's task-agnostic
    distillation (this process's part of it in a data-parallel `world`, whose process group is
    already initialised); `compile_backend`: both models' blocks and the objective's loss chains
    compiled by it, as `trainer.compile` does (None: eager)."""
    teacher, student = random_models(shapes, device, precision, seed, dropout)
    objective = compiled_objective(objective_name, teacher, student, seed, compile_backend)
    masking = MaskingSpec(shapes.vocab, MASK_ID, SPECIAL_IDS) if objective.uses_logits else None
    layers = (shapes.student.num_layers, shapes.teacher.num_layers)
    with (
        recorder(student, objective, "student", layers[0]) as (student_recorder, student_logits),
        recorder(teacher, objective, "teacher", layers[1]) as (teacher_recorder, teacher_logits),
    ):
        targets = teacher_records_now(teacher_recorder, teacher_logits, device, precision)
        batches = loader(shapes, masking, steps, seed, world, loading)
        student_side, step = reaching_step(
            StudentSide(student_recorder, objective, student_logits),
            targets,
            batches,
            world,
            device,
            precision,
        )
        yield loop.Stage(
            "distillation",
            [student, objective],
            batches,
            step,
            AGNOSTIC_OPTIMIZER,
            device,
            max_steps=steps,
            accumulation=shapes.accumulation,
            sync_modules=[student_side] if world.distributed else [],
        )


def timed_distillation(
    objective_name: str, shapes: Shapes, device: torch.device, precision: str, timing: Timing
):
    """`distillation` of `timing`'s warm-up and timed steps, loaded and compiled as it says."""
    return distillation(
        objective_name,
        shapes,
        device,
        precision,
        timing.warmup + timing.steps,
        loading=timing.loading,
        compile_backend=timing.compile_backend,
    )
