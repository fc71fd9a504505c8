"""Run records: result.json (a `RunRecord`, written atomically) and what it names."""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from kdbench.planning.trainer_specs import COMPUTATION_ONLY
from kdbench.records.rates import rates_apart, split_timing
from kdbench.runtime.storage import atomic_write_text

SCHEMA_VERSION = 1
PACKAGE = Path(__file__).parent.parent  # kdbench
# the package's source, as `source_sha256` hashes it: its code, configs and paper tables
SOURCE_SUFFIXES = (".py", ".yaml", ".csv")
RESULT_FILE = "result.json"
JOBS_FILE = "study_jobs.txt"  # in a kdbench.study's sweep dir: its jobs' folders, one a line
# in a saved student's folder: the models it was distilled from, and itself
CHAIN_FILE = "kdbench_chain.json"
# in a saved student's folder: its learned feature projections (init.carry_projections reads them)
PROJECTIONS_FILE = "projections.pt"
# What identifies a run in the tables: the design, one seed.
KEY_FIELDS = ("setting", "teacher", "student", "task", "objective", "init", "seed")
# What every completed record holds (a task-agnostic distillation has task None: its fine-tuning
# runs carry scores).
COMPLETED_FIELDS = ("status", *KEY_FIELDS, "score", "metrics")
# Resolved config keys that do not change what a run measures: where it reads and writes, on which
# device, how it computes, how it logs, and labels. Runs that differ only in these (and the seed)
# are averaged together.
NOT_DESIGN = (
    "seed",
    "paths",
    "kdbench",
    "logger",
    "save_student",
    "measure_cost",
    "paper_analogue",
    "data.glue_dir",
    "setting.student_path",
    "trainer.device",
    "trainer.eval_batch_size",
    *(f"trainer.{how}" for how in COMPUTATION_ONLY),
)


# where a fine-tuning grid point's keys sit in a record's config (records before the stage blocks
# hold them under trainer.)
GRID_AT = {"lr": "stages.finetune.optimizer.", "batch_size": "stages.finetune."}


@dataclass
class RunRecord:
    """A run's record, as result.json holds it: what was run, how it ended, where it ran, what it
    measured and its resolved config.

    `outcome` is what the recipe returned (its metrics, teacher metrics, timing and the fields of
    its own), in the recipe's order; a fine-tuning run's record names the distillation whose
    student it fine-tunes from its start (its setting, teacher, student, init, objective and seed
    stand for the run's own in result.json, the rest of what names it opens `outcome`). A field
    that is None is not written, except those naming the run."""

    setting: str
    task: str | None  # None: a task-agnostic distillation (raw text, no task)
    teacher: str
    student: str
    init: str  # "random" or the teacher layers, "4,8,12"
    init_name: str  # the init option
    objective: str
    seed: int
    schema: int = SCHEMA_VERSION
    status: str = "running"
    kdbench_version: str | None = None
    chain: str | None = None  # the distillations behind the student, "a -> b"
    provenance: dict | None = None  # written with the precision and tf32 as resolved for the device
    precision: str | None = None
    precision_reason: str | None = None
    tf32: bool | None = None
    outcome: dict = field(default_factory=dict)
    stopped_in: str | None = None
    error: str | None = None
    score: float | None = None  # the first metric of `metrics`
    score_metric: str | None = None
    wall_s: float | None = None
    # what shows that the teacher or the student has not learned (`learning_warnings`)
    warnings: list[str] | None = None
    config: dict | None = None  # the resolved config, written last (it is long)

    NAMING = (
        "schema",
        "status",
        "setting",
        "task",
        "teacher",
        "student",
        "init",
        "init_name",
        "objective",
        "seed",
        "kdbench_version",
    )
    ENDING = ("stopped_in", "error", "score", "score_metric", "wall_s", "warnings", "config")

    @property
    def metrics(self) -> dict | None:
        return self.outcome.get("metrics")

    @property
    def teacher_metrics(self) -> dict | None:
        return self.outcome.get("teacher_metrics")

    @property
    def timing(self) -> dict | None:
        """Seconds of the run's phases (`*_s`); a record without `throughput` keeps its rates here
        too (`durations` and `throughputs` tell them apart)."""
        return self.outcome.get("timing")

    @property
    def durations(self) -> dict[str, float]:
        """Seconds of the run's phases: the numbers of `timing` named `*_s`, less its rates."""
        return split_timing(self.timing)[0]

    @property
    def throughputs(self) -> dict[str, float]:
        """Examples per second of the run's stages: `throughput`, and any rates kept in `timing`."""
        own = self.outcome.get("throughput")
        return split_timing(self.timing)[1] | split_timing(own if isinstance(own, dict) else {})[1]

    @property
    def cost(self) -> dict | None:
        """The student's and the teacher's measured cost (`kdbench.measure.cost`), where it was
        measured."""
        return self.outcome.get("cost")

    @property
    def grid(self) -> dict | None:
        """A fine-tuning run's grid point (its learning rate and batch size)."""
        return self.outcome.get("grid")

    @property
    def student_parameters(self) -> int | None:
        return self.outcome.get("student_parameters")

    def completed(self, outcome: dict, wall_s: float, config: dict) -> RunRecord:
        """This record once its recipe returned `outcome` (after the fields the record held from
        its start): scored by its first metric."""
        score_metric = next(iter(outcome["metrics"]))
        return replace(
            self,
            outcome=self.outcome | rates_apart(outcome),
            status="completed",
            score=outcome["metrics"][score_metric],
            score_metric=score_metric,
            wall_s=wall_s,
            config=config,
        )

    def as_json(self) -> dict:
        """The record as result.json holds it."""
        record = {name: getattr(self, name) for name in self.NAMING}
        record |= {"chain": self.chain} if self.chain is not None else {}
        if self.provenance is not None:
            record |= {
                "provenance": self.provenance,
                "precision": self.precision,
                "precision_reason": self.precision_reason,
                "tf32": self.tf32,
            }
        record |= self.outcome
        return record | {
            name: getattr(self, name) for name in self.ENDING if getattr(self, name) is not None
        }

    @classmethod
    def from_json(cls, data: dict) -> RunRecord:
        """A record read back from result.json; its fields as found there (None where absent), every
        field it does not name in `outcome`."""
        named = {f.name for f in fields(cls)} - {"outcome"}
        values = {name: data.get(name) for name in named}
        return cls(**values, outcome={k: v for k, v in data.items() if k not in named})

    def write(self, path: Path) -> None:
        write_json(path, self.as_json())

    @classmethod
    def read(cls, path: Path) -> RunRecord | None:
        """The record at `path` (a result.json), or None when there is none or it is not a
        record."""
        data = read_json(path)
        return cls.from_json(data) if isinstance(data, dict) else None


