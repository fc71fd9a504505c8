"""A study's setup (`kdbench.study`), checked before any step runs: the preset composed with its
overrides, the sweep dir, the overrides the next step's sweeps take, and the step each saved student
goes on to (a `chain` block's preset, or a task-agnostic preset's fine-tuning grid NAME_finetune).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from kdbench.errors import ConfigError
from kdbench.planning.hydra_config import compose, group_options, one_line, sweep_point

# The fine-tuning grid of a task-agnostic preset NAME is the preset NAME_finetune.
FINETUNE_SUFFIX = "_finetune"
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
    # the next step's sweeps': the shared overrides, then --finetune's
    finetune_overrides: tuple[str, ...]
    out: Path  # the report's folder
    # the preset each saved student goes on to (None: the study ends with the sweep)
    next: str | None = None
    student_as: str = "finetune"  # how it takes the student: a key of STUDENT_AS
    # the last step scores on GLUE (a chain ending in a distillation leaves students only)
    reports: bool = True

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
            "fine-tunes no student"
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
                f"of {', '.join(STUDENT_AS)}), has {OmegaConf.to_container(chain)}"
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
