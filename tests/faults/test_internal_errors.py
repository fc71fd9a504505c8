"""A bug (not bad input) ends with one line that says so, names the exception and the record, and
how to see more; a package that is not installed is one error line naming it and its install."""

from __future__ import annotations

import json
import sys

import pytest

import kdbench.run as entry
from kdbench import command, job
from kdbench.errors import missing_package
from tests.helpers import tiny_overrides


def broken_recipe(plan, run_dir, log):
    raise ZeroDivisionError("division by zero")


def run_cli(monkeypatch, *args):
    monkeypatch.setattr(sys, "argv", ["kdbench.run", *args])
    monkeypatch.setitem(job.RECIPES, "task_specific", broken_recipe)
    with pytest.raises(SystemExit) as exited:
        entry.main()
    return exited.value.code


def test_a_bug_is_one_line_naming_the_exception_and_the_record(
    tiny_glue, tmp_path, monkeypatch, capsys
):
    code = run_cli(monkeypatch, *tiny_overrides(tiny_glue, tmp_path))
    stderr = capsys.readouterr().err
    lines = [line for line in stderr.splitlines() if line.startswith("kdbench")]
    assert code == command.INTERNAL_ERROR_EXIT and len(lines) == 1 and "Traceback" not in stderr
    assert lines[0].startswith("kdbench: internal error: ZeroDivisionError: division by zero")
    assert f"{tmp_path / 'result.json'}" in lines[0] and "kdbench.debug=true" in lines[0]
    record = json.loads((tmp_path / "result.json").read_text())
    assert record["status"] == "failed" and record["error"] == "ZeroDivisionError: division by zero"


def test_with_debug_a_bug_shows_its_traceback(tiny_glue, tmp_path, monkeypatch, capsys):
    run_cli(monkeypatch, *tiny_overrides(tiny_glue, tmp_path), "kdbench.debug=true")
    stderr = capsys.readouterr().err
    assert (
        "Traceback" in stderr
        and "in broken_recipe" in stderr
        and "kdbench: internal error:" in stderr
    )


def test_bad_input_never_takes_the_internal_error_path(tiny_glue, tmp_path, monkeypatch, capsys):
    code = run_cli(
        monkeypatch, *tiny_overrides(tiny_glue, tmp_path), "stages.teacher.optimizer.lr=-1"
    )
    assert code == 2 and "kdbench: error: stages.teacher.optimizer.lr=-1" in capsys.readouterr().err


def error_lines(capsys) -> tuple[list[str], str]:
    stderr = capsys.readouterr().err
    return [line for line in stderr.splitlines() if line.startswith("kdbench")], stderr


def test_submitit_missing_in_a_multi_task_job_is_one_error_line(
    tiny_glue, tmp_path, monkeypatch, capsys
):
    monkeypatch.setitem(sys.modules, "submitit", None)  # importing it raises, as if not installed
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(key, "")  # registered, so that the undo removes what a run would set
        monkeypatch.delenv(key)
    monkeypatch.delenv("SUBMITIT_EXECUTOR", raising=False)
    monkeypatch.setenv("SLURM_PROCID", "0")  # a task of a two-task SLURM job
    monkeypatch.setenv("SLURM_NTASKS", "2")
    code = run_cli(monkeypatch, *tiny_overrides(tiny_glue, tmp_path))
    lines, stderr = error_lines(capsys)
    assert code == 2 and "Traceback" not in stderr
    assert lines == [
        "kdbench: error: this run needs the package submitit, which is not installed: "
        "pip install submitit"
    ]


def logged_to_wandb(plan, run_dir, log):
    import wandb  # noqa: F401

    raise AssertionError("wandb is not installed in this test")


def test_a_package_missing_during_the_run_is_one_error_line_and_the_records_error(
    tiny_glue, tmp_path, monkeypatch, capsys
):
    monkeypatch.setitem(sys.modules, "wandb", None)
    monkeypatch.setattr(sys, "argv", ["kdbench.run", *tiny_overrides(tiny_glue, tmp_path)])
    monkeypatch.setitem(job.RECIPES, "task_specific", logged_to_wandb)
    with pytest.raises(SystemExit) as exited:
        entry.main()
    lines, _ = error_lines(capsys)
    message = "this run needs the package wandb, which is not installed: pip install wandb"
    assert exited.value.code == 2 and lines == [f"kdbench: error: {message}"]
    record = json.loads((tmp_path / "result.json").read_text())
    assert record["status"] == "failed" and record["error"] == message


@pytest.mark.parametrize("name", ["kdbench", "kdbench.teacher.cache", "submitit.slurm", None])
def test_a_module_missing_inside_kdbench_or_an_installed_package_stays_a_bug(name):
    assert missing_package(ModuleNotFoundError("No module", name=name)) is None
    assert missing_package(ImportError("cannot import name 'x'", name="submitit")) is None
