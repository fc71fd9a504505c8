"""A bug (not bad input) ends with one line that says so, names the exception and the record, and
how to see more."""

from __future__ import annotations

import json
import sys

import pytest

import kdbench.run as entry
from tests.helpers import tiny_overrides


def broken_recipe(plan, run_dir, log):
    raise ZeroDivisionError("division by zero")


def run_cli(monkeypatch, *args):
    monkeypatch.setattr(sys, "argv", ["kdbench.run", *args])
    monkeypatch.setitem(entry.RECIPES, "task_specific", broken_recipe)
    with pytest.raises(SystemExit) as exited:
        entry.main()
    return exited.value.code


def test_a_bug_is_one_line_naming_the_exception_and_the_record(
    tiny_glue, tmp_path, monkeypatch, capsys
):
    code = run_cli(monkeypatch, *tiny_overrides(tiny_glue, tmp_path))
    stderr = capsys.readouterr().err
    lines = [line for line in stderr.splitlines() if line.startswith("kdbench")]
    assert code == entry.INTERNAL_ERROR_EXIT and len(lines) == 1 and "Traceback" not in stderr
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
    code = run_cli(monkeypatch, *tiny_overrides(tiny_glue, tmp_path), "trainer.lr=-1")
    assert code == 2 and "kdbench: error: trainer.lr=-1" in capsys.readouterr().err
