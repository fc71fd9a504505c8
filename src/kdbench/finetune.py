"""GLUE fine-tuning of a distilled student: the task-agnostic setting's evaluation protocol.

Each grid point (learning rate x batch size, `+experiment=finetune_grid`) is one job; the report keeps the best
dev score per task, as the paper does. A fine-tuning record names the distillation it came from
(`distilled_from`) and carries that run's teacher, student, init, objective and seed, so it joins the
task-agnostic tables.
"""

from __future__ import annotations

import time
from pathlib import Path

from omegaconf import DictConfig
from transformers import AutoModelForSequenceClassification, AutoTokenizer, set_seed

from kdbench import data, loop
from kdbench.distill import prepare_data
from kdbench.errors import ModelNotFoundError
from kdbench.plan import Plan
from kdbench.record import StepLog, read_json

RECORD_FIELDS = ("teacher", "student", "init", "objective", "seed")


def distillation_record(student_path: Path) -> dict:
    """The record of the task-agnostic run that wrote this student (its result.json beside student/)."""
    record = read_json(student_path.parent / "result.json")
    if record is None or record.get("setting") != "task_agnostic":
        return {}
    return {field: record[field] for field in RECORD_FIELDS if field in record} | {
        "setting": "task_agnostic", "stage": "finetune",  # so the task-agnostic tables read it
        "distilled_from": str((student_path.parent / "result.json").resolve())}


def load_student(student_path: Path, num_labels: int):
    try:
        model = AutoModelForSequenceClassification.from_pretrained(str(student_path), num_labels=num_labels,
                                                                   trust_remote_code=False)
        tokenizer = AutoTokenizer.from_pretrained(str(student_path), trust_remote_code=False)
    except (OSError, ValueError) as exc:
        raise ModelNotFoundError(
            f"cannot load a distilled student from {student_path} ({type(exc).__name__}): give the student/ folder "
            "of a task-agnostic run (setting.student_path=.../student)"
        ) from exc
    return model, tokenizer


def run_finetune(cfg: DictConfig, plan: Plan, run_dir: Path, log: StepLog) -> dict:
    trainer = cfg.trainer
    student_path = Path(cfg.setting.student_path).expanduser()
    set_seed(cfg.seed)
    model, tokenizer = load_student(student_path, plan.num_labels)
    model.to(plan.device)
    train_set, eval_sets = prepare_data(cfg, tokenizer)
    train_loader = data.make_loader(train_set, tokenizer, trainer.batch_size, shuffle=True, seed=cfg.seed,
                                    group_by_length=trainer.group_by_length)
    eval_loaders = {suffix: data.make_loader(ds, tokenizer, trainer.eval_batch_size, shuffle=False)
                    for suffix, ds in eval_sets.items()}
    stats = loop.train("finetune", [model], train_loader, trainer.stage2_epochs, trainer.lr,
                       loop.supervised_step(model, plan.device, plan.precision), trainer, log, plan.device)
    start = time.perf_counter()
    metrics = loop.evaluate(model, eval_loaders, cfg.task.metrics, plan.device, plan.precision)
    return {
        "metrics": metrics, "teacher_metrics": {},
        "timing": {"finetune_s": stats["seconds"], "finetune_examples_per_s": stats["examples_per_s"],
                   "eval_s": time.perf_counter() - start},
        "grid": {"lr": trainer.lr, "batch_size": trainer.batch_size},
        "student_path": str(student_path),
        **distillation_record(student_path),
    }
