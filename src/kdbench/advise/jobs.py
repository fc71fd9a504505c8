"""The advice's steps as kdbench sweeps (`python -m kdbench.run -m`, so launchers and resuming work
as for any study), each a folder below advise.out, and what the calibration measured.

- calibration/: one job per objective of the cells, on `CAL_EXAMPLES` examples, one epoch of each
  stage (and of the teacher's fine-tuning, unless it is ready), from a random init;
- teacher/: the full run's teacher fine-tuned on the whole training set, into kdbench's cache
  (both stages skipped), when it is not given or cached;
- pilot/: per init, the cells' sweep over seeds on the pilot's subset and epochs, every job reading
  that teacher (teacher.finetuned_path);
- final/: the answer on the whole training set, its student saved and its cost measured.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

from kdbench.advise.design import Calibration
from kdbench.advise.inputs import Inputs
from kdbench.planning.hydra_config import fail
from kdbench.planning.study_config import override_key
from kdbench.planning.trainer_specs import kept_on_disk
from kdbench.records.record import RESULT_FILE, RunRecord
from kdbench.study import kdbench_run, quoted, run_child

CAL_EXAMPLES = 200
CALIBRATION, TEACHER, PILOT, FINAL, REPORT = "calibration", "teacher", "pilot", "final", "report"
LEDGER = "ledger.jsonl"  # each step's wall time, a line a step, and the design's registration
REGISTERED = "design"
QUIET = ("measure_cost=false", "save_student=false")
TRAINED = ("teacher_finetune_s", "intermediate_s", "prediction_s")
TABLES = ("features_table_s", "logits_table_s")


def stage_epochs(first: int, second: int) -> list[str]:
    return [
        f"stages.intermediate.epochs={first}",
        "stages.intermediate.steps=null",
        f"stages.prediction.epochs={second}",
        "stages.prediction.steps=null",
    ]


def sweep(inputs: Inputs, folder: str, *tokens: str) -> list[str]:
    """A sweep of the shared overrides (less those `tokens` set) and `tokens` into `folder`."""
    mine = {override_key(token) for token in tokens}
    shared = [token for token in inputs.overrides if override_key(token) not in mine]
    where = f"hydra.sweep.dir={quoted(inputs.out / folder)}"
    return kdbench_run(*shared, *tokens, where)


def teacher_tokens(inputs: Inputs, path: str | None) -> list[str]:
    return [f"teacher.finetuned_path={quoted(Path(path).resolve())}"] if path else []


def calibration_command(inputs: Inputs) -> list[str]:
    objectives = ",".join(dict.fromkeys(cell.objective for cell in inputs.cells))
    teacher = teacher_tokens(inputs, inputs.teacher_path) or [
        "stages.teacher.epochs=1",
        "stages.teacher.steps=null",
    ]
    examples = min(inputs.scale.examples, CAL_EXAMPLES)
    return sweep(
        inputs,
        CALIBRATION,
        f"objective={objectives}",
        "init=random",
        "seed=1",
        f"data.train_limit={examples}",
        *stage_epochs(1, 1),
        *teacher,
        *QUIET,
    )


def teacher_command(inputs: Inputs) -> list[str]:
    return sweep(inputs, TEACHER, "seed=1", *stage_epochs(0, 0), *QUIET)


def pilot_commands(inputs: Inputs, design: dict, teacher: str, seeds: range) -> list[list[str]]:
    """One sweep per init of the cells, over `seeds`."""
    sizing, scale = design["sizing"], inputs.scale
    first = min(sizing["epochs"], scale.intermediate_epochs)
    second = min(sizing["epochs"], scale.prediction_epochs)
    by_init: dict[str, list[str]] = {}
    for cell in inputs.cells:
        by_init.setdefault(cell.init, []).append(cell.objective)
    return [
        sweep(
            inputs,
            PILOT,
            f"objective={','.join(objectives)}",
            f"init={init}",
            f"seed={','.join(map(str, seeds))}",
            f"data.train_limit={sizing['subset']}",
            *stage_epochs(first, second),
            *teacher_tokens(inputs, teacher),
            *QUIET,
        )
        for init, objectives in by_init.items()
    ]


def final_command(inputs: Inputs, objective: str, init: str) -> list[str]:
    tokens = ("seed=1", "save_student=true", "measure_cost=true")
    return sweep(inputs, FINAL, f"objective={objective}", f"init={init}", *tokens)


def run_step(out: Path, label: str, command: list[str], folder: str) -> float:
    """Runs one step, whose runs go below out/`folder`, in the foreground and adds its wall time to
    the ledger (idle where it finished no run: every job was done); a failure or a stop ends the
    advice with one line (re-running the command resumes: finished jobs are skipped)."""
    print(f"kdbench.advise: {label}: {shlex.join(command)}", flush=True)
    before = finished(out / folder)
    start = time.perf_counter()
    code, stopped = run_child(command)
    idle = not (stopped or code) and finished(out / folder) == before
    seconds = note(out, label, time.perf_counter() - start, idle)
    if stopped or code:
        why = "stopped by a signal" if stopped else f"failed (exit code {code})"
        fail(
            f"advise step '{label}' {why}; re-run the same command to resume: finished jobs are "
            f"skipped. The command: {shlex.join(command)}",
            code if code > 0 else 1,
        )
    return seconds


def finished(folder: Path) -> dict[Path, int]:
    """The completed records below `folder`, each with the time it was written (ns)."""
    return {
        path / RESULT_FILE: (path / RESULT_FILE).stat().st_mtime_ns for path, _ in completed(folder)
    }


def note(out: Path, label: str, seconds: float, idle: bool = False) -> float:
    """Adds a step's wall time to the ledger, marked `idle` where the step did no work the advice
    had not done before (a re-run skipping finished jobs); returns it."""
    entry = {"step": label, "seconds": seconds} | ({"idle": True} if idle else {})
    with (out / LEDGER).open("a") as ledger:
        ledger.write(json.dumps(entry) + "\n")
    return seconds


def report(out: Path) -> None:
    """The report of the pilot (`kdbench.report`, in this process) into out/report."""
    from kdbench.report.cli import main

    arguments = [str(out / PILOT), "--out", str(out / REPORT)]
    print(f"kdbench.advise: report: python -m kdbench.report {shlex.join(arguments)}", flush=True)
    # made before from the same runs (the pilot's are final when it reports): no new work
    again = any(step["step"] == REPORT for step in ledger_entries(out))
    start = time.perf_counter()
    main(arguments)
    note(out, REPORT, time.perf_counter() - start, idle=again)


def register(out: Path, design: Path) -> None:
    """Registers the written design in the ledger before any pilot job: the time it was written
    and its SHA-256, so that a reader checks the text they read is the one fixed before the runs."""
    entry = {
        "step": REGISTERED,
        "written_at": datetime.now(timezone.utc).isoformat(timespec="microseconds"),
        "sha256": hashlib.sha256(design.read_bytes()).hexdigest(),
    }
    with (out / LEDGER).open("a") as ledger:
        ledger.write(json.dumps(entry) + "\n")


def ledger_entries(out: Path) -> list[dict]:
    """The ledger's entries, in the order written."""
    path = out / LEDGER
    lines = path.read_text().splitlines() if path.is_file() else []
    return [json.loads(line) for line in lines if line.strip()]


