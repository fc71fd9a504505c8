"""Hydra plumbing: the config folder, composing a config, the sweep's resolvers and job folders,
and validation of Hydra overrides before Hydra runs, with one-line errors.

Hydra's own errors are multi-line tracebacks-with-advice; a user who typed `objective=att_kll`
should read one line that names the problem and lists the valid choices, and get exit code 2.
"""

from __future__ import annotations

import difflib
import hashlib
import sys
from pathlib import Path

from kdbench.errors import ConfigError
from kdbench.planning.stage_specs import renamed

# Hydra flags that take a value (the value is not an override).
_VALUE_FLAGS = {
    "--config-name",
    "-cn",
    "--config-path",
    "-cp",
    "--config-dir",
    "-cd",
    "--cfg",
    "-c",
    "--package",
    "-p",
    "--info",
    "--experimental-rerun",
    "--shell-completion",
    "-sc",
}
_CUSTOM_CONFIG = {"--config-name", "-cn", "--config-path", "-cp", "--config-dir", "-cd"}


MAX_JOB_DIR_BYTES = 200  # file systems refuse names over 255 bytes


def job_dir_name(overrides: str, seed) -> str:
    """A sweep job's folder: its overrides (Hydra's override_dirname, seed excluded) with the seed
    last; a name too long for a file system keeps its beginning and ends in a hash of the whole, so
    it stays unique and stable."""
    safe = overrides.replace("/", "_")
    if len(safe.encode()) > MAX_JOB_DIR_BYTES:
        digest = hashlib.sha256(safe.encode()).hexdigest()[:12]
        safe = safe.encode()[: MAX_JOB_DIR_BYTES - 16].decode(errors="ignore") + f"...{digest}"
    return f"{safe},seed={seed}" if safe else f"seed={seed}"


def register_resolvers() -> None:
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("kdbench_job_dir", job_dir_name, replace=True)
    OmegaConf.register_new_resolver("kdbench_run_dir", run_dir_or, replace=True)


def run_dir_or(run_dir: str | None, dated: str) -> str:
    """A single run's folder: the one the user named (paths.run_dir), else Hydra's dated one."""
    return run_dir or dated


def config_dir() -> Path:
    return Path(__file__).parent.parent / "conf"


def fail(message: str, code: int = 2) -> None:
    print(f"kdbench: error: {message}", file=sys.stderr)
    raise SystemExit(code)


def group_options(group: str, searchpath: tuple[Path, ...] = ()) -> list[str]:
    """The options of a config group: kdbench's own, and those in the folders added by
    `hydra.searchpath`."""
    folders = (config_dir(), *searchpath)
    return sorted({p.stem for folder in folders for p in (folder / group).glob("*.yaml")})


def searchpath_dirs(override) -> tuple[Path, ...]:
    """The local folders a `hydra.searchpath=[file://...]` override adds (`pkg://` entries have no
    folder)."""
    entries = override.value() if isinstance(override.value(), list) else [override.value()]
    return tuple(
        Path(str(entry).removeprefix("file://"))
        for entry in entries
        if not str(entry).startswith("pkg://")
    )


def overrides_of(argv: list[str]) -> list[str] | None:
    """The override strings of a command line, or None when it uses a custom config (then Hydra
    checks it)."""
    overrides, skip = [], False
    for token in argv:
        if skip:
            skip = False
            continue
        if token.startswith("-"):
            if token.split("=")[0] in _CUSTOM_CONFIG:
                return None
            skip = token in _VALUE_FLAGS
            continue
        overrides.append(token)
    return overrides


