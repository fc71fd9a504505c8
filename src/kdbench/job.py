"""A run from its composed config to its record: `run(cfg)` claims the job's folder, makes the plan
(bad input fails there, before anything is loaded), runs the setting's recipe under the stop
signals and keeps result.json current (running, then completed, failed or stopped).

The command line (`kdbench.run`, `kdbench.command`) calls it once Hydra has composed the config;
tests call it with a config they compose.
"""

from __future__ import annotations

import importlib
import time
from contextlib import suppress
from dataclasses import replace
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from kdbench import __version__
from kdbench.errors import KdbenchError, missing_package
from kdbench.planning.finetune import distillation_record
from kdbench.planning.paths import saved_models, writable_folder
from kdbench.planning.plan import Plan, make_plan
from kdbench.planning.stage_specs import own_stages
from kdbench.records.record import RESULT_FILE, RunRecord, provenance, write_json
from kdbench.records.steplog import StepLog
from kdbench.report.collapse import learning_warnings
from kdbench.runtime import distributed
from kdbench.runtime.joblock import claim
from kdbench.runtime.loggers import library_progress_bars, run_logs
from kdbench.runtime.precision import apply_matmul_precision
from kdbench.runtime.storage import DiskFullError
from kdbench.training.signals import Interrupted, StoppedAtOnce, graceful_stop


def recipe(setting: str):
    """The recipe of a setting (`kdbench.recipes.<setting>.run_<setting>`), imported when a run of
    it starts: a run refused by its plan never loads the training code."""

    def run_recipe(plan: Plan, run_dir: Path, log: StepLog) -> dict:
        module = importlib.import_module(f"kdbench.recipes.{setting}")
        return getattr(module, f"run_{setting}")(plan, run_dir, log)

    return run_recipe


RECIPES = {setting: recipe(setting) for setting in ("task_specific", "task_agnostic", "finetune")}


def identity(cfg: DictConfig, plan: Plan | None) -> RunRecord:
    """The record of a run about to start: what was run (before the plan exists, as the config
    names it; a fine-tuning as the distillation of its student names it, `distillation_record`)."""
    record = RunRecord(
        setting=cfg.setting.name,
        task=None if cfg.setting.name == "task_agnostic" else cfg.task.name,  # raw text: no task
        teacher=cfg.teacher.name,
        student=cfg.student.name,
        init=plan.init.label if plan is not None else cfg.init.name,
        init_name=cfg.init.name,
        objective=cfg.objective.name,
        seed=cfg.seed,
        kdbench_version=__version__,
        chain=" -> ".join(plan.chain) if plan is not None else None,
    )
    if plan is None or plan.setting != "finetune":
        return record
    made = distillation_record(plan.student_path, plan.student_conf)
    named = {field: value for field, value in made.items() if field in RunRecord.NAMING}
    return replace(record, **named, outcome={k: v for k, v in made.items() if k not in named})


def run(cfg: DictConfig, run_dir: str | Path | None = None) -> dict:
    """Validate, run the configured setting, and write result.json; returns the record.

    The job is claimed first (`kdbench.runtime.joblock`): while another process runs it, this
    returns at once with `status: "claimed"` and writes nothing. Bad input raises KdbenchError
    before any heavy work. A failure is recorded as `status: "failed"` (with the error) before it
    propagates.
    """
    run_dir = writable_folder(run_dir or cfg.paths.run_dir or ".", "paths.run_dir")
    # a task of a multi-task SLURM/submitit job joins its job's group
    distributed.adopt_job_environment()
    with claim(run_dir, distributed.current().rank) as holder:
        if (
            holder is not None
        ):  # another process runs this job now: a sweep started twice splits its jobs
            return {"status": "claimed", "claimed_by": holder, "skipped": True}
        return run_claimed(cfg, run_dir)


def run_claimed(cfg: DictConfig, run_dir: Path) -> dict:
    """`run` once this process holds the job's claim."""
    main_process = distributed.current().is_main  # in a data-parallel launch only rank 0 writes
    resolved = own_stages(OmegaConf.to_container(cfg, resolve=True))  # as its record keeps it
    result_path, inputs = run_dir / RESULT_FILE, saved_models(resolved)
    previous = RunRecord.read(result_path)
    done = previous is not None and previous.status == "completed"
    if done and (previous.config, (previous.provenance or {}).get("inputs")) == (resolved, inputs):
        return previous.as_json() | {"skipped": True}  # a re-run sweep skips finished jobs
    write = writer(main_process)
    try:
        plan = make_plan(cfg)  # bad input fails here, before anything is loaded
    except Exception as exc:
        write(
            result_path,
            replace(identity(cfg, None), status="failed", error=error_text(exc), config=resolved),
        )
        raise
    plan.cache_dir.mkdir(
        parents=True, exist_ok=True, mode=0o700
    )  # caches hold weights: the user's eyes only
    if main_process:
        write_json(run_dir / "config.json", resolved)
    return execute(plan, identity(cfg, plan), run_dir, main_process)


def error_text(exc: BaseException) -> str:
    """How a record states a failure: the message of bad input (a package not installed among it),
    the exception's type and message of a bug."""
    exc = missing_package(exc) or exc
    return str(exc) if isinstance(exc, KdbenchError) else f"{type(exc).__name__}: {exc}"


def writer(main_process: bool):
    """Writes a record in the main process; other data-parallel ranks write nothing."""
    return (
        (lambda path, record: record.write(path)) if main_process else (lambda path, record: None)
    )


def execute(plan: Plan, record: RunRecord, run_dir: Path, main_process: bool) -> dict:
    """Run the plan's recipe under the stop signals, keeping result.json current: running, then
    completed, failed or stopped. Returns the record as result.json holds it."""
    result_path, write = run_dir / RESULT_FILE, writer(main_process)
    record = replace(
        record,
        provenance=provenance(plan.device, distributed.current().size)
        | {"inputs": saved_models(plan.config)},
        precision=plan.precision,
        precision_reason=plan.precision_reason,
        tf32=plan.tf32,
    )  # as resolved for the device
    apply_matmul_precision(plan.device, plan.tf32)
    write(result_path, replace(record, config=plan.config))
    start = time.perf_counter()
    try:
        with run_logs(plan.logger, plan.config, run_dir, main_process) as (log, logger):
            with graceful_stop(), library_progress_bars(plan.trainer.progress_bar):
                outcome = RECIPES[plan.setting](plan, run_dir, log)
            record = replace(
                record.completed(outcome, time.perf_counter() - start, plan.config),
                warnings=learning_warnings(outcome),
            )
            write(result_path, record)
            if logger:
                logger.summary(record)
    except BaseException as exc:
        record = replace(
            record, **ending(exc), wall_s=time.perf_counter() - start, config=plan.config
        )
        with suppress(
            DiskFullError
        ):  # a full disk keeps the last record written: the error is raised below
            write(result_path, record)
        raise
    finally:
        distributed.shutdown()
    return record.as_json()


def ending(exc: BaseException) -> dict:
    """The record's status and error for a run that did not complete: stopped (by a signal, and in
    which phase) or failed."""
    if isinstance(exc, Interrupted):
        return {"status": "stopped", "stopped_in": exc.phase, "error": error_text(exc)}
    if isinstance(exc, StoppedAtOnce):
        return {"status": "stopped", "stopped_in": exc.phase, "error": SECOND_CTRL_C}
    return {"status": "failed", "error": error_text(exc)}


SECOND_CTRL_C = "stopped at once by a second Ctrl-C (no checkpoint of this moment)"
