"""Validate a composed config once, cheaply, before any heavy work, and resolve it into a typed `Plan`.

The plan is the only reader of the raw config below the entry point: recipes, the loop, data and model code take
the plan's specs (`kdbench.specs`). Everything a user can get wrong in a config fails here with one line (a
ConfigError/DataError): the layer lists, the widths, the head counts, numbers out of range, missing data files,
batch sizes that do not divide, an absent GPU.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf
from transformers import PretrainedConfig

from kdbench import distributed, storage
from kdbench.errors import ConfigError, DataError
from kdbench.layers import check_width, resolve_init_layers
from kdbench.models.hub import check_saved_model, saved_config
from kdbench.models.pretrained import teacher_config
from kdbench.models.student import student_config
from kdbench.objectives.terms import Term, build_terms
from kdbench.precision import resolve_precision, resolve_tf32
from kdbench.ranges import check_ranges, shown
from kdbench.record import chain_of
from kdbench.specs import (
    COMPUTATION_ONLY,
    AugmentSpec,
    BatchLayout,
    CorpusSpec,
    DataSpec,
    InitSpec,
    KDSpec,
    LoadingSpec,
    LoggerSpec,
    ShapeSpec,
    TaskSpec,
    TeacherSpec,
    TrainerSpec,
    TsvLayout,
    from_mapping,
)

SETTINGS = ("task_specific", "task_agnostic", "finetune")
log = logging.getLogger("kdbench")
GLUE_DIR_ENV = "KDBENCH_GLUE_DIR"


@dataclass(frozen=True)
class Plan:
    setting: str
    seed: int
    task: TaskSpec
    data: DataSpec
    teacher: TeacherSpec
    student: ShapeSpec
    init: InitSpec
    objective: str
    terms: list[Term]
    trainer: TrainerSpec
    kd: KDSpec
    corpus: CorpusSpec | None  # the task-agnostic setting's raw text
    augment: AugmentSpec | None  # the task-specific setting's augmented training set (None: the task's own)
    batches: BatchLayout | None  # the task-agnostic setting's global batch over processes
    logger: LoggerSpec
    teacher_conf: PretrainedConfig
    student_conf: PretrainedConfig
    device: torch.device
    precision: str  # fp32 or bf16 (trainer.precision=auto resolved for the device)
    tf32: bool  # fp32 matmuls in TF32 (trainer.tf32 where the device and the precision use it)
    loading: LoadingSpec  # DataLoader workers, pinned memory (trainer.num_workers for the device)
    cache_dir: Path
    save_student: bool
    measure_cost: bool  # both models' size, FLOPs and speed, measured after the run
    student_path: Path | None  # setting=finetune: the distilled student to fine-tune
    chain: tuple[str, ...]  # the teacher's distillation chain (one name unless it is a distilled student), the student
    fingerprint: str  # identifies the resolved config, less where it is written (checkpoints refuse others)
    config: dict  # the resolved config, as recorded

    @property
    def num_labels(self) -> int:
        return self.task.num_labels


def container(node) -> dict | list:
    return OmegaConf.to_container(node, resolve=True)


# ------------------------------------------------------------------------------------------------ the specs


def checked(node: DictConfig, at: str) -> dict:
    """A config group's resolved values, every number, flag and choice in its range (`kdbench.ranges`)."""
    values = container(node)
    check_ranges(values, at)
    return values


def trainer_spec(cfg: DictConfig) -> TrainerSpec:
    values = checked(cfg.trainer, "trainer")
    values["adam_betas"] = tuple(values["adam_betas"])
    return from_mapping(TrainerSpec, values, "trainer")


