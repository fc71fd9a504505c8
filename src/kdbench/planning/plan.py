"""Validate a composed config once, cheaply, before any heavy work; resolve it into a typed `Plan`.

The plan is the only reader of the raw config below the entry point: recipes, the loop, data and
model code take the plan's specs (`kdbench.planning.specs`). Everything a user can get wrong in a
config fails here with one line (a ConfigError/DataError): the groups' values as they are read
(`kdbench.planning.groups`), and here the layer lists, the widths, the head counts, batch sizes
that do not divide, an absent GPU (`kdbench.runtime.device`). The student's initialisation is read
by `kdbench.planning.inits`, the fine-tune plan's own parts by `kdbench.planning.finetune`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf
from transformers import PretrainedConfig

from kdbench.data.masking import check_smoothing
from kdbench.errors import ConfigError
from kdbench.measure.memory import StepMemory, device_batch, step_memory
from kdbench.models.configs import student_config, teacher_config
from kdbench.objectives.term_specs import Term
from kdbench.objectives.terms import Objective
from kdbench.planning.declared import check_declared, declared_keys
from kdbench.planning.finetune import finetune_parts
from kdbench.planning.group_keys import RunKeys, checked_stages
from kdbench.planning.groups import (
    augment_spec,
    check_data_files,
    check_positions,
    checked,
    container,
    corpus_spec,
    data_spec,
    logger_spec,
    matching_labels,
    shape_spec,
    task_spec,
    teacher_spec,
    trainer_spec,
    with_glue_content,
)
from kdbench.planning.inits import init_spec
from kdbench.planning.paths import saved_models, writable_folder
from kdbench.planning.specs import (
    AugmentSpec,
    BatchLayout,
    CorpusSpec,
    DataSpec,
    InitSpec,
    LoadingSpec,
    LoggerSpec,
    ShapeSpec,
    TaskSpec,
    TeacherSpec,
)
from kdbench.planning.stage_specs import (
    StageSpec,
    check_agnostic_stage,
    check_student_scoring,
    own_stages,
    refuse_renamed,
    stage_specs,
)
from kdbench.planning.stage_terms import objective_terms, with_terms
from kdbench.planning.trainer_specs import COMPUTATION_ONLY, TrainerSpec
from kdbench.records.record import chain_of
from kdbench.runtime import distributed
from kdbench.runtime.device import compute_on

SETTINGS = ("task_specific", "task_agnostic", "finetune")


@dataclass(frozen=True)
class Plan:
    setting: str
    seed: int
    task: TaskSpec
    data: DataSpec
    teacher: TeacherSpec
    student: ShapeSpec
    init: InitSpec  # setting=finetune: pretrained, from the distilled student
    objective: str
    terms: list[Term]  # the objective group's (the intermediate and distillation stages')
    trainer: TrainerSpec  # the setting's run-wide keys (`trainer_specs.TRAINERS`)
    stages: dict[str, StageSpec]  # the stages the setting runs, in order, with their terms
    corpus: CorpusSpec | None  # the task-agnostic setting's raw text
    # the task-specific setting's augmented training set (None: the task's own)
    augment: AugmentSpec | None
    batches: BatchLayout | None  # the task-agnostic setting's global batch over processes
    logger: LoggerSpec
    teacher_conf: PretrainedConfig | None  # None: setting=finetune, which has no teacher
    student_conf: PretrainedConfig
    device: torch.device
    precision: str  # fp32 or bf16 (trainer.precision=auto resolved for the device and student)
    precision_reason: str  # why: the key as given, or auto's rule (`kdbench.runtime.precision`)
    tf32: bool  # fp32 matmuls in TF32 (trainer.tf32 where the device and the precision use it)
    loading: LoadingSpec  # DataLoader workers, pinned memory (trainer.num_workers for the device)
    cache_dir: Path
    save_student: bool
    measure_cost: bool  # a task-specific run's teacher's and student's cost, measured at its end
    student_path: Path | None  # setting=finetune: the distilled student to fine-tune
    # the teacher's distillation chain (one name unless it is a distilled student), the student
    chain: tuple[str, ...]
    # identifies the resolved config, less where it is written (checkpoints refuse others)
    fingerprint: str
    config: dict  # the resolved config, as recorded

    @property
    def num_labels(self) -> int:
        return self.task.num_labels

    def build_student(self, teacher, *, mlm: bool = False):
        """The plan's student, initialised for `teacher` (`student_for` given the plan's specs)."""
        from kdbench.models.student import student_for  # the modeling code: once input is checked

        return student_for(
            teacher,
            self.teacher_conf,
            self.student,
            self.init,
            self.num_labels,
            self.seed,
            self.device,
            dropout=self.trainer.student_dropout,
            recompute_attention=self.trainer.recompute_attention,
            mlm=mlm,
        )


def micro_batch(device_batch: int | None, per_process: int) -> int:
    """The sequences a process takes at once: `device_batch` (all of them when None), at most
    `per_process`."""
    return min(device_batch or per_process, per_process)


def batch_layout(global_batch: int, world_size: int, device_batch) -> BatchLayout:
    """Micro-batches per process and gradient-accumulation steps giving exactly `global_batch` per
    step; `device_batch`: a number, or a callable choosing it from the batch per process."""
    per_process, remainder = divmod(global_batch, world_size)
    if remainder:
        raise ConfigError(
            f"stages.distillation.batch_size={global_batch} is not divisible by {world_size} "
            "processes"
        )
    if callable(device_batch):
        device_batch = device_batch(per_process)
    micro = micro_batch(device_batch, per_process)
    if per_process % micro:
        raise ConfigError(
            f"stages.distillation.batch_size={global_batch} over {world_size} process(es) is "
            f"{per_process} per process, not a multiple of "
            f"stages.distillation.device_batch_size={device_batch}: choose sizes that divide"
        )
    return BatchLayout(global_batch, micro, per_process // micro, world_size, heldout_batch=micro)


def config_fingerprint(resolved: dict) -> str:
    """Identifies the run's resolved config, less where it is written and how it computes
    (`COMPUTATION_ONLY`), with the saved models it reads (`saved_models`): a checkpoint of a run
    whose student was distilled again in place since is not this run's."""
    inputs = saved_models(resolved)
    resolved = json.loads(json.dumps(resolved, default=str))
    if inputs is not None:
        resolved["saved_models"] = inputs
    resolved.get("paths", {}).pop("run_dir", None)
    trainer = resolved.get("trainer", {})
    for how in COMPUTATION_ONLY:
        trainer.pop(how, None)
    return hashlib.sha256(json.dumps(resolved, sort_keys=True, default=str).encode()).hexdigest()


