"""Finding and parsing ``result.json`` records; what is not a usable completed run becomes an
exclusion."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from kdbench.errors import ReportError
from kdbench.records.record import (
    COMPLETED_FIELDS,
    KEY_FIELDS,
    RESULT_FILE,
    SCHEMA_VERSION,
    RunRecord,
    design,
)
from kdbench.report.collapse import UNKNOWN, collapse_status
from kdbench.report.frames import COST_FIELDS, exclusion, key_text
from kdbench.report.jobs import (
    claim_state,
    multirun_jobs,
    of_design,
    of_jobs,
    study_jobs,
    unrecorded,
)


@dataclass
class Loaded:
    """What :func:`load_records` found: completed records, exclusions, and how many files were
    read."""

    records: list[dict]
    excluded: list[dict]
    n_files: int


def find_result_files(results_dir: Path, skip: Path | None = None) -> list[Path]:
    """All ``result.json`` files under ``results_dir`` (sorted), ignoring anything under
    ``skip``."""
    files = []
    for path in sorted(results_dir.rglob(RESULT_FILE)):
        if not path.is_file():
            continue
        if skip is not None and path.resolve().is_relative_to(skip.resolve()):
            continue
        files.append(path)
    return files


def _as_int(value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
        return int(value)
    return None


def _as_float(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _flatten(metrics: dict, prefix: str = "") -> dict:
    """Nested metric dicts flattened to ``outer.inner`` names."""
    flat = {}
    for name, value in metrics.items():
        key = f"{prefix}{name}"
        if isinstance(value, dict):
            flat.update(_flatten(value, prefix=f"{key}."))
        else:
            flat[key] = value
    return flat


def _last_line(text: str, limit: int = 300) -> str:
    """The most informative single line of an error message (the last non-empty one of a
    traceback)."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    line = lines[-1] if lines else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def parse_record(path: Path, root: Path) -> tuple[dict | None, dict | None]:
    """One ``result.json`` -> (record, None) when completed and well formed, else (None,
    exclusion)."""
    rel = _relative(path, root)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        return None, exclusion(rel, "skipped", f"invalid JSON: {exc}")
    except (OSError, UnicodeDecodeError) as exc:
        return None, exclusion(rel, "skipped", f"unreadable: {exc}")
    record, excluded = parse_data(data, rel)
    return record, None if excluded is None else claim_state(excluded, path.parent)


def parse_data(data, rel: str) -> tuple[dict | None, dict | None]:
    """One record's JSON value (``rel`` names where it is) -> (record, None) or (None,
    exclusion)."""
    if not isinstance(data, dict):
        return None, exclusion(rel, "skipped", "top level is not a JSON object")
    problem = _not_completed(data) or _malformed(data)
    if problem is not None:
        kind, reason = problem
        return None, exclusion(rel, kind, reason, data)
    run = RunRecord.from_json(data)
    record = {key: key_text(getattr(run, key)) for key in KEY_FIELDS if key != "seed"}
    grid = run.grid if isinstance(run.grid, dict) else None
    seed, score, metrics = _as_int(run.seed), _as_float(run.score), _flatten(run.metrics)
    grid_text = ",".join(f"{k}={v}" for k, v in grid.items()) if grid else None
    record.update(seed=seed, score=score, metrics=metrics, path=rel, grid=grid_text)
    references = _references(run)
    references["collapse"] = collapse_status(metrics, references["score_metric"])
    references["predictions"] = _predictions(run, rel)
    references["checkpoint"] = _checkpoint(run)
    return (
        record | references | _walltime(run) | _origin(run, record["init"], grid) | _cost(run)
    ), None


def _predictions(run: RunRecord, rel: str) -> str | None:
    """Where the run's per-example predictions are, relative to the results folder (beside
    ``rel``, its result.json or its run folder); None when the record names none."""
    named = run.outcome.get("predictions")
    if not isinstance(named, str):
        return None
    folder = PurePosixPath(rel).parent if rel.endswith(RESULT_FILE) else PurePosixPath(rel)
    return (folder / named).as_posix()


