"""What `python -m kdbench.advise` is asked, checked before any job: its own keys (`advise.*`), the
run overrides every job shares (the config groups of `kdbench.run`), the pilot's cells, each
planned as a run would be, and the full run's scale."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kdbench.advise.design import Scale, default_cells
from kdbench.errors import ConfigError, KdbenchError
from kdbench.planning.command_line import check_job_folders, compose_check
from kdbench.planning.declared import check_declared, with_defaults
from kdbench.planning.group_keys import AdviseKeys
from kdbench.planning.hydra_config import compose, group_options, sweep_point
from kdbench.planning.inits import block_shape, teacher_block_shape
from kdbench.planning.rules import duration_seconds
from kdbench.planning.study_config import override_key

PREFIX = "advise."
# Keys advise sets for each of its jobs: a command line that sets them is refused.
RESERVED = {
    "objective": "the pilot's cells are advise.candidates=[objective@init,...]",
    "init": "the pilot's cells are advise.candidates=[objective@init,...]",
    "seed": "the pilot chooses its seeds",
    "experiment": "advise runs its own pilot",
    "hydra.sweep.dir": "each step writes below advise.out",
    "paths.run_dir": "each step writes below advise.out",
    "save_student": "the answer's student is saved",
    "measure_cost": "the answer's cost is measured",
}
NEEDS_MORE = ("layers", "pretrained")  # inits that need keys of their own


@dataclass(frozen=True)
class CellSpec:
    objective: str
    init: str  # the init option
    label: str  # the teacher layers it copies, or random, as records name it

    @property
    def name(self) -> str:
        return f"{self.objective}@{self.label}"


@dataclass(frozen=True)
class Inputs:
    overrides: tuple[str, ...]  # every job's, as given
    keys: dict  # advise.*, checked, with their defaults
    out: Path
    cells: tuple[CellSpec, ...]
    scale: Scale
    task: str
    teacher: str
    student: str
    teacher_path: str | None  # the fine-tuned teacher every pilot job reads (None: not yet)
    cache_entry: str  # where the full run's fine-tuned teacher is cached

    @property
    def budget_s(self) -> float:
        return duration_seconds(self.keys["budget"])


def split(argv: list[str]) -> tuple[list[str], dict]:
    """The run overrides and the advise keys' values of a command line."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    mine = [token for token in argv if override_key(token).startswith(PREFIX)]
    values = {}
    for parsed in OverridesParser.create().parse_overrides(mine) if mine else []:
        values[parsed.get_key_element().removeprefix(PREFIX)] = parsed.value()
    keys = check_declared(values, AdviseKeys, "advise")
    return [token for token in argv if token not in mine], with_defaults(keys, AdviseKeys)


def check_overrides(overrides: list[str]) -> None:
    """Every override is one value of a key `kdbench.run` knows, none of those advise sets."""
    for token in overrides:
        name = override_key(token)
        if name in RESERVED or name.startswith("hydra.sweep"):
            why = RESERVED.get(name, RESERVED["hydra.sweep.dir"])
            raise ConfigError(f"{token}: kdbench.advise sets {name} itself ({why}); drop it")
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for parsed in OverridesParser.create().parse_overrides(overrides) if overrides else []:
        if parsed.is_sweep_override():
            raise ConfigError(
                f"{parsed.input_line}: kdbench.advise runs its own sweep: give each key one value"
            )
    compose_check(sweep_point(overrides))


def planned(overrides: list[str], *extra: str):
    """The plan of a run of `overrides` (less Hydra's own keys); bad input is a KdbenchError."""
    from kdbench.planning.plan import make_plan

    return make_plan(compose([*sweep_point(overrides), *extra]))


def cell_spec(overrides: list[str], objective: str, init: str) -> CellSpec:
    if objective not in group_options("objective"):
        raise ConfigError(f"unknown objective {objective!r}")
    if init not in group_options("init") or init in NEEDS_MORE:
        valid = [name for name in group_options("init") if name not in NEEDS_MORE]
        raise ConfigError(f"init {init!r} is not one of {', '.join(valid)}")
    plan = planned(overrides, f"objective={objective}", f"init={init}")
    return CellSpec(objective, init, plan.init.label)