def write_json(path: Path, payload: dict) -> None:
    atomic_write_text(
        path, json.dumps(payload, indent=2, sort_keys=False, default=_jsonable) + "\n"
    )


def _jsonable(value):
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def chain_of(folder: str | Path | None, name: str) -> list[str]:
    """The chain of distillations behind a model folder (teacher first, the model last), or just its
    name."""
    path = Path(str(folder)).expanduser() if folder else None
    saved = read_json(path / CHAIN_FILE) if path is not None and path.is_dir() else None
    return list(saved["chain"]) if saved else [name]


# A design's training subset drawn per seed (`data.subset_seed: ${seed}`), as its design reads it
PER_SEED = "the run's seed"


def design(config: dict, grid: dict | None = None) -> dict:
    """The resolved config flattened to dotted keys, less `NOT_DESIGN` and the fine-tuning grid
    point's keys: what two runs must share to be seeds of one design. A `data.subset_seed` equal to
    the run's (non-zero) seed reads as `PER_SEED`: each seed's own subset is part of its seed."""
    grid_keys = {f"{at}{key}" for key in grid or {} for at in ("trainer.", GRID_AT[key])}
    skipped = set(NOT_DESIGN) | grid_keys

    def flat(node: dict, prefix: str) -> dict:
        out = {}
        for key, value in node.items():
            name = f"{prefix}{key}"
            if name in skipped:
                continue
            out |= flat(value, f"{name}.") if isinstance(value, dict) else {name: value}
        return out

    out = flat(config, "")
    if config.get("seed") and out.get("data.subset_seed") == config["seed"]:
        out["data.subset_seed"] = PER_SEED
    return out


def provenance(device, world_size: int) -> dict:
    """Where a record came from: the code (its source's hash; the git commit when run from a
    checkout of kdbench), the library versions, the machine and when it started."""

    def installed(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    commit, dirty = git_state(PACKAGE)
    return {
        "git_commit": commit,
        "git_dirty": dirty,
        "source_sha256": source_sha256(PACKAGE),
        "kdbench": installed("kdbench"),
        "torch": installed("torch"),
        "transformers": installed("transformers"),
        "datasets": installed("datasets"),
        "python": platform.python_version(),
        "device": device_name(device),
        "world_size": world_size,
        "started_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def git_state(package: Path) -> tuple[str | None, bool | None]:
    """(commit, whether tracked files differ from it) of the git checkout that tracks the package's
    own files; (None, None) where none does (a copy or an install, inside another repository or
    not)."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", *args], cwd=package, capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    if git("ls-files", "--error-unmatch", "__init__.py") is None:
        return None, None
    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None, None
    status = git("status", "--porcelain", "--untracked-files=no")
    return commit, None if status is None else bool(status)


def source_sha256(package: Path) -> str:
    """The sha256 of the package's source files (`SOURCE_SUFFIXES`), each its relative path and its
    bytes, in path order: which code ran, wherever it was run from."""
    digest = hashlib.sha256()
    files = {p.relative_to(package).as_posix(): p for p in package.rglob("*") if p.is_file()}
    for name in sorted(n for n, p in files.items() if p.suffix in SOURCE_SUFFIXES):
        for part in (name.encode(), files[name].read_bytes()):
            digest.update(len(part).to_bytes(8, "big") + part)
    return digest.hexdigest()


def device_name(device) -> str:
    """The GPU's model, or the CPU's (from /proc/cpuinfo where there is one)."""
    if device.type == "cuda":
        import torch  # only here: the report reads this module without torch

        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"cpu: {line.split(':', 1)[1].strip()}"
    except OSError:
        pass
    return f"cpu: {platform.processor() or platform.machine()}"
