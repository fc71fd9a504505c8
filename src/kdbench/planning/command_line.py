"""A command line checked before Hydra runs it: its overrides compose (each value of a sweep), and
each of its jobs writes a folder of its own that every process of the launch agrees on. A refusal
is one line and exit 2."""

from __future__ import annotations

from kdbench.errors import ConfigError
from kdbench.planning.hydra_config import (
    compose,
    fail,
    one_line,
    overrides_of,
    sweep_point,
    unknown_key,
)
from kdbench.planning.paths import writable_folder
from kdbench.runtime.processes import launched


def check_overrides(argv: list[str]) -> None:
    """Validate group choices and keys of a command line (each value of a sweep) and the folders
    of its jobs; exit 2 with one line."""
    try:
        cfg = compose_check(sweep_point(argv))
        if {"-m", "--multirun"} & set(argv):
            tokens = swept(cfg, overrides_of(argv) or [])
            check_job_folders(tokens)
            if run_folder(cfg):
                check_run_dir_per_job(tokens)
    except ConfigError as exc:
        fail(str(exc))


def compose_check(overrides: list[str]):
    """Compose the config as Hydra will (first value of each sweep) and report a failure as one
    line: a key the config lacks with the closest one it has, or a run folder (paths.run_dir,
    which Hydra makes first) that cannot be one. Returns the config, with its `hydra` node."""
    try:
        cfg = compose(overrides, hydra_config=True)
    except Exception as exc:
        raise ConfigError(unknown_key(overrides) or one_line(exc)) from None
    if folder := run_folder(cfg):
        writable_folder(folder, "paths.run_dir")
    return cfg


def swept(cfg, tokens: list[str]) -> list[str]:
    """A sweep's overrides as Hydra's basic sweeper crosses them: the preset's
    (`hydra.sweeper.params` of the composed `cfg`) of the keys the command line leaves, then the
    command line's."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    given = {o.key_or_group for o in OverridesParser.create().parse_overrides(tokens)}
    params = (cfg.hydra.sweeper.params or {}).items()
    return [*(f"{key}={value}" for key, value in params if key not in given), *tokens]


def run_folder(cfg, job: int = 0) -> str | None:
    """`paths.run_dir` of a config composed with its `hydra` node, resolved as the sweep's job
    number `job` will resolve it (`${hydra:job.override_dirname}`, `${hydra:job.num}` included);
    None where it is unset or names what only a running job knows
    (`${hydra:runtime.output_dir}`)."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict, read_write
    from omegaconf.errors import InterpolationResolutionError, MissingMandatoryValue

    if "hydra:runtime." in str(unresolved(cfg.paths, "run_dir")):
        return None  # Hydra sets hydra.runtime in the running job alone
    with read_write(cfg.hydra), open_dict(cfg.hydra.job):  # set_config made it read-only
        cfg.hydra.job.num = job
    hydra, outer = HydraConfig.instance(), HydraConfig.instance().cfg
    hydra.set_config(cfg)
    try:
        return cfg.paths.run_dir or None
    except (InterpolationResolutionError, MissingMandatoryValue):
        return None
    finally:
        hydra.cfg = outer


def unresolved(node, key: str):
    """The value of `key` in a config node as written, its interpolations unresolved."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(node, resolve=False)[key]


def check_run_dir_per_job(tokens: list[str]) -> None:
    """Refuses a sweep (`tokens`: its overrides, the preset's included) whose paths.run_dir is the
    same for two of its jobs: the second would write over the first's record. The folder must
    change with every swept key (as `${hydra:job.num}` does), or be Hydra's (paths.run_dir
    unset)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    folder = run_folder(compose(sweep_point(tokens), hydra_config=True))
    parsed = OverridesParser.create().parse_overrides(tokens)
    for at, override in enumerate(parsed):
        values = list(override.sweep_string_iterator()) if override.is_sweep_override() else []
        if len(values) < 2 or override.key_or_group.startswith("hydra"):
            continue
        other = [*tokens[:at], f"{override.get_key_element()}={values[1]}", *tokens[at + 1 :]]
        if run_folder(compose(sweep_point(other), hydra_config=True), job=1) == folder:
            raise ConfigError(
                f"paths.run_dir={folder} is the folder of every {override.key_or_group} of this "
                "sweep, and each job would write over the record of the one before: leave "
                "paths.run_dir out of a sweep (hydra.sweep.dir=DIR names the sweep's folder, "
                "and each job has its own in it)"
            )


def check_run_folder(argv: list[str]) -> None:
    """Refuses a launch of several processes (torchrun, `srun -n N`) whose folder is Hydra's dated
    one (a single run's or a sweep's): each process composes its own config, dated by the second
    it starts in, so one launch could write to several folders (rank 0 the records and
    checkpoints, the others their claims and logs) and could not be resumed as one. Exit 2 with
    one line."""
    processes, tokens = launched(), overrides_of(argv)
    if processes < 2 or tokens is None:
        return
    sweep = bool({"-m", "--multirun"} & set(argv))
    key = "hydra.sweep.dir" if sweep else "hydra.run.dir"
    if any(token.lstrip("+").startswith(f"{key}=") for token in tokens):
        return
    cfg = compose(sweep_point(argv), hydra_config=True)
    if run_folder(cfg) or sweep and "${now:" not in str(unresolved(cfg.hydra.sweep, "dir")):
        return
    name = "hydra.sweep.dir" if sweep else "paths.run_dir"
    fail(
        f"this launch started {processes} processes, and each would name its own dated "
        f"{'sweep' if sweep else 'run'} folder: give them one with {name}=DIR (the same on every "
        "process; re-run with it to resume)"
    )


RUN_APART = "run one sweep per value, each with its own hydra.sweep.dir"


def check_job_folders(tokens: list[str], fix: str = RUN_APART) -> None:
    """Refuses a sweep over a key that its job folders are not named by (`override_dirname`'s
    `exclude_keys`, the seed aside, which ends every name): every value's job would write one
    folder, each over the record of the one before. `fix` is what the error tells the user to
    do."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(tokens)
    swept = [o.key_or_group for o in parsed if o.is_sweep_override() and o.key_or_group != "seed"]
    if not swept:
        return
    naming = [o.input_line for o in parsed if o.key_or_group.startswith("hydra.job.config")]
    cfg = compose(naming, hydra_config=True)
    for key in swept:
        if key in cfg.hydra.job.config.override_dirname.exclude_keys:
            raise ConfigError(
                f"a sweep over {key} writes the jobs of all its values into one folder (a job's "
                f"folder is not named by {key}): {fix}"
            )
