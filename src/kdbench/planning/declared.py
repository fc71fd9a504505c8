"""A config group's values checked against its declaration, the one home of its keys.

A declaration is a dataclass whose fields are a group's keys, each declared with
`kdbench.planning.rules.key` (its rule, default and help), or a mapping of such fields (the trainer
keys of every setting, `kdbench.planning.trainer_specs.TRAINER_KEYS`). `check_declared` refuses a
key the declaration lacks and the first value its rule does not admit, with a ConfigError naming it
as `path=value` and saying what is valid; a nested declaration is checked the same way, and the
entries of a list or mapping key declared with `each` one by one.
"""

from __future__ import annotations

import difflib
from dataclasses import MISSING, Field, fields, is_dataclass

from kdbench.errors import ConfigError
from kdbench.planning.rules import Rule, shown


def is_declaration(target) -> bool:
    """Whether `target` declares keys (a nested group), rather than being a rule or nothing."""
    return isinstance(target, dict) or (isinstance(target, type) and is_dataclass(target))


def declared_keys(declaration) -> dict[str, Field]:
    """A declaration's keys by name."""
    if isinstance(declaration, dict):
        return declaration
    keys = fields(declaration)
    return {declared.name: declared for declared in keys if not declared.metadata.get("planned")}


def with_defaults(values: dict, declaration) -> dict:
    """`values` with each key they leave out at its declared default, where it has one."""
    keys = declared_keys(declaration).items()
    return {name: f.default for name, f in keys if f.default is not MISSING} | values


def unknown_keys(unknown: list[str], keys: list[str], at: str) -> str:
    """The refusal of keys a declaration lacks: the closest declared key to each, then all."""
    path = f"{at}." if at else ""
    close = [f"{path}{m}" for name in unknown for m in difflib.get_close_matches(name, keys, n=1)]
    hint = f"did you mean {', '.join(close)}? " if close else ""
    return f"{at} has no key {', '.join(unknown)}; {hint}valid keys: {', '.join(keys)}"


def check_declared(values: dict, declaration, at: str) -> dict:
    """`values` (a group's resolved values at config path `at`; "" for the top level), each key
    declared and each value in its range; one value of a list key comes back as a list of one."""
    keys = declared_keys(declaration)
    if unknown := sorted(set(values) - set(keys)):
        raise ConfigError(unknown_keys(unknown, sorted(keys), at))
    return {
        name: check_key(value, keys[name], f"{at}.{name}" if at else name)
        for name, value in values.items()
    }


def nullable(declared: Field) -> bool:
    """Whether a key's declared type admits null (`ShapeSpec | None`)."""
    return "None" in str(declared.type).replace(" ", "").split("|")


def check_key(value, declared: Field, at: str):
    """One key's value against its declaration; a null where its type admits one (`nullable`)
    needs no nested keys or entries."""
    target, each = declared.metadata.get("rule"), declared.metadata.get("each")
    if value is None and nullable(declared) and (each or is_declaration(target)):
        return None
    if not each:
        return check_value(value, target, at)
    if isinstance(value, dict):
        return {name: check_value(entry, target, f"{at}.{name}") for name, entry in value.items()}
    if isinstance(value, list):
        return [check_value(entry, target, f"{at}.{index}") for index, entry in enumerate(value)]
    raise ConfigError(f"{at}={shown(value)} must be a list or a mapping, each entry {what(target)}")


def check_value(value, target, at: str):
    """A value against its rule, or its nested declaration; None governs nothing."""
    if target is None:
        return value
    if isinstance(target, Rule):
        value = target.listed(value)
        if not target.admits(value):
            raise ConfigError(f"{at}={shown(value)} must be {target.text}")
        return value
    if not isinstance(value, dict):
        raise ConfigError(f"{at}={shown(value)} must be {what(target)}")
    return check_declared(value, target, at)


def what(target) -> str:
    """What a value must be, in a message's words."""
    if isinstance(target, Rule):
        return target.text
    if is_declaration(target):
        return f"a mapping of {', '.join(declared_keys(target))}"
    return "any value"
