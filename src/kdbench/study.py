"""A preset from nothing to tables: `python -m kdbench.study NAME [OVERRIDES ...] [--finetune
OVERRIDE ...]`.

1. distil: the preset's sweep, `python -m kdbench.run -m +experiment=NAME hydra.sweep.dir=DIR
   OVERRIDES`;
2. go on from the saved student of every completed distillation among that sweep's jobs, each in
   its own sweep dir, DIR/<step>/<its job folder>: a task-agnostic preset's students are fine-tuned
   on the grid of the preset `NAME_finetune` (step `finetune`); a preset with a `chain` block
   ({next: PRESET, student_as: teacher | init}) hands each student to PRESET instead, as its
   teacher (MiniLM's teacher assistant) or as its initialisation (TinyBERT's task-specific
   distillation from its general one), at the student's seed;
3. report: `python -m kdbench.report DIR --out results/NAME --paper`, of the study's jobs alone
   (DIR/study_jobs.txt lists them), when the last step scores on GLUE (a chain that ends in a
   task-agnostic distillation, e.g. minilm_ta, ends by naming where its students are).

Every step is a subprocess, so Hydra's multirun and its launchers (`hydra/launcher=slurm` as an
override) run unchanged. The sweep dirs are fixed (DIR is the preset's `hydra.sweep.dir`, else
multirun/NAME, and holds one study's runs), so a re-run resumes: kdbench.run skips every job,
distillation or grid point, whose record is completed with the same config and the same saved
models. The jobs of each step are those its sweep names (`study_config.job_folders`): other folders
under DIR, of a run with other overrides, are no step's and no table's. OVERRIDES go to the
distillation sweep; those that say where and how jobs run (`study_config.SHARED`) go to the next
step's sweeps too, the corpus to a next step that distils from raw text as well, and `--finetune
OVERRIDE` to the next step's sweeps only (last: it wins). A failing step stops the study with one
line naming the step, and its exit code.
"""

from __future__ import annotations

import argparse
import hashlib
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from kdbench.errors import ConfigError
from kdbench.planning.hydra_config import fail
from kdbench.planning.study_config import (
    STUDENT_AS,
    SWEEP_DIR_KEY,
    Study,
    job_folders,
    make_study,
)
from kdbench.records.record import JOBS_FILE, RESULT_FILE, RunRecord
from kdbench.runtime.joblock import busy_jobs, describe, held_by
from kdbench.runtime.storage import atomic_write_text
from kdbench.training.signals import SIGINT_EXIT, StoppedAtOnce, graceful_stop, stop_requested


def kdbench_run(*args: str) -> list[str]:
    return [sys.executable, "-m", "kdbench.run", "-m", *args]


def quoted(path: Path) -> str:
    """A path as one override value: job folders hold `=` and `,`, which Hydra's grammar reads as
    syntax."""
    return "'" + str(path).replace("'", "\\'") + "'"


def distill_args(study: Study) -> list[str]:
    return [
        f"+experiment={study.name}",
        f"{SWEEP_DIR_KEY}={quoted(study.sweep_dir)}",
        *study.overrides,
    ]


def distill_command(study: Study) -> list[str]:
    return kdbench_run(*distill_args(study))


def sweep_jobs(cfg, sweep_dir: Path, args: list[str]) -> list[Path]:
    return [sweep_dir / name for name in job_folders(cfg, args)]


def completed_students(study: Study) -> dict[Path, int]:
    """The saved students (`student/`, beside result.json) of the completed task-agnostic
    distillations among the distillation sweep's jobs, in job order, with their seeds. Folders of
    other sweeps under the sweep dir (an earlier run with other overrides, the chained step's own
    students) are not among them."""
    students = {}
    for job in sweep_jobs(study.cfg, study.sweep_dir, distill_args(study)):
        record = RunRecord.read(job / RESULT_FILE)
        if (
            record
            and record.status == "completed"
            and record.setting == "task_agnostic"
            and record.task is None
            and (job / "student" / "config.json").is_file()
        ):
            students[job / "student"] = record.seed
    return students