def sweep_point(argv: list[str]) -> list[str]:
    """The overrides of a command line with each sweep at its first value, less Hydra's own keys
    (`hydra.*`, `hydra/launcher=...`) but `hydra.searchpath` (whose folders add group options),
    after checking every value of every group choice; a ConfigError names the bad one."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    tokens = overrides_of(argv)
    if not tokens:
        return []
    parser = OverridesParser.create()
    try:
        parsed = parser.parse_overrides(tokens)
    except Exception as exc:
        raise ConfigError(unparsable(parser, tokens, exc)) from None
    searches = [o for o in parsed if o.get_key_element().lstrip("+~") == "hydra.searchpath"]
    searchpath = tuple(folder for override in searches for folder in searchpath_dirs(override))
    first_values = [override.input_line for override in searches]  # composed with their options
    for override in parsed:
        key = override.get_key_element()
        if key.lstrip("+~").startswith("hydra"):
            continue
        values = (
            list(override.sweep_string_iterator())
            if override.is_sweep_override()
            else [override.value()]
        )
        group = override.key_or_group
        if (config_dir() / group).is_dir() and not override.is_delete():
            valid = group_options(group, searchpath)
            for value in values:
                if str(value) not in valid:
                    raise ConfigError(
                        f"unknown {group} {value!r}; valid {group} options: {', '.join(valid)}"
                    )
        if override.is_delete():
            first_values.append(key)
        elif not override.is_sweep_override():
            first_values.append(
                override.input_line
            )  # as typed: a quoted value (a path holding `=`) keeps its quotes
        elif values:
            first_values.append(
                f"{key}={values[0]}"
            )  # a sweep's elements come in override syntax, quotes kept
    return first_values


def compose(overrides: list[str], *, hydra_config: bool = False):
    """The config as Hydra composes it for these overrides (with the `hydra` node when
    `hydra_config`): the one place outside a Hydra main that composes, for validation, the
    benchmarks and the study."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    # a composition left initialised (tests, an earlier call) would refuse a new one
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(str(config_dir()), version_base="1.3"):
            return hydra_compose("config", overrides=overrides, return_hydra_config=hydra_config)
    finally:
        GlobalHydra.instance().clear()


def unknown_key(overrides: list[str]) -> str | None:
    """The first override setting a key that the config composed from the group choices lacks,
    with the closest key it has (an added `+key` or a deleted `~key` is not checked)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    groups = [o for o in parsed if is_group_choice(o)]
    try:
        cfg = compose([o.input_line for o in groups])
    except Exception:  # a group choice is wrong: Hydra's message says so
        return None
    keys = config_keys(cfg)
    for override in parsed:
        key = override.get_key_element()
        if message := renamed(key):
            return message
        if override in groups or key.startswith(("+", "~")) or key in keys:
            continue
        close = closest_key(key, keys)
        fix = f"did you mean {close}?" if close else "python -m kdbench.run --cfg job lists them"
        return f"{key} is not a key; {fix}"
    return None


def unparsable(parser, tokens: list[str], exc: Exception) -> str:
    """What to do about overrides Hydra's grammar rejects: the first such token with its value
    quoted (a value holding ; , ( ) [ ] { } = or a space must be)."""
    for token in tokens:
        try:
            parser.parse_overrides([token])
        except Exception:
            key, equals, value = token.partition("=")
            if equals and value and not value.startswith(("'", '"')):
                return (
                    f"cannot parse the override {token}: quote a value with characters Hydra's "
                    f"grammar reserves, e.g. \"{key}='{value}'\""
                )
            return f"cannot parse the override {token}: {one_line(exc)}"
    return f"cannot parse the overrides: {one_line(exc)}"


def closest_key(key: str, keys: list[str]) -> str | None:
    """The key most like `key`: among its siblings where its parent exists, else among all."""
    parent, _, name = key.rpartition(".")
    if parent not in keys:
        return next(iter(difflib.get_close_matches(key, keys, n=1)), None)
    siblings = {k.rpartition(".")[2]: k for k in keys if k.rpartition(".")[0] == parent}
    return next((siblings[n] for n in difflib.get_close_matches(name, siblings, n=1)), None)


def is_group_choice(override) -> bool:
    """Whether an override picks a config group's option (`task=custom`, `+experiment=distill`) or
    sets Hydra's own keys."""
    key = override.key_or_group.lstrip("+~")
    return key.startswith("hydra") or (config_dir() / key).is_dir()


def config_keys(node, at: str = "") -> list[str]:
    """Every dotted key of a composed config (list entries by their index), parents first."""
    from omegaconf import DictConfig, ListConfig

    if isinstance(node, DictConfig):
        items = node.items_ex(resolve=False)
    elif isinstance(node, ListConfig):
        items = enumerate(node._iter_ex(resolve=False))
    else:
        return []
    keys = []
    for name, value in items:
        path = f"{at}.{name}" if at else str(name)
        keys += [path, *config_keys(value, path)]
    return keys


def one_line(exc: BaseException) -> str:
    while (
        not str(exc).strip() and exc.__cause__ is not None
    ):  # Hydra wraps the real error without a message
        exc = exc.__cause__
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    keep = [
        line for line in lines if not line.startswith(("full_key", "object_type", "reference_type"))
    ]
    return "; ".join(keep[:3]) or type(exc).__name__
