"""A preset from nothing to tables: `python -m kdbench.study NAME [OVERRIDES ...] [--finetune
OVERRIDE ...]`.

1. distil: the preset's sweep, `python -m kdbench.run -m +experiment=NAME hydra.sweep.dir=DIR
   OVERRIDES`;
2. go on from every saved student of a completed distillation under DIR, each in its own sweep dir,
   DIR/<step>/<its job folder>: a task-agnostic preset's students are fine-tuned on the grid of the
   preset `NAME_finetune` (step `finetune`); a preset with a `chain` block ({next: PRESET,
   student_as: teacher | init}) hands each student to PRESET instead, as its teacher (MiniLM's
   teacher assistant) or as its initialisation (TinyBERT's task-specific distillation from its
   general one);
3. report: `python -m kdbench.report DIR --out results/NAME --paper`, when the last step scores on
   GLUE (a chain
   that ends in a task-agnostic distillation, e.g. minilm_ta, ends by naming where its students
   are).

Every step is a subprocess, so Hydra's multirun and its launchers (`hydra/launcher=slurm` as an
override) run unchanged. The sweep dirs are fixed (DIR is the preset's `hydra.sweep.dir`, else
multirun/NAME), so a re-run resumes: kdbench.run skips every job, distillation or grid point, whose
record is completed with the same config. OVERRIDES go to the distillation sweep; those that say
where and how jobs run (`SHARED`) go to the fine-tuning sweeps too, and `--finetune OVERRIDE` to the
fine-tuning sweeps only (last: it wins). A failing step stops the study with one line naming the
step, and its exit code.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from kdbench.errors import ConfigError
from kdbench.hydra_config import compose, fail, group_options, one_line, sweep_point
from kdbench.joblock import busy_jobs, describe, held_by
from kdbench.record import RESULT_FILE, RunRecord
from kdbench.training.signals import SIGINT_EXIT, StoppedAtOnce, graceful_stop, stop_requested

FINETUNE_SUFFIX = (
    "_finetune"  # the fine-tuning grid of a task-agnostic preset NAME is the preset NAME_finetune
)
# Override keys (and their sub-keys) about where and how a job runs: the same for distilling and
# fine-tuning.
SHARED = (
    "hydra/launcher",
    "hydra.launcher",
    "data.glue_dir",
    "paths.cache_dir",
    "trainer.device",
    "trainer.precision",
    "trainer.tf32",
    "trainer.num_workers",
    "trainer.progress_bar",
    "logger",
    "kdbench.debug",
)
SWEEP_DIR_KEY = "hydra.sweep.dir"
# How the next preset of a chain takes a saved student: the override that names its folder.
STUDENT_AS = {
    "teacher": "teacher.name_or_path",
    "init": "init.path",
    "finetune": "setting.student_path",
}


@dataclass(frozen=True)
class Study:
    name: str
    setting: str  # the preset's setting: task_specific or task_agnostic
    sweep_dir: Path  # the distillation sweep's; the fine-tuning grids go below it
    overrides: tuple[str, ...]  # the distillation sweep's, less hydra.sweep.dir
    finetune_overrides: tuple[
        str, ...
    ]  # the next step's sweeps': the shared overrides, then --finetune's
    out: Path  # the report's folder
    next: str | None = (
        None  # the preset each saved student goes on to (None: the study ends with the sweep)
    )
    student_as: str = "finetune"  # how it takes the student: a key of STUDENT_AS
    reports: bool = (
        True  # the last step scores on GLUE (a chain ending in a distillation leaves students only)
    )

    @property
    def finetunes(self) -> bool:
        return self.next is not None

    @property
    def step(self) -> str:
        """The next step's name, and its folder below the sweep dir."""
        return "finetune" if self.student_as == "finetune" else self.next


def override_key(token: str) -> str:
    return token.split("=", 1)[0].lstrip("+~")


def shared(overrides: list[str]) -> list[str]:
    """The overrides that say where and how jobs run (`SHARED`), which the fine-tuning sweeps take
    too."""
    return [
        token
        for token in overrides
        if any(
            override_key(token) == key or override_key(token).startswith(f"{key}.")
            for key in SHARED
        )
    ]