def task_spec(task: DictConfig) -> TaskSpec:
    """The task: a GLUE task (its Hub config and TSV layout), or the user's own data
    (`conf/task/custom.yaml`)."""
    values = checked(task, "task")
    if "tsv" not in values:
        return user_task_spec(values)
    tsv = values["tsv"]
    for field, column in tsv["columns"].items():
        if isinstance(column, str) != tsv["header"]:
            raise ConfigError(f"task.tsv.columns.{field}={shown(column)} does not fit task.tsv.header="
                              f"{shown(tsv['header'])}: name the columns of a file with a header, number those of "
                              "a file without one (from 0)")
    return TaskSpec(task.name, task.hf_config, tuple(task.text_fields), tuple(task.labels), tuple(task.metrics),
                    dict(task.eval_splits), TsvLayout(tsv["dir"], tsv["header"], tsv["columns"], tsv["files"]))


def user_task_spec(values: dict) -> TaskSpec:
    """A task of the user's files or Hub dataset, its data checked on entry
    (`kdbench.data.user_data`); a test file is evaluated after the validation split (`_test`)."""
    from kdbench.data.user_data import describe

    where, labels, metrics, content = describe(values)
    evals = dict(values["eval_splits"]) | ({"test": "test"} if "test" in where.files else {})
    return TaskSpec(values["name"], None, tuple(values["text_columns"]), labels, metrics, evals,
                    None, where, content)


def matching_labels(task: TaskSpec, teacher: TeacherSpec) -> TaskSpec:
    """The task, its labels checked against a given fine-tuned teacher's: by name (its id2label)
    where it names them, else by count; inferred labels of the user's data take the teacher's
    order."""
    if teacher.finetuned_path is None:
        return task
    conf = saved_config(teacher.finetuned_path, "the fine-tuned teacher")
    names = tuple(str(conf.id2label[i]) for i in range(conf.num_labels))
    where = f"teacher.finetuned_path={teacher.finetuned_path}"
    if conf.num_labels != task.num_labels:
        raise ConfigError(f"{where} has {conf.num_labels} output(s) and task {task.name} needs "
                          f"{task.num_labels}: give a teacher fine-tuned on this task")
    if task.regression or all(name == f"LABEL_{i}" for i, name in enumerate(names)):
        return task
    folded, ours = [name.casefold() for name in names], [label.casefold() for label in task.labels]
    if folded == ours:
        return task
    if sorted(folded) == sorted(ours) and task.user_data is not None:
        by_name = {label.casefold(): label for label in task.labels}
        return replace(task, labels=tuple(by_name[name] for name in folded))
    raise ConfigError(f"{where} predicts the labels {list(names)} and task {task.name} has "
                      f"{list(task.labels)}: give a teacher fine-tuned on these labels, or set "
                      "task.label_names in the teacher's order")


def local_path(value) -> Path:
    """A configured path (an override's digits, `data.glue_dir=2024`, arrive as a number)."""
    return Path(str(value)).expanduser()


def writable_folder(value, key: str, where: str = "") -> Path:
    """A folder the run writes into (`key` names its setting, `where` where else it is set),
    refused in one line when it cannot be one."""
    path = local_path(value)
    problem = storage.folder_problem(path.absolute())
    if problem is not None:
        raise ConfigError(f"{key}={value} {problem}: give a folder this user can write{where}")
    return path


def data_spec(data: DictConfig) -> DataSpec:
    """The data source: the configured GLUE folder, else $KDBENCH_GLUE_DIR, else (None) the Hugging Face Hub."""
    checked(data, "data")
    chosen = data.get("glue_dir") or os.environ.get(GLUE_DIR_ENV)
    glue_dir = local_path(chosen) if chosen else None
    if glue_dir is not None and not glue_dir.is_dir():
        raise DataError(
            f"GLUE directory {glue_dir} does not exist: point data.glue_dir or ${GLUE_DIR_ENV} at a folder "
            "in the download_glue_data.py layout (CoLA/train.tsv, SST-2/dev.tsv, ...)"
        )
    return DataSpec(glue_dir, data.hf_dataset, data.train_limit, data.eval_limit, data.subset_seed)