def _checkpoint(run: RunRecord) -> str:
    """Which of the student's evaluations its score is (the record's `scored`): "best", the best of
    those during training, or "last", its last step's. A record without `scored` scored its last
    step, save a fine-tuning that kept its `best_step` of evaluations every `eval_every` steps."""
    scored = run.outcome.get("scored")
    if isinstance(scored, dict) and scored.get("checkpoint") in ("best", "last"):
        return scored["checkpoint"]
    config = run.config if isinstance(run.config, dict) else {}
    stage = (config.get("stages") or {}).get("finetune") or config.get("trainer") or {}
    chose = run.outcome.get("best_step") is not None and bool(stage.get("eval_every"))
    return "best" if chose else "last"


def _cost(run: RunRecord) -> dict:
    """The record's measured cost as flat columns (None where it has none)."""
    cost = run.cost if isinstance(run.cost, dict) else {}
    values = {
        column: (cost.get(model) if isinstance(cost.get(model), dict) else {}).get(field)
        for column, model, field in COST_FIELDS
    }
    values |= {key: cost.get(key) for key in ("speedup_latency", "speedup_throughput")}
    return {key: _as_float(value) for key, value in values.items()}


def _walltime(run: RunRecord) -> dict:
    """The run's durations in seconds (``timing``), its rates in examples per second
    (``throughput``), its wall time ``wall_s`` (the record's own, else the sum of its durations,
    never of its rates), and the student's parameter count; None where the record has none."""
    seconds, rates = run.durations, run.throughputs
    wall = _as_float(run.wall_s)
    if wall is None and seconds:
        wall = sum(seconds.values())
    return {
        "timing": seconds or None,
        "throughput": rates or None,
        "wall_s": wall,
        "student_parameters": _as_int(run.student_parameters),
    }


def _references(run: RunRecord) -> dict:
    """The score's metric name and the fine-tuned teacher's score on it (None where the record has
    none)."""
    metric = run.score_metric if isinstance(run.score_metric, str) else None
    teacher = run.teacher_metrics if isinstance(run.teacher_metrics, dict) else {}
    value = teacher.get(metric)
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return {
        "score_metric": metric,
        "teacher_score": float(value) if number else None,
        "teacher_collapse": collapse_status(_flatten(teacher), metric) if teacher else UNKNOWN,
    }


def _origin(run: RunRecord, init: str, grid: dict | None) -> dict:
    """What the report needs beyond the key: the design (resolved config less `NOT_DESIGN`; None for
    a record without its config), a grid point's own seed (its key's is its distillation's), the
    code version, and the paper design the run stands for:
    ``paper_table`` from the config's ``paper_analogue`` (None: the paper's own design, matched by
    name), ``paper_init``, the paper's init for this run's (None when the analogue does not map it),
    and ``paper_note``, the analogue's note."""
    config = run.config if isinstance(run.config, dict) else None
    analogue = (config or {}).get("paper_analogue")
    analogue = analogue if isinstance(analogue, dict) else None
    provenance = run.provenance if isinstance(run.provenance, dict) else {}
    commit = provenance.get("git_commit")
    dirty = "+dirty" if provenance.get("git_dirty") else ""
    commit = f"{commit[:10]}{dirty}" if commit else run.kdbench_version
    if analogue is None:
        paper_table, paper_init = None, init
    else:
        paper_table = _as_int(analogue.get("table"))
        paper_init = key_text((analogue.get("inits") or {}).get(init))
    return {
        "design": None if config is None else design(config, grid) | distilled_design(run),
        "student_path": key_text(run.outcome.get("student_path")),
        "finetune_seed": _as_int((config or {}).get("seed")) if grid else None,
        "commit": key_text(commit),
        "paper_table": paper_table,
        "paper_init": paper_init,
        "paper_note": key_text((analogue or {}).get("note")),
    }


def distilled_design(run: RunRecord) -> dict:
    """A fine-tuning record's distillation design (its distillation's resolved config, less what
    does not change a measurement), its keys under `distillation.`: grid points of students of
    different distillations are different designs. Empty for any other record."""
    config = run.outcome.get("distillation_config")
    if not isinstance(config, dict):
        return {}
    return {f"distillation.{key}": value for key, value in design(config).items()}