def finetune_dir(study: Study, student: Path) -> Path:
    """A student's next sweep dir: DIR/<step>/<the distillation's job folder below DIR>."""
    return study.sweep_dir / study.step / student.parent.relative_to(study.sweep_dir)


def finetune_args(study: Study, student: Path, seed: int) -> list[str]:
    """The next step's sweep of one student. A chained distillation runs at its student's seed, so
    the chain's records pair by seed; a fine-tuning record carries its distillation's seed."""
    # The absolute student path keeps the next jobs' configs, and so their resume check, independent
    # of the cwd.
    return [
        f"+experiment={study.next}",
        f"{SWEEP_DIR_KEY}={quoted(finetune_dir(study, student))}",
        f"{STUDENT_AS[study.student_as]}={quoted(student.resolve())}",
        *([] if study.student_as == "finetune" else [f"seed={seed}"]),
        *study.finetune_overrides,
    ]


def finetune_command(study: Study, student: Path, seed: int) -> list[str]:
    return kdbench_run(*finetune_args(study, student, seed))


def study_jobs(study: Study, students: dict[Path, int]) -> list[Path]:
    """Every job folder of the study's sweeps: the distillations, then each student's next step."""
    jobs = sweep_jobs(study.cfg, study.sweep_dir, distill_args(study))
    for student, seed in students.items():
        args = finetune_args(study, student, seed)
        jobs += sweep_jobs(study.next_cfg, finetune_dir(study, student), args)
    return jobs


def report_command(study: Study) -> list[str]:
    return [
        sys.executable,
        "-m",
        "kdbench.report",
        str(study.sweep_dir),
        "--out",
        str(study.out),
        "--paper",
    ]


def write_jobs(study: Study, students: dict[Path, int]) -> None:
    """The study's jobs, for its report: one folder a line, relative to the sweep dir."""
    lines = [job.relative_to(study.sweep_dir).as_posix() for job in study_jobs(study, students)]
    atomic_write_text(study.sweep_dir / JOBS_FILE, "\n".join(lines) + "\n")


def run_child(command: list[str]) -> tuple[int, bool]:
    """Runs `command` in the foreground; returns its exit code and whether a stop signal came
    meanwhile. A stop signal (SIGTERM, SIGUSR1, a first Ctrl-C) is passed on to it as SIGTERM, so it
    stops cleanly; a second Ctrl-C ends it at once."""
    child: list[subprocess.Popen] = []

    def pass_on() -> None:
        if child and child[0].poll() is None:
            child[0].send_signal(signal.SIGTERM)

    with graceful_stop(pass_on):
        child.append(subprocess.Popen(command))
        if stop_requested():  # a signal before the child existed
            pass_on()
        try:
            return child[0].wait(), stop_requested()
        except BaseException:
            child[0].kill()
            child[0].wait()
            raise


def run_step(label: str, command: list[str]) -> None:
    """Run one step in the foreground (its output is the user's); a failure ends the study with one
    line, a stop signal with one line once the step has stopped cleanly."""
    print(f"kdbench.study: {label}: {shlex.join(command)}", flush=True)
    code, stopped = run_child(command)
    if stopped:
        print(
            f"kdbench.study: stopped by a signal in step '{label}'; re-run the same command to "
            "resume: finished jobs are skipped",
            file=sys.stderr,
            flush=True,
        )
        raise SystemExit(code)
    if code:
        fail(
            f"study step '{label}' failed (exit code {code}); fix it and re-run the study: "
            f"finished jobs are skipped. The command: {shlex.join(command)}",
            code if code > 0 else 1,  # < 0: killed by a signal
        )


DESIGN_FILE = "DESIGN.md"  # a study's pre-registered design, beside its report