def shape_spec(shape: DictConfig, at: str, name: str | None = None) -> ShapeSpec:
    """The model shape at config path `at` (student, teacher.shape, augment.mlm_shape), named `name` (default: `at`)
    where it has no name of its own."""
    values = checked(shape, at)
    values.setdefault("name", name or at)
    spec = from_mapping(ShapeSpec, values, at)
    if spec.hidden_size % spec.num_heads:
        raise ConfigError(f"{at}.hidden_size={spec.hidden_size} is not divisible by {at}.num_heads={spec.num_heads}: "
                          "choose a head count that divides the width")
    return spec


def teacher_spec(teacher: DictConfig) -> TeacherSpec:
    checked(teacher, "teacher")
    shape = shape_spec(teacher.shape, "teacher.shape", f"teacher {teacher.name}") if teacher.get("shape") is not None else None
    finetuned = local_path(teacher.finetuned_path) if teacher.get("finetuned_path") else None
    if finetuned is not None and not (finetuned / "config.json").is_file():
        raise ConfigError(f"cannot load the fine-tuned teacher from teacher.finetuned_path={teacher.finetuned_path}: "
                          "no config.json there; give a folder written by save_pretrained, or null to fine-tune the teacher")
    if finetuned is not None:
        check_saved_model(finetuned, "the fine-tuned teacher")
    return TeacherSpec(teacher.name, teacher.get("name_or_path"), shape, teacher.get("has_mlm_head", False),
                       finetuned, container(teacher))


def init_spec(init: DictConfig, teacher_conf: PretrainedConfig, student: ShapeSpec) -> InitSpec:
    checked(init, "init")
    if init.name == "pretrained":
        return InitSpec("pretrained", None, path=pretrained_student(init.path, student),
                        carry_projections=init.get("carry_projections", False))
    name = auto_init(teacher_conf, student) if init.name == "auto" else init.name
    layers = resolve_init_layers(name, init.get("layers"), teacher_conf.num_hidden_layers, student.num_layers)
    if layers is not None:
        check_width(student.hidden_size, teacher_conf.hidden_size, name)
    return InitSpec(name, None if layers is None else tuple(layers),
                    init.get("copy_embeddings", True), init.get("copy_head", False))


SHAPE_KEYS = {"num_layers": "num_hidden_layers", "hidden_size": "hidden_size", "num_heads": "num_attention_heads",
              "ffn_size": "intermediate_size"}


def pretrained_student(path: str | None, student: ShapeSpec) -> Path:
    """init=pretrained's saved student, checked to be a model of the student's shape."""
    folder = local_path(path)
    if not path or not (folder / "config.json").is_file():
        raise ConfigError(f"init=pretrained needs init.path, a folder written by save_pretrained (a task-agnostic "
                          f"run's student/); {path} holds no config.json")
    saved = saved_config(folder, "a distilled student")
    differ = [f"{key} {getattr(saved, theirs)} vs {getattr(student, key)}" for key, theirs in SHAPE_KEYS.items()
              if getattr(saved, theirs, None) != getattr(student, key)]
    if differ:
        raise ConfigError(f"init.path={path} holds a model of another shape than student={student.name} "
                          f"({'; '.join(differ)}): choose the student config it was saved as")
    return folder


def auto_init(teacher_conf: PretrainedConfig, student: ShapeSpec) -> str:
    """init=auto: every k-th teacher layer when the student can take them (same width, depth dividing the
    teacher's), random otherwise; the choice is logged in one line."""
    teacher_layers, width = teacher_conf.num_hidden_layers, teacher_conf.hidden_size
    if student.hidden_size != width:
        reason = f"the student's width {student.hidden_size} differs from the teacher's {width}"
    elif teacher_layers % student.num_layers:
        reason = f"the teacher's {teacher_layers} layers are not a multiple of the student's {student.num_layers}"
    else:
        log.info("init=auto: every_kth (teacher layers copied: the student has the teacher's width)")
        return "every_kth"
    log.info("init=auto: random (%s)", reason)
    return "random"


