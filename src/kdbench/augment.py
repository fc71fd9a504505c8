"""The command that builds a task's augmented training set alone (the work is
`kdbench.data.augmentation`): `python -m kdbench.augment task=sst2 augment=tinybert [...]`.

The same overrides as a run (task, data.*, augment.*, paths.cache_dir) name the same cache entry, so
a run with them reuses what this built. Prints where the entry is and how many examples it holds.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from kdbench.data.augmentation import augmented_train_set
from kdbench.data.glue import train_subset
from kdbench.errors import ConfigError, KdbenchError
from kdbench.planning.command_line import check_overrides
from kdbench.planning.groups import augment_spec, check_data_files, data_spec, task_spec
from kdbench.planning.hydra_config import compose, fail
from kdbench.runtime.device import resolve_device
from kdbench.training.signals import Interrupted, graceful_stop


def build(overrides: list[str]) -> str:
    """Build (or find) the augmented set the overrides name; returns the line to print."""
    cfg = compose(overrides)
    task, data = task_spec(cfg.task), data_spec(cfg.data)
    check_data_files(task, data)
    spec = augment_spec(cfg.augment, cfg.setting.name)
    if spec is None:
        raise ConfigError(
            "augment=none builds nothing: give augment=tinybert (and its augment.* settings)"
        )
    originals = train_subset(task, data)
    start = time.perf_counter()
    augmented, path = augmented_train_set(
        originals,
        task,
        spec,
        Path(cfg.paths.cache_dir).expanduser(),
        str(data.glue_dir or data.hf_dataset),
        resolve_device(cfg.trainer.device),
    )
    seconds = time.perf_counter() - start
    return (
        f"augmented {task.name}: {len(originals)} originals -> {len(augmented)} examples "
        f"({seconds:.1f} s; a cached set is only read): {path}"
    )


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    check_overrides(argv)
    try:
        with graceful_stop():
            print(build(argv))
    except (
        Interrupted
    ) as exc:  # a stop signal: nothing of the entry is kept, the same command builds it again
        print(f"kdbench: {exc}", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None
    except KdbenchError as exc:
        fail(str(exc), exc.exit_code)


if __name__ == "__main__":
    main()