def _not_completed(data: dict) -> tuple[str, str] | None:
    """(kind, reason) for a record of another schema, without a status, not completed, or a
    distillation."""
    if data.get("schema", SCHEMA_VERSION) != SCHEMA_VERSION:
        return "skipped", f"unsupported schema {data.get('schema')!r} (expected {SCHEMA_VERSION})"
    status = key_text(data.get("status"))
    if status is None:
        return "skipped", "missing key 'status'"
    if status != "completed":
        return status, _last_line(data["error"]) if data.get("error") else f"status {status!r}"
    if data.get("setting") == "task_agnostic" and data.get("task") is None:
        metrics = data.get("metrics")
        loss = metrics.get("heldout_loss") if isinstance(metrics, dict) else None
        return "distillation", (
            f"task-agnostic distillation (held-out loss {loss}); its GLUE fine-tuning runs carry "
            "the scores"
        )
    return None


def _malformed(data: dict) -> tuple[str, str] | None:
    """("skipped", reason) for a completed record with a missing or ill-typed field."""
    missing = [
        key for key in COMPLETED_FIELDS if data.get(key) is None or key_text(data.get(key)) is None
    ]
    if missing:
        return "skipped", "missing key(s): " + ", ".join(missing)
    if _as_int(data["seed"]) is None:
        return "skipped", f"seed {data['seed']!r} is not an integer"
    if _as_float(data["score"]) is None:
        return "skipped", f"score {data['score']!r} is not a finite number"
    if not isinstance(data["metrics"], dict):
        return "skipped", "metrics is not a JSON object"
    return None


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


RUNS_FILE = "runs.jsonl"  # records kept in a repository: one result.json per line


def load_lines(path: Path) -> Loaded:
    """The records of a ``.jsonl`` file, one result.json per line: each keeps the path of the run
    folder it came from (its ``run_dir``; else ``<file name>#L<line>``) and links to its line
    (``link``, for the page)."""
    records, excluded, n_lines = [], [], 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        n_lines += 1
        link = f"{path.name}#L{number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            excluded.append(exclusion(link, "skipped", f"invalid JSON: {exc}"))
            continue
        where = (
            data.get("run_dir")
            if isinstance(data, dict) and isinstance(data.get("run_dir"), str)
            else link
        )
        record, excluded_row = parse_data(data, where)
        records += [record | {"link": link}] if record is not None else []
        excluded += [excluded_row] if excluded_row is not None else []
    if n_lines == 0:
        raise ReportError(
            f"{path} holds no record; pass a .jsonl file with one result.json per line"
        )
    return Loaded(records=records, excluded=excluded, n_files=n_lines)


def load_records(results_dir: Path, skip: Path | None = None) -> Loaded:
    """Parse every ``result.json`` under ``results_dir`` (of a study's jobs alone, in its sweep dir;
    a sweep's jobs without one are exclusions: :mod:`kdbench.report.jobs`), or every line of
    ``results_dir`` when it is a ``.jsonl`` file; raises :class:`ReportError` on unusable input."""
    if results_dir.is_file() and results_dir.suffix == ".jsonl":
        return load_lines(results_dir)
    if not results_dir.exists():
        raise ReportError(
            f"results directory {results_dir} does not exist; pass the directory your runs wrote to"
        )
    if not results_dir.is_dir():
        raise ReportError(
            f"{results_dir} is not a directory; pass the directory your runs wrote to"
        )
    files = find_result_files(results_dir, skip=skip)
    jobs = study_jobs(results_dir)
    if jobs is None:  # every record, and the jobs of each Hydra sweep here that wrote none
        jobs = multirun_jobs(results_dir)
        read, excluded = files, unrecorded(files, results_dir, jobs)
    else:
        read, excluded = of_jobs(files, results_dir, jobs)
    if not files and not excluded:
        raise ReportError(
            f"no {RESULT_FILE} found under {results_dir}; "
            "run some experiments first or point at the directory they wrote to"
        )
    records = []
    for path in read:
        record, excluded_row = parse_record(path, results_dir)
        if record is not None:
            records.append(record)
        else:
            excluded.append(excluded_row)
    excluded = of_design(excluded, records, jobs)
    return Loaded(records=records, excluded=excluded, n_files=len(files))
