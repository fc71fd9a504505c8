"""Entry point: `python -m kdbench.run objective=att_kl+val_kl student=6x384 ...`.

`main` checks the command line's overrides (group options, keys, values the grammar takes, the run
folder, which several processes must name), then Hydra composes the config and `kdbench.command`
runs it; `kdbench.job.run(cfg)` is the same run as a plain function. Only Hydra loads before the
overrides are checked, so a mistyped one is refused in about a second, not after torch and
transformers have loaded.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from kdbench.planning.command_line import check_overrides, check_run_folder
from kdbench.planning.hydra_config import config_dir, register_resolvers

# the sweep's job-folder resolver must exist wherever a job is resolved (submitit children too)
register_resolvers()


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="config")
def _hydra_main(cfg: DictConfig) -> float | None:
    from kdbench.command import run_command  # torch, transformers: once the overrides are checked

    return run_command(cfg)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    check_overrides(argv)
    check_run_folder(argv)
    _hydra_main()


if __name__ == "__main__":
    main()
