"""`python -m kdbench.run --help`: kdbench's commands to start from, where the keys are documented,
and the config groups to choose from; the other commands' help gives their command line whole."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

COMMANDS = (
    "python -m kdbench.run task=rte student=3x768 objective=att_kl+val_kl",
    "python -m kdbench.run -m objective=vanilla_kd,att_kl seed=1,2,3",
    "python -m kdbench.study mini_table1",
    "python -m kdbench.report multirun/mini_table1 --out results/mini_table1",
    "python -m kdbench.run +experiment=distill task=custom task.train_file=train.csv",
    "python -m kdbench.advise task=custom task.train_file=train.csv advise.budget=2h",
)


def test_help_shows_the_commands_the_docs_and_the_config_groups():
    result = subprocess.run(
        [sys.executable, "-m", "kdbench.run", "--help"],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "powered by Hydra" not in text
    for command in (*COMMANDS, "docs/configuration.md", "docs/keys.md", "--cfg job"):
        assert command in text, command
    groups = text.split("== Config groups (group=option) ==")[1]
    assert "\nobjective: att_kl, " in groups and "\ntask: cola, custom, " in groups
    assert "seed: 1" not in text  # the composed config is --cfg job's, not --help's
    prose = text.split("== Config groups")[0] + text[text.index("Every option") :]
    assert max(len(line) for line in prose.splitlines()) <= 100  # a terminal's width


def test_the_study_and_bench_help_give_their_whole_command_line(capsys):
    from kdbench import bench, study

    with pytest.raises(SystemExit):
        study.main(["--help"])
    helps = {"study": capsys.readouterr().out, "bench": bench.parser().format_help()}
    for name, usage in (
        ("study", "python -m kdbench.study NAME [OVERRIDES ...] [--finetune OVERRIDE ...]`."),
        ("bench", "python -m kdbench.bench [--mode MODE] [OVERRIDES ...] [options]`."),
    ):
        assert usage in " ".join(helps[name].split()), name