def check_required(cfg: DictConfig) -> None:
    """Every value an option leaves to the user (`???`: init.path, setting.student_path, ...) is
    set."""
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        raise ConfigError(
            f"{missing[0]} is not set, and the options chosen need it: add {missing[0]}=... to the "
            "command line"
        )


def make_plan(cfg: DictConfig) -> Plan:
    if cfg.setting.name not in SETTINGS:
        raise ConfigError(
            f"setting={cfg.setting.name} is not implemented yet; available: {', '.join(SETTINGS)}"
        )
    distributed.check_launch(cfg.setting.name)
    check_required(cfg)
    resolved = container(cfg)
    refuse_renamed(resolved)
    run = {key: resolved[key] for key in declared_keys(RunKeys) if key in resolved}
    check_declared(run, RunKeys, "")
    checked(cfg.setting, "setting")
    common = common_parts(cfg, resolved)
    if cfg.setting.name == "finetune":
        return Plan(**common, **finetune_parts(cfg, common))
    return Plan(**(common | distillation_parts(cfg, common)))


def common_parts(cfg: DictConfig, resolved: dict) -> dict:
    """The `Plan` fields every setting has, each group checked as it is read."""
    # before the trainer, whose numbers interpolate theirs (task.lr, teacher.finetune_lr): an
    # error names the source
    task, data, teacher = task_spec(cfg.task), data_spec(cfg.data), teacher_spec(cfg.teacher)
    task = matching_labels(task, teacher)
    trainer, student = trainer_spec(cfg), shape_spec(cfg.student, "student")
    compute = compute_on(trainer, student.hidden_size)
    corpus = corpus_spec(cfg.corpus) if cfg.setting.name == "task_agnostic" else None
    if corpus is None:
        check_data_files(task, data)
        task = with_glue_content(task, data)
    stages = stage_specs(checked_stages(resolved["stages"]), cfg.setting.name, task.name)
    resolved = own_stages(resolved)
    return dict(
        setting=cfg.setting.name,
        seed=cfg.seed,
        task=task,
        data=data,
        teacher=teacher,
        student=student,
        objective=cfg.objective.name,
        trainer=trainer,
        corpus=corpus,
        stages=stages,
        augment=augment_spec(cfg.augment, cfg.setting.name),
        **compute,
        cache_dir=writable_folder(cfg.paths.cache_dir, "paths.cache_dir", " (or $KDBENCH_CACHE)"),
        save_student=cfg.save_student,
        measure_cost=cfg.measure_cost,
        fingerprint=config_fingerprint(resolved),
        config=resolved,
    )


