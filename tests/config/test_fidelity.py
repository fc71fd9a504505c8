"""docs/fidelity.md names only what kdbench gives: every key of a row's *keys* cell is declared and
its value admitted, every preset and group option composes, every test it names exists, and every
row cites the released code's `file:line` or says that none is released."""

from __future__ import annotations

import re
from dataclasses import Field
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from kdbench.objectives.losses import LOSSES
from kdbench.planning.declared import check_key, check_value, declared_keys, is_declaration
from kdbench.planning.group_keys import ConfigKeys
from kdbench.planning.hydra_config import compose, config_dir, group_options

ROOT = Path(__file__).resolve().parents[2]
FIDELITY = ROOT / "docs" / "fidelity.md"
COLUMNS = ["aspect", "paper", "released (file:line)", "kdbench", "keys", "test"]
CITATION = re.compile(r"[\w./-]+\.(?:py|md|json|txt|yaml):\d+")
GROUPS = {p.name for p in config_dir().iterdir() if p.is_dir()}


def cells(line: str) -> list[str]:
    """A table row's cells (a `|` inside backticks is not a cell's edge)."""
    parts, inside, cell = [], False, ""
    for char in line.strip().strip("|"):
        inside ^= char == "`"
        if char == "|" and not inside:
            parts.append(cell.strip())
            cell = ""
        else:
            cell += char
    return [*parts, cell.strip()]


def fidelity_rows() -> list[dict[str, str]]:
    """Every row of the tables whose header is `COLUMNS`, as {column: cell}."""
    rows, header = [], None
    for line in FIDELITY.read_text().splitlines():
        if not line.startswith("|"):
            header = None
            continue
        found = cells(line)
        if header is None:
            header = found if found == COLUMNS else []
        elif header and not set(line) <= set("|-"):
            assert len(found) == len(COLUMNS), f"a row of {len(found)} cells: {line[:80]}"
            rows.append(dict(zip(COLUMNS, found, strict=True)))
    return rows


ROWS = fidelity_rows()
KEYS = sorted({key for row in ROWS for key in re.findall(r"`([^`]+)`", row["keys"])})
TESTS = sorted({name for row in ROWS for name in re.findall(r"`(test_\w+)`", row["test"])})


def test_the_tables_are_read():
    assert len(ROWS) > 50 and len(KEYS) > 40 and len(TESTS) > 40
    assert {row["aspect"] for row in ROWS} >= {"relation heads", "gradient clipping", "padding"}


@pytest.mark.parametrize("row", ROWS, ids=[row["aspect"] for row in ROWS])
def test_every_row_cites_the_released_lines_or_says_none_is_released(row):
    released = row["released (file:line)"]
    assert CITATION.search(released) or "none released" in released, released
    keys = re.sub(r"`[^`]+`", "", row["keys"])
    assert set(keys) <= set(", -"), f"text outside backticks in the keys of {row['aspect']!r}"


def declared_field(path: str) -> tuple[Field, list[str], bool] | None:
    """The declaration of a dotted config path: its key, the parts after a loss's `params` (a loss
    parameter's name), and whether the path ends at an entry of a list or mapping key."""
    target, found, parts = ConfigKeys, None, path.split(".")
    while parts:
        part = parts.pop(0)
        keys = declared_keys(target) if is_declaration(target) else {}
        if part not in keys:
            return None
        found, entry = keys[part], keys[part].metadata.get("each")
        if entry and parts:  # the next part names an entry
            parts.pop(0)
            entry = False
            if not parts:
                return found, [], True
        if part == "params" and parts:
            return found, parts, False
        target = found.metadata.get("rule")
    return found, [], False


def check_loss_parameter(name: str, value, path: str) -> None:
    rules = [entry.param_rules[name] for entry in LOSSES.values() if name in entry.param_rules]
    assert rules, f"{path}: no loss has a parameter {name}"
    if value is not None and rules[0] is not None:
        assert any(rule is None or rule.admits(value) for rule in rules), f"{path}={value!r}"


def check_config_key(token: str) -> None:
    path, has_value, text = token.partition("=")
    value = OverridesParser.create().parse_overrides([token])[0].value() if has_value else None
    declared = declared_field(path)
    assert declared is not None, f"{path} is declared nowhere (docs/keys.md lists the keys)"
    field, parameter, entry = declared
    if parameter:
        check_loss_parameter(parameter[0], value, path)
    elif has_value and entry:
        check_value(value, field.metadata.get("rule"), path)
    elif has_value:
        check_key(value, field, path)


@pytest.mark.parametrize("token", KEYS)
def test_every_key_a_row_names_is_declared_and_every_preset_composes(token):
    name, _, option = token.partition("=")
    if name == "+experiment":
        assert option in group_options("experiment"), f"no preset {option}"
        compose([token])
    elif name in GROUPS:
        assert option in group_options(name), f"no option {option} of {name}"
        compose([token])
    else:
        check_config_key(token)


def test_an_undeclared_key_or_a_value_out_of_range_is_caught():
    with pytest.raises(AssertionError, match="declared nowhere"):
        check_config_key("stages.finetune.epochs_for_task")
    with pytest.raises(AssertionError, match="no loss has a parameter"):
        check_config_key("objective.terms.0.params.nonsense=1")
    with pytest.raises(Exception, match="must be"):
        check_config_key("stages.finetune.eval_every_per_task.rte=-1")
    with pytest.raises(Exception, match="must be"):
        check_config_key("stages.finetune.optimizer.max_grad_norm=-1.0")
    check_config_key("stages.finetune.epochs_per_task.rte=20")


@pytest.mark.parametrize("name", TESTS)
def test_every_test_a_row_names_exists(name):
    defined = re.compile(rf"^def {name}\(", re.MULTILINE)
    assert any(defined.search(path.read_text()) for path in (ROOT / "tests").rglob("test_*.py"))
