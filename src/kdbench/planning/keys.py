"""The config key reference, `docs/keys.md`, written from the keys' declarations: every key's type,
default, valid values and help (`kdbench.planning.group_keys.ConfigKeys`), and every loss's
parameters (`kdbench.objectives.losses.LOSSES`).

    python -m kdbench.planning.keys > docs/keys.md      # or: make keys
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from dataclasses import MISSING, Field

from kdbench.objectives.losses import LOSSES
from kdbench.planning.declared import declared_keys, is_declaration, nullable
from kdbench.planning.group_keys import AdviseKeys, ConfigKeys, RunKeys
from kdbench.planning.rules import shown

HEADER = """# Config keys

Every key a config sets, as its declaration says it (the dataclass fields of
`src/kdbench/planning/specs.py`, `trainer_specs.py` and `group_keys.py`, and each loss's entry in
`src/kdbench/objectives/losses.py`). Written by `python -m kdbench.planning.keys > docs/keys.md`
(`make keys`); a test holds this file to what it writes. A value outside its valid values is refused
before any work with one line naming it (`key=value`) and what is valid. An empty default: each
option's YAML (or `conf/config.yaml`) sets the key; empty valid values: any value the code reads.
What the options are and how they combine: [configuration.md](configuration.md)."""
COLUMNS = ["| key | type | default | valid values | help |", "|---|---|---|---|---|"]


def cell(text: str) -> str:
    """Text in a table cell (a `|` in it escaped)."""
    return text.replace("|", "\\|")


def default_of(declared: Field) -> str:
    if declared.default is MISSING:
        return ""
    value = declared.default
    return f"`{shown(list(value) if isinstance(value, tuple) else value)}`"


def type_of(declared: Field) -> str:
    """The key's declared type; a nested declaration's is a mapping."""
    target, each = declared.metadata.get("rule"), declared.metadata.get("each")
    if is_declaration(target) and not each:
        return "mapping | None" if nullable(declared) else "mapping"
    return str(declared.type)


def valid(declared: Field) -> str:
    target, each = declared.metadata.get("rule"), declared.metadata.get("each")
    if is_declaration(target):
        text = "the keys below"
    else:
        text = "" if target is None else target.text
    if text and each:
        return f"entries, each {text}"
    return f"{text}, or null" if text and is_declaration(target) and nullable(declared) else text


def rows(declaration, at: str) -> Iterator[str]:
    """A table row per key under `declaration` at config path `at`, a nested declaration's keys
    after it (a list or mapping entry's as `*`)."""
    for name, declared in declared_keys(declaration).items():
        path = f"{at}.{name}" if at else name
        help_text = declared.metadata.get("help", "")
        parts = [f"`{path}`", type_of(declared), default_of(declared), valid(declared), help_text]
        yield f"| {' | '.join(map(cell, parts))} |"
        target = declared.metadata.get("rule")
        if is_declaration(target):
            yield from rows(target, f"{path}.*" if declared.metadata.get("each") else path)


def loss_parameters() -> list[str]:
    """The table of every loss's parameters: its signature's default and its rule."""
    lines = [
        "## Loss parameters: `objective.terms.*.params`",
        "",
        "Each loss declares its parameters' rules with its entry in `LOSSES`; a parameter without "
        "one takes values of its default's type.",
        "",
        "| loss | parameter | type | default | valid values |",
        "|---|---|---|---|---|",
    ]
    for loss, entry in LOSSES.items():
        for parameter in entry.parameters:
            rule = entry.param_rules[parameter.name]
            default = parameter.default
            parts = [
                f"`{loss}`",
                f"`{parameter.name}`",
                str(parameter.annotation)
                if parameter.annotation is not inspect.Parameter.empty
                else "",
                "" if default is inspect.Parameter.empty else f"`{shown(default)}`",
                "" if rule is None else rule.text,
            ]
            lines.append(f"| {' | '.join(map(cell, parts))} |")
    return lines


def reference() -> str:
    """docs/keys.md: the run's own keys, each group's keys, the losses' parameters."""
    lines = [HEADER, "", "## The run's own keys", "", *COLUMNS, *rows(RunKeys, "")]
    run = declared_keys(RunKeys)
    for group, declared in declared_keys(ConfigKeys).items():
        if group not in run:
            intro = f"`{group}=...`: {declared.metadata['help']}."
            lines += ["", f"## `{group}`", "", intro, "", *COLUMNS]
            each = declared.metadata.get("each")  # `stages.*`: a block per stage
            lines += rows(declared.metadata["rule"], f"{group}.*" if each else group)
    advise = (
        "`python -m kdbench.advise ... advise.budget=2h`: the pilot study's own keys "
        "([own-data.md](own-data.md))."
    )
    lines += ["", "## `advise`", "", advise, "", *COLUMNS, *rows(AdviseKeys, "advise")]
    return "\n".join([*lines, "", *loss_parameters()]) + "\n"


if __name__ == "__main__":
    print(reference(), end="")