def design_line(study: Study) -> str:
    """What the study's pre-registered design is: the file and its hash, or a note that there is
    none."""
    design = study.out / DESIGN_FILE
    if design.is_file():
        digest = hashlib.sha256(design.read_bytes()).hexdigest()[:12]
        return (
            f"kdbench.study: pre-registered design: {design} (sha256 {digest}); it stays as "
            "committed: changes after the run go to the README, dated, with why"
        )
    return (
        f"kdbench.study: no pre-registered design at {design}: a study that decides a question "
        "writes its question, design and power computation there and commits it before the first "
        "job (docs/studies.md)"
    )


STUDY_MARK = ".kdbench-study"  # in a sweep dir: the name of the study whose runs it holds


def own_sweep_dir(study: Study) -> None:
    """Marks the sweep dir as this study's. One another study marked is refused: the two studies'
    jobs share folder names (the preset is not in them), so each would re-run the other's completed
    jobs in place with its own config."""
    mark = study.sweep_dir / STUDY_MARK
    other = mark.read_text().strip() if mark.is_file() else None
    if other is not None and other != study.name:
        fail(
            f"{study.sweep_dir} holds the runs of the study {other}: give the study "
            f"{study.name} a sweep dir of its own ({SWEEP_DIR_KEY}=DIR)"
        )
    if other is None:
        study.sweep_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(mark, f"{study.name}\n")


def run_study(study: Study) -> None:
    print(design_line(study), flush=True)
    own_sweep_dir(study)
    run_step(f"distil ({study.sweep_dir})", distill_command(study))
    students = completed_students(study) if study.finetunes else {}
    if study.finetunes and not students:
        fail(
            f"study step '{study.step}' found no completed distillation with a saved student "
            f"among the jobs of the distillation sweep under {study.sweep_dir}",
            1,
        )
    for i, (student, seed) in enumerate(students.items(), 1):
        run_step(
            f"{study.step} {i}/{len(students)} ({finetune_dir(study, student)})",
            finetune_command(study, student, seed),
        )
    # Task-agnostic distillations only: held-out losses, no GLUE score to tabulate.
    if not study.reports:
        print(
            f"kdbench.study: {study.name} done: its students are the student/ folders under "
            f"{study.sweep_dir}; fine-tune them with python -m kdbench.run -m "
            "+experiment=finetune_grid setting.student_path=DIR",
            flush=True,
        )
        return
    write_jobs(study, students)
    run_step(f"report ({study.out})", report_command(study))
    # The same study started elsewhere on this folder still runs them.
    if busy := busy_jobs(study.sweep_dir):
        print(
            f"kdbench.study: {len(busy)} job(s) under {study.sweep_dir} are being run by another "
            f"process ({busy[0]}: {describe(held_by(busy[0]) or {})}); the report leaves them "
            "out: run the same command again once they finish",
            flush=True,
        )
        return
    print(f"kdbench.study: {study.name} done: {study.out / 'tables.md'}", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m kdbench.study", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("name", help="an experiment preset (conf/experiment/NAME.yaml)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of the distillation sweep")
    parser.add_argument(
        "--finetune",
        action="append",
        default=[],
        metavar="OVERRIDE",
        help="a Hydra override of the next step's sweeps only (repeatable)",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="the report's folder (default results/NAME)"
    )
    args = parser.parse_intermixed_args(sys.argv[1:] if argv is None else argv)
    try:
        study = make_study(args.name, args.overrides, args.finetune, args.out)
    except ConfigError as exc:
        fail(str(exc))
    try:
        run_study(study)
    except StoppedAtOnce:
        print(
            "kdbench.study: stopped at once by a second Ctrl-C; re-run the same command to resume: "
            "finished jobs are skipped",
            file=sys.stderr,
        )
        raise SystemExit(SIGINT_EXIT) from None


if __name__ == "__main__":
    main()
