"""Validate a composed config once, cheaply, before any heavy work, and resolve what the run needs.

Everything a user can get wrong in a config fails here with one line (a ConfigError/DataError): the
layer lists, the widths, the head counts, numbers out of range, missing data files, an absent GPU.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf
from transformers import PretrainedConfig

from kdbench import data
from kdbench.errors import ConfigError
from kdbench.initialization import check_width, resolve_init_layers
from kdbench.models import student_config, teacher_config
from kdbench.objectives.objective import Term, build_terms

SETTINGS = ("task_specific", "task_agnostic", "finetune")


@dataclass
class Plan:
    teacher_conf: PretrainedConfig
    student_conf: PretrainedConfig
    init_layers: list[int] | None
    terms: list[Term]
    device: torch.device
    num_labels: int
    cache_dir: Path
    precision: str  # fp32 or bf16 (trainer.precision=auto resolved for the device)
    fingerprint: str  # identifies the resolved config, less where it is written (checkpoints refuse others)

    @property
    def init_label(self) -> str:
        """How records and tables name the init: "random" or the teacher layers, "4,8,12"."""
        return "random" if self.init_layers is None else ",".join(map(str, self.init_layers))


POSITIVE = ("batch_size", "eval_batch_size", "max_length", "log_every", "max_steps", "device_batch_size")
NON_NEGATIVE = ("teacher_epochs", "stage1_epochs", "stage2_epochs", "eval_every", "heldout_batches", "checkpoint_every")


def check_numbers(trainer: DictConfig) -> None:
    """Counts, sizes and rates in range (keys a trainer recipe does not have are skipped)."""
    for key in NON_NEGATIVE:
        if trainer.get(key) is not None and trainer[key] < 0:
            raise ConfigError(f"trainer.{key}={trainer[key]} is negative: use 0 to skip or turn it off, or a positive count")
    for key in POSITIVE:
        if trainer.get(key) is not None and trainer[key] <= 0:
            raise ConfigError(f"trainer.{key}={trainer[key]} must be a positive integer")
    for key in ("lr", "teacher_lr"):
        if trainer.get(key) is not None and trainer[key] <= 0:
            raise ConfigError(f"trainer.{key}={trainer[key]} must be a positive learning rate, e.g. 1e-5")
    if not 0 <= trainer.warmup_ratio < 1:
        raise ConfigError(f"trainer.warmup_ratio={trainer.warmup_ratio} must be in [0, 1)")
    if trainer.precision not in ("fp32", "bf16", "auto"):
        raise ConfigError(f"trainer.precision={trainer.precision!r}: valid are fp32, bf16, auto (bf16 on a GPU that has it)")


def resolve_precision(requested: str, device: torch.device) -> str:
    if requested == "auto":
        return "bf16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "fp32"
    if requested == "bf16" and device.type == "cpu" and not torch.backends.mkldnn.is_available():
        raise ConfigError("trainer.precision=bf16 needs a GPU or a CPU with bf16 support: use trainer.precision=fp32")
    return requested


# Trainer settings that change how a run computes, not what: a run resumes across them (e.g. an out-of-memory run
# re-run with recomputation on).
HOW_NOT_WHAT = ("progress_bar", "compile", "fused_losses", "recompute_losses", "recompute_attention")


def config_fingerprint(cfg: DictConfig) -> str:
    """Identifies the run's resolved config, less where it is written and how progress is shown."""
    resolved = OmegaConf.to_container(cfg, resolve=True)
    resolved.get("paths", {}).pop("run_dir", None)
    trainer = resolved.get("trainer", {})
    for how in HOW_NOT_WHAT:
        trainer.pop(how, None)
    return hashlib.sha256(json.dumps(resolved, sort_keys=True, default=str).encode()).hexdigest()


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


def check_data_files(cfg: DictConfig) -> None:
    """With a local GLUE directory, every split the run reads must exist (read errors come with line numbers later)."""
    root = data.glue_dir(cfg.data)
    if root is None:
        return
    for split in ["train", *cfg.task.eval_splits.values()]:
        files = cfg.task.tsv.files
        if split not in files or not (root / cfg.task.tsv.dir / files[split]).is_file():
            where = root / cfg.task.tsv.dir / files.get(split, f"<{split}>")
            raise ConfigError(
                f"task {cfg.task.name} needs {where}, which is missing: the local GLUE directory lacks this "
                "task or split; choose another task, or unset data.glue_dir / $KDBENCH_GLUE_DIR to use the Hub"
            )


def make_plan(cfg: DictConfig) -> Plan:
    if cfg.setting.name not in SETTINGS:
        raise ConfigError(
            f"setting={cfg.setting.name} is not implemented yet; available: {', '.join(SETTINGS)}"
        )
    check_numbers(cfg.trainer)
    device = resolve_device(cfg.trainer.device)
    precision = resolve_precision(cfg.trainer.precision, device)
    cache_dir = Path(cfg.paths.cache_dir).expanduser()
    if cfg.setting.name == "finetune":  # a distilled student alone: no teacher, no objective
        check_data_files(cfg)
        student_conf = finetune_student_config(cfg.setting.student_path)
        return Plan(student_conf, student_conf, None, [], device, data.num_labels(cfg.task), cache_dir, precision,
                    config_fingerprint(cfg))
    if cfg.setting.name == "task_agnostic":
        check_corpus(cfg.corpus)
    else:
        check_data_files(cfg)
    num_labels = data.num_labels(cfg.task)
    finetuned = cfg.teacher.get("finetuned_path")
    if finetuned and not (Path(finetuned).expanduser() / "config.json").is_file():
        raise ConfigError(f"cannot load the fine-tuned teacher from teacher.finetuned_path={finetuned}: no config.json "
                          "there; give a folder written by save_pretrained, or null to fine-tune the teacher")
    teacher_conf = teacher_config(cfg.teacher)
    student_conf = student_config(teacher_conf, cfg.student, num_labels)
    if cfg.student.hidden_size % cfg.student.num_heads:
        raise ConfigError(
            f"student {cfg.student.name}: hidden size {cfg.student.hidden_size} is not divisible by "
            f"{cfg.student.num_heads} heads"
        )
    init_layers = resolve_init_layers(cfg.init, teacher_conf.num_hidden_layers, cfg.student.num_layers)
    if init_layers is not None:
        check_width(cfg.student.hidden_size, teacher_conf.hidden_size, cfg.init.name)
    terms = build_terms(cfg.objective, init_layers, student_conf, teacher_conf, regression=data.is_regression(cfg.task),
                        setting=cfg.setting, teacher_has_mlm_head=cfg.teacher.get("has_mlm_head", False))
    return Plan(teacher_conf, student_conf, init_layers, terms, device, num_labels, cache_dir, precision,
                config_fingerprint(cfg))


def finetune_student_config(student_path: str) -> PretrainedConfig:
    from transformers import AutoConfig

    path = Path(student_path).expanduser()
    if not (path / "config.json").is_file():
        raise ConfigError(f"setting.student_path={student_path} is not a saved model (no config.json): give the "
                          "student/ folder of a task-agnostic run")
    return AutoConfig.from_pretrained(str(path), trust_remote_code=False)


def check_corpus(corpus: DictConfig) -> None:
    from kdbench.corpus_sources import check_corpus_config

    check_corpus_config(corpus)