def ledger_seconds(out: Path, *labels: str) -> float:
    """The ledger's wall time of the steps whose label starts with one of `labels`, less the idle
    ones (re-runs of done work), so that re-running a finished advice leaves it as it was."""
    timed = [step for step in ledger_entries(out) if "seconds" in step and not step.get("idle")]
    return sum(step["seconds"] for step in timed if step["step"].startswith(labels))


def completed(folder: Path) -> list[tuple[Path, RunRecord]]:
    """The completed records below `folder`, with their run folders, in path order."""
    found = []
    for path in sorted(folder.rglob(RESULT_FILE)):
        record = RunRecord.read(path)
        if record is not None and record.status == "completed":
            found.append((path.parent, record))
    return found


def calibration_of(folder: Path, examples: int, elapsed: float) -> Calibration:
    """Seconds per example and epoch (one each) of every stage, per job and per sweep, from the
    calibration's records and its command's wall time `elapsed`."""
    runs = [record for _, record in completed(folder)]
    timing = [record.durations for record in runs]

    def per_example(name: str, record_timing: dict) -> float:
        return float(record_timing.get(name) or 0.0) / examples

    walls = [float(record.wall_s or 0.0) for record in runs]
    fixed = [
        wall - sum(float(t.get(name) or 0.0) for name in TRAINED + TABLES)
        for wall, t in zip(walls, timing, strict=True)
    ]
    return Calibration(
        teacher=max(per_example("teacher_finetune_s", t) for t in timing),
        intermediate={r.objective: per_example("intermediate_s", t) for r, t in zip(runs, timing)},
        prediction=statistics.mean(per_example("prediction_s", t) for t in timing),
        tables={r.objective: per_example("features_table_s", t) for r, t in zip(runs, timing)},
        logits=max(per_example("logits_table_s", t) for t in timing),
        job=max(0.0, statistics.mean(fixed)),
        sweep=max(0.0, elapsed - sum(walls)),
        spent=max(elapsed, sum(walls)),
        tables_each_run=any(not table_on_disk(record) for record in runs),
    )


def table_on_disk(record: RunRecord) -> bool:
    """Whether the run's features table was a disk cache entry that later runs read
    (`trainer.teacher_features_store` on the device it ran on, which names a CPU `cpu: ...`)."""
    store = record.config["trainer"].get("teacher_features_store", "disk")
    device = (record.provenance or {}).get("device", "")
    return kept_on_disk(store, "cpu" if device.startswith("cpu") else "cuda")