def sweep_dir_of(name: str, overrides: list[str], preset_dir: str | None) -> Path:
    """The distillation sweep's folder: the command line's hydra.sweep.dir, else the preset's when
    it is a fixed path (a re-run must find it again: not `${now:...}`), else multirun/NAME."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    given = [token for token in overrides if override_key(token) == SWEEP_DIR_KEY]
    if given:  # parsed as Hydra does: a quoted path loses its quotes
        return Path(str(OverridesParser.create().parse_overrides(given[-1:])[0].value()))
    if preset_dir and "${" not in preset_dir:
        return Path(preset_dir)
    return Path("multirun") / name


def preset(name: str, overrides: list[str]):
    """The preset composed with the overrides (each sweep at its first value), with its `hydra`
    node; bad input is a ConfigError of one line."""
    if name not in group_options("experiment"):
        raise ConfigError(
            f"unknown experiment {name!r}; valid experiment options: "
            f"{', '.join(group_options('experiment'))}"
        )
    points = sweep_point(overrides)
    try:
        return compose([f"+experiment={name}", *points], hydra_config=True)
    except Exception as exc:
        raise ConfigError(f"experiment {name}: {one_line(exc)}") from None


def make_study(
    name: str, overrides: list[str], finetune_overrides: list[str], out: Path | None = None
) -> Study:
    """Check the preset, its overrides and (task-agnostic) its fine-tuning preset before any step
    runs."""
    cfg = preset(name, overrides)
    setting = cfg.setting.name
    if setting == "finetune":
        base = name.removesuffix(FINETUNE_SUFFIX)
        how = (
            f"run the study of {base}"
            if base != name
            else (
                "run it on a student with python -m kdbench.run "
                f"-m +experiment={name} setting.student_path=DIR"
            )
        )
        raise ConfigError(
            f"experiment {name} is a fine-tuning grid (setting=finetune), not a study: {how}"
        )
    sweep_dir = sweep_dir_of(
        name, overrides, OmegaConf.to_container(cfg.hydra.sweep, resolve=False).get("dir")
    )
    forwarded = shared(overrides) + list(finetune_overrides)
    next_preset, student_as = next_step(name, cfg)
    last_setting = setting
    if next_preset is not None:
        last_setting = preset(next_preset, forwarded).setting.name
    elif finetune_overrides:
        raise ConfigError(
            f"--finetune {finetune_overrides[0]}: experiment {name} is {setting}, its study "
            "fine-tunes "
            "no student"
        )
    return Study(
        name,
        setting,
        sweep_dir,
        tuple(t for t in overrides if override_key(t) != SWEEP_DIR_KEY),
        tuple(forwarded),
        out if out is not None else Path("results") / name,
        next_preset,
        student_as,
        reports=last_setting != "task_agnostic",
    )


def next_step(name: str, cfg) -> tuple[str | None, str]:
    """The preset the saved students go on to and how it takes them: the `chain` block's, else
    (task-agnostic) the fine-tuning grid NAME_finetune, else none."""
    chain = cfg.get("chain")
    if chain is not None:
        if chain.get("student_as") not in STUDENT_AS or chain.get("next") not in group_options(
            "experiment"
        ):
            raise ConfigError(
                f"experiment {name}: chain needs next (an experiment preset) and student_as (one "
                "of "
                f"{', '.join(STUDENT_AS)}), has {OmegaConf.to_container(chain)}"
            )
        return chain.next, chain.student_as
    if cfg.setting.name != "task_agnostic":
        return None, "finetune"
    finetune = name + FINETUNE_SUFFIX
    if finetune not in group_options("experiment"):
        raise ConfigError(
            f"experiment {name} is task-agnostic: its students' fine-tuning grid is the preset "
            f"conf/experiment/{finetune}.yaml, which is missing"
        )
    return finetune, "finetune"


# ------------------------------------------------------------------------------------------------
# the steps


def kdbench_run(*args: str) -> list[str]:
    return [sys.executable, "-m", "kdbench.run", "-m", *args]


def quoted(path: Path) -> str:
    """A path as one override value: job folders hold `=` and `,`, which Hydra's grammar reads as
    syntax."""
    return "'" + str(path).replace("'", "\\'") + "'"


def distill_command(study: Study) -> list[str]:
    return kdbench_run(
        f"+experiment={study.name}", f"{SWEEP_DIR_KEY}={quoted(study.sweep_dir)}", *study.overrides
    )


def completed_students(sweep_dir: Path) -> list[Path]:
    """The saved students of the completed task-agnostic distillations under `sweep_dir` (their
    `student/` folders, written next to result.json), in path order; fine-tuning records (which have
    a task) are not."""
    students = []
    for path in sorted(sweep_dir.rglob(RESULT_FILE)):
        record = RunRecord.read(path)
        if (
            record
            and record.status == "completed"
            and record.setting == "task_agnostic"
            and record.task is None
            and (path.parent / "student" / "config.json").is_file()
        ):
            students.append(path.parent / "student")
    return students


def finetune_dir(study: Study, student: Path) -> Path:
    """A student's next sweep dir: DIR/<step>/<the distillation's job folder below DIR>."""
    return study.sweep_dir / study.step / student.parent.relative_to(study.sweep_dir)


def finetune_command(study: Study, student: Path) -> list[str]:
    # The absolute student path keeps the next jobs' configs, and so their resume check, independent
    # of the cwd.
    return kdbench_run(
        f"+experiment={study.next}",
        f"{SWEEP_DIR_KEY}={quoted(finetune_dir(study, student))}",
        f"{STUDENT_AS[study.student_as]}={quoted(student.resolve())}",
        *study.finetune_overrides,
    )


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
            "resume: finished "
            "jobs are skipped",
            file=sys.stderr,
            flush=True,
        )
        raise SystemExit(code)
    if code:
        fail(
            f"study step '{label}' failed (exit code {code}); fix it and re-run the study: "
            "finished jobs are "
            f"skipped. The command: {shlex.join(command)}",
            code if code > 0 else 1,
        )  # < 0: killed by a signal


def run_study(study: Study) -> None:
    run_step(f"distil ({study.sweep_dir})", distill_command(study))
    if study.finetunes:
        students = completed_students(study.sweep_dir)
        if not students:
            fail(
                f"study step '{study.step}' found no completed distillation with a saved student "
                "under "
                f"{study.sweep_dir}",
                1,
            )
        for i, student in enumerate(students, 1):
            run_step(
                f"{study.step} {i}/{len(students)} ({finetune_dir(study, student)})",
                finetune_command(study, student),
            )
    if (
        not study.reports
    ):  # task-agnostic distillations only: held-out losses, no GLUE score to tabulate
        print(
            f"kdbench.study: {study.name} done: its students are the student/ folders under "
            f"{study.sweep_dir}; "
            "fine-tune them with python -m kdbench.run -m +experiment=finetune_grid "
            "setting.student_path=DIR",
            flush=True,
        )
        return
    run_step(f"report ({study.out})", report_command(study))
    if busy := busy_jobs(
        study.sweep_dir
    ):  # the same study started elsewhere on this folder still runs them
        print(
            f"kdbench.study: {len(busy)} job(s) under {study.sweep_dir} are being run by another "
            "process "
            f"({busy[0]}: {describe(held_by(busy[0]) or {})}); the report leaves them out: run the "
            "same command "
            "again once they finish",
            flush=True,
        )
        return
    print(f"kdbench.study: {study.name} done: {study.out / 'tables.md'}", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m kdbench.study", description=__doc__.splitlines()[0]
    )
    parser.add_argument("name", help="an experiment preset (conf/experiment/NAME.yaml)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of the distillation sweep")
    parser.add_argument(
        "--finetune",
        action="append",
        default=[],
        metavar="OVERRIDE",
        help="a Hydra override of the fine-tuning sweeps only (repeatable)",
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
            "finished jobs "
            "are skipped",
            file=sys.stderr,
        )
        raise SystemExit(SIGINT_EXIT) from None


if __name__ == "__main__":
    main()