def corpus_spec(corpus: DictConfig) -> CorpusSpec:
    """The raw text, validated before any work: a local corpus names an existing path and a known format."""
    from kdbench.data.readers import READERS

    checked(corpus, "corpus")
    common = dict(name=corpus.name, seq_len=corpus.seq_len, heldout_fraction=corpus.heldout_fraction,
                  max_docs=corpus.max_docs)
    if corpus.get("hf_datasets"):
        return CorpusSpec(**common, hf_datasets=tuple(container(corpus.hf_datasets)))
    if corpus.format not in READERS:
        raise ConfigError(f"corpus.format={corpus.format!r}; valid: {', '.join(sorted(READERS))}")
    if not corpus.get("path"):
        raise ConfigError("corpus=local needs corpus.path (a text file or a folder of them) or $KDBENCH_CORPUS")
    path = local_path(corpus.path)
    if not path.exists():
        raise ConfigError(f"corpus.path={corpus.path} does not exist: give a text file or a folder of them")
    return CorpusSpec(**common, path=path, format=corpus.format)


def augment_spec(augment: DictConfig, setting: str) -> AugmentSpec | None:
    """The `augment` group checked: its numbers in range (`kdbench.ranges`), a word-vectors file that exists."""
    if augment.name == "none":
        return None
    if setting != "task_specific":
        raise ConfigError(f"augment={augment.name} augments a task's training set: it needs setting=task_specific, "
                          f"not {setting}; use augment=none")
    values = {k: v for k, v in checked(augment, "augment").items() if k != "name"}
    if values.get("mlm_shape") is not None:
        values["mlm_shape"] = shape_spec(augment.mlm_shape, "augment.mlm_shape")
    if values.get("word_vectors"):
        values["word_vectors"] = local_path(values["word_vectors"])
        if not values["word_vectors"].is_file():
            raise ConfigError(f"augment.word_vectors={augment.word_vectors} does not exist: give a GloVe text file "
                              "(e.g. glove.42B.300d.txt from nlp.stanford.edu/projects/glove), or null to keep "
                              "multi-piece words")
    return from_mapping(AugmentSpec, values, "augment")


def check_agnostic_trainer(trainer: TrainerSpec) -> None:
    """The task-agnostic recipe counts steps, not epochs, and caps each device's batch."""
    missing = [key for key in ("max_steps", "device_batch_size") if getattr(trainer, key) is None]
    if missing:
        raise ConfigError(f"setting=task_agnostic needs {' and '.join(f'trainer.{k}' for k in missing)}, which "
                          f"trainer={trainer.name} does not set: add trainer=agnostic (the paper's task-agnostic "
                          "recipe) or set them")


