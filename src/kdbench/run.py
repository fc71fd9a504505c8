"""Entry point: `python -m kdbench.run objective=att_kl+val_kl student=6x384 ...`.

`run(cfg)` is a plain function (tests call it with a composed config); `main` is the thin Hydra
wrapper.
"""

from __future__ import annotations

import shutil
import sys
import time
import traceback
from contextlib import suppress
from dataclasses import replace
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from kdbench import __version__
from kdbench.errors import KdbenchError, missing_package
from kdbench.measure.cost import contended
from kdbench.metrics import scores_only
from kdbench.planning.hydra_config import check_overrides, config_dir, one_line, register_resolvers
from kdbench.planning.plan import Plan, make_plan, writable_folder
from kdbench.planning.stage_specs import own_stages
from kdbench.recipes.finetune import run_finetune
from kdbench.recipes.task_agnostic import run_task_agnostic
from kdbench.recipes.task_specific import run_task_specific
from kdbench.records.card import load_text
from kdbench.records.record import RESULT_FILE, RunRecord, StepLog, provenance, write_json
from kdbench.report.collapse import learning_warnings
from kdbench.runtime import distributed
from kdbench.runtime.joblock import CLAIM, claim, describe
from kdbench.runtime.loggers import library_progress_bars, make_logger
from kdbench.runtime.precision import apply_matmul_precision
from kdbench.runtime.storage import DiskFullError
from kdbench.training.signals import SIGINT_EXIT, Interrupted, StoppedAtOnce, graceful_stop

RECIPES = {
    "task_specific": run_task_specific,
    "task_agnostic": run_task_agnostic,
    "finetune": run_finetune,
}
# the sweep's job-folder resolver must exist wherever a job is resolved (submitit children too)
register_resolvers()


def identity(cfg: DictConfig, plan: Plan | None) -> RunRecord:
    """The record of a run about to start: what was run (before the plan exists, as the config
    names it)."""
    return RunRecord(
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
    result_path = run_dir / RESULT_FILE
    previous = RunRecord.read(result_path)
    if previous and previous.status == "completed" and previous.config == resolved:
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
        provenance=provenance(plan.device, distributed.current().size),
        precision=plan.precision,
        precision_reason=plan.precision_reason,
        tf32=plan.tf32,
    )  # as resolved for the device
    apply_matmul_precision(plan.device, plan.tf32)
    write(result_path, replace(record, config=plan.config))
    logger = make_logger(plan.logger, plan.config, run_dir) if main_process else None
    log = StepLog(
        run_dir / "train_log.jsonl" if main_process else None, sinks=[logger.log] if logger else []
    )
    start = time.perf_counter()
    try:
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
        log.close()
        if logger:
            logger.finish()
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
INTERNAL_ERROR_EXIT = 1  # bad input exits with KdbenchError.exit_code (2)


