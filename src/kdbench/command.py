"""What the command line does with a composed config: runs the job (`kdbench.job.run`), prints its
outcome, and ends a failure with one line and its exit code (2 for bad input, 1 for a bug;
`kdbench.debug=true` adds the traceback)."""

from __future__ import annotations

import shutil
import sys
import traceback
from pathlib import Path
from typing import NoReturn

from hydra.core.hydra_config import HydraConfig
from hydra.errors import CompactHydraException
from hydra.types import RunMode
from omegaconf import DictConfig

from kdbench.errors import KdbenchError, missing_package
from kdbench.job import SECOND_CTRL_C, run
from kdbench.metrics import scores_only
from kdbench.planning.hydra_config import one_line
from kdbench.records.card import load_text
from kdbench.records.rates import contended
from kdbench.records.record import RESULT_FILE
from kdbench.runtime import distributed
from kdbench.runtime.joblock import CLAIM, describe
from kdbench.training.signals import SIGINT_EXIT, Interrupted, StoppedAtOnce

INTERNAL_ERROR_EXIT = 1  # bad input exits with KdbenchError.exit_code (2)


class FailedJob(CompactHydraException):
    """A sweep's failed job, its one line: Hydra prints a compact exception without a traceback
    (under submitit_local and SLURM, in the terminal the sweep started in)."""


def run_command(cfg: DictConfig) -> float | None:
    """Run the composed config in its folder (paths.run_dir, else Hydra's) and print the outcome;
    returns the run's score for Hydra's sweepers (None: another process runs the job)."""
    run_dir = cfg.paths.run_dir or HydraConfig.get().runtime.output_dir
    try:
        record = run(cfg, run_dir)
    except Interrupted as exc:  # a clean, resumable stop, not an error; it stops a whole sweep
        print(f"kdbench: {exc}", file=sys.stderr)
        # under submitit: its handler requeues the job (the requeued job resumes) and exits
        exc.hand_over()
        raise SystemExit(exc.exit_code) from None
    except StoppedAtOnce as exc:
        print(
            f"kdbench: {SECOND_CTRL_C} in {exc.phase}: re-run the same command (same run "
            "directory) to resume from the last checkpoint",
            file=sys.stderr,
        )
        raise SystemExit(SIGINT_EXIT) from None
    except Exception as exc:  # bad input is a KdbenchError, or a package not installed
        refuse_or_report(exc, cfg, run_dir)
    score = print_outcome(record, run_dir)
    warn_not_learned(record)
    return score


def refuse_or_report(exc: Exception, cfg: DictConfig, run_dir) -> NoReturn:
    """End a run that raised: bad input (a package not installed among it) as `kdbench: error:`, a
    bug as `kdbench: internal error:` naming the exception and the record."""
    refused = exc if isinstance(exc, KdbenchError) else missing_package(exc)
    if refused is not None:
        discard_refused(cfg, run_dir)
        stop(f"kdbench: error: {refused}", refused, cfg, run_dir)
    stop(
        f"kdbench: internal error: {type(exc).__name__}: {one_line(exc)} (a bug in kdbench, not "
        f"in the input); the record {Path(run_dir) / RESULT_FILE} says failed; re-run with "
        "kdbench.debug=true for the traceback",
        exc,
        cfg,
        run_dir,
    )


def stop(line: str, exc: Exception, cfg: DictConfig, run_dir) -> NoReturn:
    """End a failed job with one line (and the traceback with kdbench.debug=true). In a sweep, Hydra
    records the job as failed, runs the rest, then prints the first failed job's line again and
    exits 1 (`FailedJob`)."""
    if cfg.kdbench.debug is True:
        traceback.print_exc()
    if HydraConfig.get().mode == RunMode.MULTIRUN:
        print(f"{line} [job {run_dir}]", file=sys.stderr)
        raise FailedJob(f"{line} [job {run_dir}]") from None
    print(line, file=sys.stderr)
    raise SystemExit(
        exc.exit_code if isinstance(exc, KdbenchError) else INTERNAL_ERROR_EXIT
    ) from None


def discard_refused(cfg: DictConfig, run_dir) -> None:
    """Remove the folder Hydra made for a single run refused before any work: it holds nothing but
    Hydra's copy of the config and its log, the job's claim and the failed record (no config.json,
    written once the plan is made). A folder the user named (paths.run_dir) and a sweep's job keep
    the record: a sweep's report lists the job as failed."""
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
    elif (record.get("config") or {}).get("measure_cost"):
        print(
            "cost: not measured: measure_cost measures a task-specific run's teacher and student; "
            f"a setting={record['config']['setting']['name']} run measures none"
        )
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