def batch_layout(global_batch: int, world_size: int, device_batch: int) -> BatchLayout:
    """Micro-batches per process and gradient-accumulation steps giving exactly `global_batch` per step."""
    per_process, remainder = divmod(global_batch, world_size)
    if remainder:
        raise ConfigError(f"trainer.batch_size={global_batch} is not divisible by {world_size} processes")
    micro = min(device_batch, per_process)
    if per_process % micro:
        raise ConfigError(
            f"trainer.batch_size={global_batch} over {world_size} process(es) is {per_process} per process, not a "
            f"multiple of trainer.device_batch_size={device_batch}: choose sizes that divide"
        )
    return BatchLayout(global_batch, micro, per_process // micro, world_size)


def logger_spec(cfg: DictConfig) -> LoggerSpec:
    settings = {k: v for k, v in container(cfg.logger).items() if k != "name"}
    return LoggerSpec(cfg.logger.name, settings, f"{cfg.task.name}-{cfg.objective.name}-{cfg.student.name}-s{cfg.seed}")


# ------------------------------------------------------------------------------------------ the environment


def resolve_device(requested: str) -> torch.device:
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(requested)
    except RuntimeError:
        raise ConfigError(f"trainer.device={requested!r} is not a device: use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"trainer.device={requested} but no CUDA GPU is available: use trainer.device=auto or cpu")
    return device


AUTO_WORKERS = 4  # trainer.num_workers=auto on a GPU: at most this many, a core left to the main


def loading_spec(num_workers: int | str, device: torch.device) -> LoadingSpec:
    """`trainer.num_workers` for the device: auto is min(4, CPU cores - 1) workers on a GPU, 0 on
    the CPU (where workers would take the cores the step computes on); pinned memory on a GPU."""
    if num_workers == "auto":
        num_workers = max(0, min(AUTO_WORKERS, cpu_cores() - 1)) if device.type == "cuda" else 0
    return LoadingSpec(num_workers, pin_memory=device.type == "cuda")


def cpu_cores() -> int:
    """The CPU cores this process may run on (a cluster's binding of the task included)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def config_fingerprint(resolved: dict) -> str:
    """Identifies the run's resolved config, less where it is written and how it computes (`COMPUTATION_ONLY`)."""
    resolved = json.loads(json.dumps(resolved, default=str))
    resolved.get("paths", {}).pop("run_dir", None)
    trainer = resolved.get("trainer", {})
    for how in COMPUTATION_ONLY:
        trainer.pop(how, None)
    return hashlib.sha256(json.dumps(resolved, sort_keys=True, default=str).encode()).hexdigest()


def check_data_files(task: TaskSpec, data: DataSpec) -> None:
    """With a local GLUE directory, every split the run reads must exist (read errors come with line numbers later)."""
    if data.glue_dir is None or task.tsv is None:
        return
    for split in ["train", *task.eval_splits.values()]:
        files = task.tsv.files
        if split not in files or not (data.glue_dir / task.tsv.dir / files[split]).is_file():
            where = data.glue_dir / task.tsv.dir / files.get(split, f"<{split}>")
            raise ConfigError(
                f"task {task.name} needs {where}, which is missing: the local GLUE directory lacks this "
                "task or split; choose another task, or unset data.glue_dir / $KDBENCH_GLUE_DIR to use the Hub"
            )


# ------------------------------------------------------------------------------------------------ the plan


def objective_terms(cfg: DictConfig, init: InitSpec, student_conf, teacher_conf, teacher: TeacherSpec,
                    task: TaskSpec) -> list[Term]:
    """The objective's terms for this setting: raw text uses `terms_task_agnostic` and the setting's mapping."""
    checked(cfg.objective, "objective")  # both term lists, whichever this setting uses
    agnostic = cfg.setting.name == "task_agnostic"
    specs = cfg.objective.terms
    if agnostic and cfg.objective.get("terms_task_agnostic"):
        specs = cfg.objective.terms_task_agnostic
    mapping = cfg.setting.get("mapping") or cfg.objective.mapping
    mapping = container(mapping) if OmegaConf.is_config(mapping) else mapping
    layers = None if init.layers is None else list(init.layers)
    return build_terms(cfg.objective.name, container(specs), mapping, layers, student_conf, teacher_conf,
                       regression=task.regression, agnostic=agnostic, teacher_has_mlm_head=teacher.has_mlm_head)


# the config's keys outside the groups
RUN_KEYS = ("seed", "save_student", "measure_cost", "prediction_kd", "kdbench")


def check_required(cfg: DictConfig) -> None:
    """Every value an option leaves to the user (`???`: init.path, setting.student_path, ...) is set."""
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        raise ConfigError(f"{missing[0]} is not set, and the options chosen need it: add {missing[0]}=... to the "
                          "command line")


def check_positions(conf: PretrainedConfig, trainer: TrainerSpec, corpus: CorpusSpec | None) -> None:
    """The sequences fit the model's position embeddings (RoBERTa's positions start after its padding id)."""
    key, length = ("corpus.seq_len", corpus.seq_len) if corpus else ("trainer.max_length", trainer.max_length)
    positions = conf.max_position_embeddings - (conf.pad_token_id + 1 if "roberta" in conf.model_type else 0)
    if length > positions:
        raise ConfigError(f"{key}={length} is longer than the model's {positions} positions (its max_positions): "
                          f"lower {key}")


def make_plan(cfg: DictConfig) -> Plan:
    if cfg.setting.name not in SETTINGS:
        raise ConfigError(f"setting={cfg.setting.name} is not implemented yet; available: {', '.join(SETTINGS)}")
    check_required(cfg)
    resolved = container(cfg)
    check_ranges({key: resolved[key] for key in RUN_KEYS if key in resolved})
    # before the trainer, whose numbers interpolate theirs (task.lr, teacher.finetune_lr): an error names the source
    task, data, teacher = task_spec(cfg.task), data_spec(cfg.data), teacher_spec(cfg.teacher)
    task = matching_labels(task, teacher)
    trainer = trainer_spec(cfg)
    device = distributed.device_for(distributed.current(), resolve_device(trainer.device))  # this process's
    precision = resolve_precision(trainer.precision, device)
    corpus = corpus_spec(cfg.corpus) if cfg.setting.name == "task_agnostic" else None
    if corpus is None:
        check_data_files(task, data)
    student = shape_spec(cfg.student, "student")
    common = dict(setting=cfg.setting.name, seed=cfg.seed, task=task, data=data, teacher=teacher, student=student,
                  objective=cfg.objective.name, trainer=trainer,
                  kd=from_mapping(KDSpec, resolved["prediction_kd"], "prediction_kd"), corpus=corpus,
                  augment=augment_spec(cfg.augment, cfg.setting.name), logger=logger_spec(cfg), device=device,
                  precision=precision, tf32=resolve_tf32(trainer.tf32, device, precision),
                  loading=loading_spec(trainer.num_workers, device),
                  cache_dir=writable_folder(cfg.paths.cache_dir, "paths.cache_dir",
                                            " (or $KDBENCH_CACHE)"),
                  save_student=cfg.save_student,
                  measure_cost=cfg.measure_cost,
                  fingerprint=config_fingerprint(resolved), config=resolved)
    if cfg.setting.name == "finetune":
        return finetune_plan(cfg, common)
    teacher_conf = teacher_config(teacher)
    check_positions(teacher_conf, trainer, corpus)
    student_conf = student_config(teacher_conf, student, task.num_labels)
    init = init_spec(cfg.init, teacher_conf, student)
    terms = objective_terms(cfg, init, student_conf, teacher_conf, teacher, task)
    batches = None
    if corpus is not None:
        check_agnostic_trainer(trainer)
        batches = batch_layout(trainer.batch_size, distributed.current().size, trainer.device_batch_size)
    return Plan(**common, init=init, terms=terms, batches=batches, teacher_conf=teacher_conf,
                student_conf=student_conf, student_path=None, chain=distillation_chain(teacher, student, init, cfg))


def finetune_plan(cfg: DictConfig, common: dict) -> Plan:
    """setting=finetune: a distilled student alone, no teacher, no objective."""
    student_path = local_path(cfg.setting.student_path)
    if not (student_path / "config.json").is_file():
        raise ConfigError(f"setting.student_path={cfg.setting.student_path} is not a saved model (no config.json): "
                          "give the student/ folder of a task-agnostic run")
    student_conf = saved_config(student_path, "a distilled student")
    check_positions(student_conf, common["trainer"], None)
    return Plan(**common, init=InitSpec("random", None), terms=[], batches=None, teacher_conf=student_conf,
                student_conf=student_conf, student_path=student_path,
                chain=(*chain_of(student_path, "student"), f"fine-tuned on {common['task'].name}"))


def distillation_chain(teacher: TeacherSpec, student: ShapeSpec, init: InitSpec, cfg: DictConfig) -> tuple[str, ...]:
    """Teacher -> (assistant ->) student: a distilled teacher brings its own chain; a pretrained init is named."""
    me = f"{student.name} ({cfg.objective.name}, {cfg.setting.name})"
    if init.path is not None:
        me += f" from [{' -> '.join(chain_of(init.path, 'pretrained'))}]"
    return (*chain_of(teacher.name_or_path, teacher.name), me)
