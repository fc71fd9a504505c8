"""GLUE fine-tuning of a distilled student: the task-agnostic setting's evaluation protocol.

Each grid point (learning rate x batch size, `+experiment=finetune_grid`) is one job; the report
keeps the best dev score per task, as the paper does. A fine-tuning record names the distillation it
came from (`distilled_from`) and carries that run's teacher, student, init, objective and seed, so
it joins the task-agnostic tables.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from transformers import AutoModelForSequenceClassification, AutoTokenizer, set_seed

from kdbench.data.batches import eval_loaders, make_loader
from kdbench.data.glue import task_datasets
from kdbench.models import hub
from kdbench.planning.plan import Plan
from kdbench.records.predictions import PREDICTIONS_FILE
from kdbench.records.record import RESULT_FILE, RunRecord, StepLog, read_json, write_json
from kdbench.training.checkpoint import Checkpoints
from kdbench.training.evaluate import evaluate
from kdbench.training.hooks import Hook, standard_hooks
from kdbench.training.loop import train_stage
from kdbench.training.resume import Resume
from kdbench.training.steps import supervised_step

RECORD_FIELDS = ("teacher", "student", "init", "objective", "seed")
STAGE = "finetune"


def distillation_record(student_path: Path) -> dict:
    """The record of the task-agnostic run that wrote this student (its result.json beside
    student/)."""
    record = RunRecord.read(student_path.parent / RESULT_FILE)
    if record is None or record.setting != "task_agnostic":
        return {}
    named = {field: getattr(record, field) for field in RECORD_FIELDS}
    return {field: value for field, value in named.items() if value is not None} | {
        "setting": "task_agnostic",
        "stage": "finetune",  # so the task-agnostic tables read it
        "distilled_from": str((student_path.parent / "result.json").resolve()),
    }


class BestDevStep(Hook):
    """The dev metrics at the end, and every `every` steps when `every` > 0, keeping those of the
    best first metric (the study's released driver reports the best of evaluations every 50
    steps). The best so far is kept in the file `store`, so a resumed fine-tuning keeps the
    evaluations before it; it comes before the checkpoint hook, so a step's checkpoint follows its
    evaluation. `predictions` (written, kept): the file each evaluation writes its per-example
    predictions to, and where the best evaluation's go."""

    def __init__(
        self,
        score: Callable[[], dict],
        model,
        every: int,
        store: Path,
        predictions: tuple[Path, Path] | None = None,
    ):
        self.score, self.model, self.every, self.store = score, model, every, store
        self.predictions = predictions
        self.metrics: dict | None = None
        self.step: int | None = None
        self.seconds = 0.0  # spent evaluating

    def on_start(self, progress) -> None:
        """A resumed loop reads the best so far; a fresh one drops any an earlier start left."""
        if progress.step == 0:
            self.store.unlink(missing_ok=True)
        kept = read_json(self.store) or {}
        self.metrics, self.step = kept.get("metrics"), kept.get("step")

    def on_step(self, progress) -> None:
        if self.every and progress.step % self.every == 0 and not progress.finished:
            self.consider(progress.step)
            self.model.train()  # evaluation left it in eval mode

    def on_end(self, progress) -> None:
        self.consider(progress.step)

    def consider(self, step: int) -> None:
        start = time.perf_counter()
        metrics = self.score()
        self.seconds += time.perf_counter() - start
        primary = next(iter(metrics))
        if self.metrics is None or metrics[primary] > self.metrics[primary]:
            self.metrics, self.step = metrics, step
            self.store.parent.mkdir(parents=True, exist_ok=True)
            write_json(self.store, {"step": step, "metrics": metrics})
            if self.predictions is not None:
                self.predictions[0].replace(self.predictions[1])
        elif self.predictions is not None:
            self.predictions[0].unlink(missing_ok=True)


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
    store = checkpoints.folder / "best.json"
    best = BestDevStep(score, model, spec.eval_every, store, (written, kept))
    hooks = [best, *standard_hooks(trainer, log, checkpoints)]
    resume = Resume.of(checkpoints, (STAGE,), plan.fingerprint).at(STAGE)
    stats = train_stage(spec, [model], train_loader, step, plan.device, hooks, resume)
    if not trainer.keep_checkpoints:
        checkpoints.clear()
    return {
        "metrics": best.metrics,
        "predictions": PREDICTIONS_FILE,
        "teacher_metrics": {},
        "best_step": best.step,
        "timing": {
            "finetune_s": stats["seconds"] - best.seconds,
            "eval_s": best.seconds,
            "finetune_examples_per_s": stats["examples_per_s"],
        },
        "grid": {"lr": spec.optimizer.lr, "batch_size": spec.batch_size},
        "student_path": str(plan.student_path),
        **distillation_record(plan.student_path),
    }
