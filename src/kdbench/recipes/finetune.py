"""GLUE fine-tuning of a distilled student: the task-agnostic setting's evaluation protocol.

Each grid point (learning rate x batch size, `+experiment=finetune_grid`) is one job; the report
keeps the best dev score per task, as the paper does. A fine-tuning record names the distillation it
came from (`distilled_from`) and carries that run's teacher, student, init, objective, seed and
resolved config (`distillation_config`), so it joins the task-agnostic tables as its design.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from transformers import AutoModelForSequenceClassification, AutoTokenizer, set_seed

from kdbench.data.batches import eval_loaders, make_loader
from kdbench.data.glue import task_datasets
from kdbench.models import hub
from kdbench.planning.plan import Plan
from kdbench.records.predictions import PREDICTIONS_FILE
from kdbench.records.steplog import StepLog
from kdbench.training.best import BestDev
from kdbench.training.checkpoint import Checkpoints
from kdbench.training.evaluate import evaluate
from kdbench.training.hooks import standard_hooks
from kdbench.training.loop import train_stage
from kdbench.training.resume import Resume
from kdbench.training.steps import supervised_step

STAGE = "finetune"


def task_loaders(plan: Plan, tokenizer) -> tuple:
    """The task's training loader and its evaluation loaders (by split suffix), tokenised with the
    student's tokenizer."""
    trainer, stage = plan.trainer, plan.stages[STAGE]
    train_set, eval_sets = task_datasets(plan.task, plan.data, tokenizer, trainer.max_length)
    train_loader = make_loader(
        train_set,
        tokenizer,
        stage.batch_size,
        shuffle=True,
        seed=plan.seed,
        group_by_length=stage.group_by_length,
        loading=plan.loading,
    )
    dev_loaders = eval_loaders(eval_sets, tokenizer, trainer.eval_batch_size, plan.loading)
    return train_loader, dev_loaders


def run_finetune(plan: Plan, run_dir: Path, log: StepLog) -> dict:
    trainer, spec = plan.trainer, plan.stages[STAGE]
    set_seed(plan.seed)
    saved_as = (
        "a distilled student (setting.student_path: the student/ folder of a task-agnostic run)"
    )
    model = hub.load(
        AutoModelForSequenceClassification,
        plan.student_path,
        saved_as=saved_as,
        num_labels=plan.num_labels,
    ).to(plan.device)
    tokenizer = hub.load(AutoTokenizer, plan.student_path, saved_as=saved_as)
    train_loader, dev_loaders = task_loaders(plan, tokenizer)
    step = supervised_step(model, plan.device, plan.precision)
    written, kept = run_dir / f"latest.{PREDICTIONS_FILE}", run_dir / PREDICTIONS_FILE
    dev = (dev_loaders, plan.task.metrics, plan.device, plan.precision)
    score = partial(evaluate, model, *dev, predictions_to=written)
    checkpoints = Checkpoints(run_dir / "checkpoints", meta={"fingerprint": plan.fingerprint})
    store, logged = checkpoints.folder / "best.pt", (log, f"{STAGE}_dev")
    every = spec.eval_every
    best = BestDev(score, model, store, every=every, predictions=(written, kept), log=logged)
    hooks = standard_hooks(trainer, log, checkpoints, scorer=best)
    resume = Resume.of(checkpoints, (STAGE,), log, plan.fingerprint).at(STAGE)
    stats = train_stage(spec, [model], train_loader, step, plan.device, hooks, resume)
    if not trainer.keep_checkpoints:
        checkpoints.clear()
    return {
        "metrics": best.metrics,
        "predictions": PREDICTIONS_FILE,
        "teacher_metrics": {},
        "scored": best.scored(STAGE),
        "timing": {
            "finetune_s": stats["seconds"] - best.seconds,
            "eval_s": best.seconds,
            "finetune_examples_per_s": stats["examples_per_s"],
        },
        "grid": {"lr": spec.optimizer.lr, "batch_size": spec.batch_size},
        "student_path": str(plan.student_path),
    }
