"""A study's setup (`kdbench.study`), checked before any step runs: the preset composed with its
overrides, the sweep dir, the overrides the next step's sweeps take, the step each saved student
goes on to (a `chain` block's preset, or a task-agnostic preset's fine-tuning grid NAME_finetune)
and each step's launcher; and the job folders a step's sweep names (`job_folders`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from kdbench.errors import ConfigError
from kdbench.planning.command_line import check_job_folders
from kdbench.planning.hydra_config import (
    compose,
    group_options,
    job_dir_name,
    one_line,
    sweep_point,
)

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
# The keys of the GLUE task and its data, which a task-agnostic distillation (raw text) never reads.
TASK_KEYS = ("task", "data", "augment")
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
    # the presets as composed (with their `hydra` node), whose sweeps name the job folders
    cfg: DictConfig | None = None
    next_cfg: DictConfig | None = None

    @property
    def finetunes(self) -> bool:
        return self.next is not None

    @property
    def step(self) -> str:
        """The next step's name, and its folder below the sweep dir."""
        return "finetune" if self.student_as == "finetune" else self.next


def override_key(token: str) -> str:
    return token.split("=", 1)[0].lstrip("+~")


def is_hydra_key(token: str) -> bool:
    key = override_key(token)
    return key == "hydra" or key.startswith(("hydra.", "hydra/"))


def job_folders(cfg: DictConfig, overrides: list[str]) -> list[str]:
    """The folders, below its sweep dir, of the jobs of `kdbench.run -m OVERRIDES` on the composed
    preset `cfg`: Hydra's basic sweeper crosses the preset's `hydra.sweeper.params` with the
    command line's overrides (where both set a key, the command line's value), and each job's
    folder is its override_dirname and its seed (`hydra.sweep.subdir`)."""
    from hydra._internal.config_loader_impl import get_overrides_dirname
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    params = [f"{key}={value}" for key, value in (cfg.hydra.sweeper.params or {}).items()]
    task = [token for token in overrides if not is_hydra_key(token)]
    (jobs,) = BasicSweeper.split_arguments(parser.parse_overrides(params + task), None)
    naming = cfg.hydra.job.config.override_dirname
    folders = []
    for job in jobs:
        parsed = parser.parse_overrides(job)
        seeds = [override.value() for override in parsed if override.key_or_group == "seed"]
        name = get_overrides_dirname(
            parsed, list(naming.exclude_keys), naming.item_sep, naming.kv_sep
        )
        folders.append(job_dir_name(name, seeds[-1] if seeds else cfg.seed))
    return folders


def under(token: str, keys: tuple[str, ...]) -> bool:
    """Whether an override sets one of `keys` or a key below one."""
    key = override_key(token)
    return any(key == name or key.startswith(f"{name}.") for name in keys)


def shared(overrides: list[str]) -> list[str]:
    """The overrides that say where and how jobs run (`SHARED`), which the fine-tuning sweeps take
    too."""
    return [token for token in overrides if under(token, SHARED)]


def check_launch(cfg: DictConfig, step: str, fix: str) -> None:
    """Refuses a step whose setting trains in one process a job on a launcher that starts several a
    job (nodes x tasks per node): every job of it would fail (`distributed.check_launch`)."""
    launcher = cfg.hydra.launcher
    nodes, tasks = int(launcher.get("nodes") or 1), int(launcher.get("tasks_per_node") or 1)
    if nodes * tasks == 1:
        return
    from kdbench.runtime.distributed import DATA_PARALLEL

    if cfg.setting.name not in DATA_PARALLEL:
        raise ConfigError(
            f"study step '{step}': setting={cfg.setting.name} trains in one process a job, and its "
            f"launcher starts {nodes} node(s) x {tasks} task(s) a job: {fix}"
        )


def check_folders(step: str, overrides: list[str]) -> None:
    """Refuses a step whose sweep writes the jobs of several values into one folder
    (`check_job_folders`), before the study's first step runs."""
    try:
        check_job_folders(overrides, "run one study per value, each with its own hydra.sweep.dir")
    except ConfigError as exc:
        raise ConfigError(f"study step '{step}': {exc}") from None


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
    node as they set it (its launcher, its sweep); bad input is a ConfigError of one line."""
    if name not in group_options("experiment"):
        raise ConfigError(
            f"unknown experiment {name!r}; valid experiment options: "
            f"{', '.join(group_options('experiment'))}"
        )
    points = sweep_point(overrides)
    hydra = [token for token in overrides if is_hydra_key(token)]
    try:
        return compose([f"+experiment={name}", *points, *hydra], hydra_config=True)
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
        raise ConfigError(not_a_study(name))
    sweep_dir = sweep_dir_of(
        name, overrides, OmegaConf.to_container(cfg.hydra.sweep, resolve=False).get("dir")
    )
    check_launch(cfg, "distil", "give it hydra/launcher=slurm (one process a job)")
    check_folders("distil", overrides)
    if setting == "task_agnostic":
        check_read(name, overrides)
    next_preset, student_as = next_step(name, cfg)
    forwarded, next_cfg = next_overrides(next_preset, overrides, finetune_overrides)
    if next_cfg is not None:
        step = "finetune" if student_as == "finetune" else next_preset
        check_launch(
            next_cfg,
            step,
            "give its sweeps one process a job (--finetune hydra/launcher=slurm --finetune "
            "hydra.launcher.nodes=1)",
        )
        check_folders(step, forwarded)
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
        reports=(next_cfg or cfg).setting.name != "task_agnostic",
        cfg=cfg,
        next_cfg=next_cfg,
    )


def check_read(name: str, overrides: list[str]) -> None:
    """Refuses an override of the task or its data (`TASK_KEYS`) for task-agnostic distillations,
    which read neither: it belongs to the next step's sweeps."""
    unread = [token for token in overrides if under(token, TASK_KEYS) and not under(token, SHARED)]
    if unread:
        raise ConfigError(
            f"{unread[0]}: the distillations of {name} are task-agnostic and read no task or its "
            f"data; give it to the sweeps of their students: --finetune {unread[0]}"
        )


def next_overrides(
    next_preset: str | None, overrides: list[str], finetune_overrides: list[str]
) -> tuple[list[str], DictConfig | None]:
    """The overrides of the next step's sweeps and its preset composed with them: where and how jobs
    run (`SHARED`), the corpus (`corpus` and its keys) when the next step distils from raw text too
    (an assistant's student reads its assistant's corpus), then `--finetune`'s."""
    if next_preset is None:
        return shared(overrides) + list(finetune_overrides), None
    # with the launcher the shared overrides choose, whose keys --finetune may set
    setting = preset(next_preset, shared(overrides) + list(finetune_overrides)).setting.name
    keys = SHARED + (("corpus",) if setting == "task_agnostic" else ())
    forwarded = [token for token in overrides if under(token, keys)] + list(finetune_overrides)
    return forwarded, preset(next_preset, forwarded)


def not_a_study(name: str) -> str:
    """Why a fine-tuning grid is no study, and what to run instead."""
    base = name.removesuffix(FINETUNE_SUFFIX)
    how = (
        f"run the study of {base}"
        if base != name
        else f"run it on a student with python -m kdbench.run -m +experiment={name} "
        "setting.student_path=DIR"
    )
    return f"experiment {name} is a fine-tuning grid (setting=finetune), not a study: {how}"


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