def cells_of(overrides: list[str], candidates: list | None, shapes) -> tuple[CellSpec, ...]:
    """The pilot's cells, each planned: the candidates given (one refused in one line), else the
    defaults the shapes permit (those a plan refuses left out); cells copying the same layers by
    another init's name are one."""
    cells: dict[str, CellSpec] = {}
    asked = [tuple(c.split("@", 1)) for c in candidates] if candidates else default_cells(*shapes)
    for objective, init in asked:
        try:
            cell = cell_spec(overrides, objective, init)
        except KdbenchError as exc:
            if candidates:
                raise ConfigError(f"advise.candidates: {objective}@{init}: {exc}") from None
            continue
        cells.setdefault(cell.name, cell)
    if len(cells) < 2:
        raise ConfigError(
            f"the pilot needs two cells or more, has {len(cells)}: list them in "
            "advise.candidates=[objective@init,...]"
        )
    return tuple(cells.values())


def check_cell_folders(overrides: list[str], cells: tuple[CellSpec, ...]) -> None:
    """Refuses a naming of job folders (`hydra.job.config`) under which two cells' jobs would share
    one: the steps' sweeps range over the cells' objectives and inits (`check_job_folders`)."""
    naming = [token for token in overrides if override_key(token).startswith("hydra.job.config")]
    if naming:
        objectives = ",".join(dict.fromkeys(cell.objective for cell in cells))
        inits = ",".join(dict.fromkeys(cell.init for cell in cells))
        check_job_folders(
            [*naming, f"objective={objectives}", f"init={inits}"],
            f"kdbench.advise sweeps its cells' objectives and inits: drop {naming[-1]}",
        )


def scale_of(plan) -> Scale:
    """The full run: the training examples and each stage's epochs; the teacher ready when given
    or cached."""
    from kdbench.data.glue import train_subset
    from kdbench.runtime.storage import intact
    from kdbench.teacher.cache import cache_path

    epochs = {}
    for name in ("teacher", "intermediate", "prediction"):
        stage = plan.stages[name]
        if stage.epochs is None:
            raise ConfigError(
                f"stages.{name} counts steps: kdbench.advise scales epochs, set "
                f"stages.{name}.epochs=N stages.{name}.steps=null"
            )
        epochs[name] = stage.epochs
    ready = plan.teacher.finetuned_path is not None or intact(cache_path(plan), "the teacher")
    examples = len(train_subset(plan.task, plan.data))
    return Scale(examples, epochs["teacher"], epochs["intermediate"], epochs["prediction"], ready)


def read_inputs(argv: list[str]) -> Inputs:
    """The command line checked and planned; a ConfigError of one line for bad input."""
    from kdbench.teacher.cache import cache_path

    overrides, keys = split(argv)
    check_overrides(overrides)
    plan = planned(overrides)
    if plan.setting != "task_specific":
        raise ConfigError(f"kdbench.advise distils for a task: setting={plan.setting} has none")
    shapes = (
        (plan.teacher_conf.num_hidden_layers, *teacher_block_shape(plan.teacher_conf)),
        (plan.student.num_layers, *block_shape(plan.student)),
    )
    scale = scale_of(plan)
    given = plan.teacher.finetuned_path
    entry = cache_path(plan)
    cells = cells_of(overrides, keys["candidates"], shapes)
    check_cell_folders(overrides, cells)
    return Inputs(
        overrides=tuple(overrides),
        keys=keys,
        out=Path(keys["out"] or Path("advice") / plan.task.name),
        cells=cells,
        scale=scale,
        task=plan.task.name,
        teacher=plan.teacher.name,
        student=plan.student.name,
        teacher_path=str(given) if given else (str(entry) if scale.teacher_ready else None),
        cache_entry=str(entry),
    )