def stop(line: str, exc: Exception, cfg: DictConfig, run_dir) -> None:
    """End a failed job with one line (and the traceback with kdbench.debug=true). In a sweep, Hydra
    records the job as failed, runs the rest, then exits non-zero."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if cfg.kdbench.debug is True:
        traceback.print_exc()
    if HydraConfig.get().mode == RunMode.MULTIRUN:
        print(f"{line} [job {run_dir}]", file=sys.stderr)
        raise exc
    print(line, file=sys.stderr)
    raise SystemExit(
        exc.exit_code if isinstance(exc, KdbenchError) else INTERNAL_ERROR_EXIT
    ) from None


def discard_refused(cfg: DictConfig, run_dir) -> None:
    """Remove the folder Hydra made for a single run refused before any work: it holds nothing but
    Hydra's copy of the config and its log, the job's claim and the failed record (no config.json,
    written once the plan is made). A folder the user named (paths.run_dir) and a sweep's job keep
    the record: a sweep's report lists the job as failed."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hydra_cfg = HydraConfig.get()
    if cfg.paths.run_dir or hydra_cfg.mode != RunMode.RUN:
        return
    folder = Path(run_dir).absolute()
    written = {hydra_cfg.output_subdir, f"{hydra_cfg.job.name}.log", RESULT_FILE}
    if any(p.name not in written and not p.name.startswith(CLAIM) for p in folder.iterdir()):
        return
    shutil.rmtree(folder)
    for parent in folder.parents:  # Hydra's dated folders, up to the working directory
        if not parent.is_relative_to(Path.cwd()) or parent == Path.cwd() or any(parent.iterdir()):
            break
        parent.rmdir()


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="config")
def _hydra_main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    run_dir = cfg.paths.run_dir or HydraConfig.get().runtime.output_dir
    try:
        record = run(cfg, run_dir)
    except (
        Interrupted
    ) as exc:  # a clean, resumable stop, not an error; in a sweep it stops the whole sweep
        print(f"kdbench: {exc}", file=sys.stderr)
        # under submitit: its handler requeues the job (the requeued job resumes) and exits
        exc.hand_over()
        raise SystemExit(exc.exit_code) from None
    except StoppedAtOnce as exc:
        print(
            f"kdbench: {SECOND_CTRL_C} in {exc.phase}: re-run the same command (same run "
            "directory) to "
            "resume from the last checkpoint",
            file=sys.stderr,
        )
        raise SystemExit(SIGINT_EXIT) from None
    except KdbenchError as exc:
        discard_refused(cfg, run_dir)
        stop(f"kdbench: error: {exc}", exc, cfg, run_dir)
    except Exception as exc:  # a bug, or a package not installed: bad input is a KdbenchError
        if (missing := missing_package(exc)) is not None:
            discard_refused(cfg, run_dir)
            stop(f"kdbench: error: {missing}", missing, cfg, run_dir)
        else:
            stop(
                f"kdbench: internal error: {type(exc).__name__}: {one_line(exc)} (a bug in "
                f"kdbench, not in the input); the record {Path(run_dir) / RESULT_FILE} says "
                "failed; re-run with kdbench.debug=true for the traceback",
                exc,
                cfg,
                run_dir,
            )
    score = print_outcome(record, run_dir)
    warn_not_learned(record)
    return score


def warn_not_learned(record: dict) -> None:
    """Closes a run whose teacher or student has not learned (its record's warnings) with a line
    each, on the main process."""
    for warning in record.get("warnings") or [] if distributed.current().is_main else []:
        print(f"kdbench: warning: {warning}", file=sys.stderr)


def print_outcome(record: dict, run_dir) -> float | None:
    """Prints what the run came to (skipped, already completed, or the teacher's and student's
    scores, on the main process) and returns its score (None: another process runs it)."""
    if record.get("status") == "claimed":
        print(f"skipped: {run_dir} is being run by {describe(record['claimed_by'])}")
        return None
    if record.get("skipped"):
        print(f"already completed with the same config: {Path(run_dir) / RESULT_FILE}")
        return record["score"]
    if not distributed.current().is_main:
        return record["score"]
    teacher = scores_text(record["teacher_metrics"]) or "pre-trained"
    print(
        f"teacher ({record['teacher']}): {teacher}\nstudent ({record['student']}, "
        f"{record['objective']}, init {record['init']}): {scores_text(record['metrics'])}"
    )
    if record.get("cost"):
        print(cost_text(record["cost"]))
    print(f"record: {Path(run_dir) / RESULT_FILE}")
    return record["score"]


def scores_text(metrics: dict) -> str:
    """Scores on the record's scale (x100) to two decimals: "pearson 3.31, spearman 0.03"."""
    return ", ".join(f"{name} {value:.2f}" for name, value in scores_only(metrics).items())


def cost_text(cost: dict) -> str:
    """The student's cost beside its teacher's (`measure_cost`): size, FLOPs and speed-ups, and the
    load they were timed under."""
    student = cost["student"]
    caveat = ": other work competed for the cores, unreliable" if contended(cost) else ""
    return (
        f"cost: the student has {student['params']:,} parameters "
        f"({100 * cost['params_fraction']:.0f}% of the teacher's), "
        f"{student['flops_per_example']:.3g} FLOPs per example "
        f"({100 * cost['flops_fraction']:.0f}%); {cost['speedup_latency']:.2f}x as fast at "
        f"batch 1, {cost['speedup_throughput']:.2f}x at batch 32, timed on "
        f"{cost['device']}{load_text(cost)}{caveat}"
    )


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    check_overrides(argv)
    _hydra_main()


if __name__ == "__main__":
    main()