def distillation_parts(cfg: DictConfig, common: dict) -> dict:
    """The `Plan` fields of the distillation settings beyond those every setting has: the teacher's
    and the student's model configs, the init, the objective's terms, the global batch."""
    teacher, student, trainer, corpus = (
        common[key] for key in ("teacher", "student", "trainer", "corpus")
    )
    teacher_conf = teacher_config(teacher)
    check_positions(teacher_conf, trainer, corpus)
    student_conf = student_config(teacher_conf, student, common["task"].num_labels)
    init = init_spec(cfg.init, teacher_conf, student)
    confs = (student_conf, teacher_conf)
    terms = objective_terms(cfg, init, confs, teacher, common["task"])
    stages = with_terms(cfg, common["stages"], terms, init, confs, teacher, common["task"])
    task = None if corpus is not None else common["task"].name  # raw text has no task
    batches = None
    if corpus is not None:
        check_agnostic_stage(stages["distillation"])
        check_smoothing(trainer, terms, cfg.objective.name)
        memory = partial(agnostic_step_memory, terms, student_conf, teacher_conf, corpus, common)
        batches = agnostic_batches(stages["distillation"], common["device"], memory)
    else:
        check_student_scoring(stages, trainer.student_best_checkpoint)
    return dict(
        stages=stages,
        init=init,
        terms=terms,
        batches=batches,
        teacher_conf=teacher_conf,
        student_conf=student_conf,
        student_path=None,
        chain=distillation_chain(teacher, student, init, cfg),
        logger=logger_spec(
            cfg, (task, cfg.objective.name, student.name, init.label, f"s{cfg.seed}")
        ),
    )


def agnostic_batches(stage: StageSpec, device: torch.device, memory) -> BatchLayout:
    """The task-agnostic batch layout on `device` (`memory`: the step's bound, for
    `stages.distillation.device_batch_size=auto` on a GPU), its held-out micro-batch that of a
    single process on the CPU (the same on any device and number of processes; its sizes need not
    divide, as the held-out sample takes whole micro-batches only)."""
    chosen = partial(device_batch, stage.device_batch_size, memory=memory)
    batch = stage.batch_size
    heldout = micro_batch(chosen(batch, device=torch.device("cpu")), batch)
    layout = batch_layout(batch, distributed.current().size, partial(chosen, device=device))
    return replace(layout, heldout_batch=heldout)


def agnostic_step_memory(terms, student_conf, teacher_conf, corpus, common) -> StepMemory:
    """The task-agnostic step's memory bound, its objective built on the meta device."""
    with torch.device("meta"):
        objective = Objective(terms, student_conf, teacher_conf, None, common["seed"])
    return step_memory(objective, student_conf, teacher_conf, corpus.seq_len, common["precision"])


def distillation_chain(
    teacher: TeacherSpec, student: ShapeSpec, init: InitSpec, cfg: DictConfig
) -> tuple[str, ...]:
    """Teacher -> (assistant ->) student: a distilled teacher brings its own chain; a pretrained
    init is named."""
    me = f"{student.name} ({cfg.objective.name}, {cfg.setting.name})"
    if init.path is not None:
        me += f" from [{' -> '.join(chain_of(init.path, 'pretrained'))}]"
    return (*chain_of(teacher.name_or_path, teacher.name), me)
