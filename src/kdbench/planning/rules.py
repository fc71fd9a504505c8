"""What a config value may be: a `Rule` admits values and says which in a message's words.

The rules here are the building blocks; `key` declares a config key once with its rule, default and
help: the specs (`kdbench.planning.specs`, `kdbench.planning.trainer_specs`) and the groups' own
declarations (`kdbench.planning.group_keys`) declare every key so, and `kdbench.planning.declared`
checks a group's values against them.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field


@dataclass(frozen=True)
class Rule:
    """What a config key admits, and how a message says it."""

    admits: Callable[[object], bool]
    text: str  # completes "must be ...", e.g. "a positive integer"
    # a list's rule of each entry, where one value stands for a list of one (`metric=pearson`)
    entry: Rule | None = None

    def or_null(self, meaning: str) -> Rule:
        return Rule(
            lambda value: value is None or self.admits(value),
            f"{self.text}, or null ({meaning})",
            self.entry,
        )

    def listed(self, value):
        """`value` as the rule reads it: one value a list-of-any-length rule's entry admits is a
        list of one."""
        one = self.entry is not None and not isinstance(value, list) and value is not None
        return [value] if one and self.entry.admits(value) else value


def is_integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    """A finite int or float; a bool is not a number here (`true` for a count is a mistake)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def integer(low: int, high: int | None = None, text: str | None = None) -> Rule:
    default = f"an integer >= {low}" if high is None else f"an integer from {low} to {high}"

    def admits(value) -> bool:
        return is_integer(value) and low <= value and (high is None or value <= high)

    return Rule(admits, text or default)


def number(
    low: float,
    high: float | None = None,
    *,
    open_low: bool = False,
    open_high: bool = False,
    text: str | None = None,
) -> Rule:
    """A finite number from `low` (excluded with `open_low`) to `high` (excluded with
    `open_high`; None: no bound)."""

    def admits(value) -> bool:
        above = is_number(value) and (value > low if open_low else value >= low)
        return above and (high is None or (value < high if open_high else value <= high))

    if high is None:
        default = f"a number {'>' if open_low else '>='} {low}"
    else:
        default = f"a number in {'(' if open_low else '['}{low}, {high}{')' if open_high else ']'}"
    return Rule(admits, text or default)


def choice(*values: str, meaning: str) -> Rule:
    return Rule(
        lambda value: isinstance(value, str) and value in values,
        f"one of {', '.join(values)} ({meaning})",
    )


def entries(rule: Rule, count: int | None = None, text: str | None = None) -> Rule:
    """A list whose every entry `rule` admits (exactly `count` of them when given)."""

    def admits(value) -> bool:
        return (
            isinstance(value, list) and count in (None, len(value)) and all(map(rule.admits, value))
        )

    text = text or f"a list of {count or 'any number of'} entries, each {rule.text}"
    return Rule(admits, text, rule if count is None else None)


COUNT = integer(1, text="a positive integer")
NON_NEGATIVE_COUNT = integer(0, text="a non-negative integer")
SEED = integer(0, 2**32 - 1)
POSITIVE = number(0, open_low=True)
NON_NEGATIVE = number(0)
PROBABILITY = number(0, 1)
FRACTION = number(0, 1, open_high=True)
LEARNING_RATE = number(0, open_low=True, text="a positive learning rate, e.g. 1e-5")
FLAG = Rule(lambda value: isinstance(value, bool), "true or false")
TEXT = Rule(lambda value: isinstance(value, str) and bool(value), "a non-empty name")
NAME_OR_NUMBER = Rule(lambda value: isinstance(value, (str, int)) and value != "", "a name")
COLUMN = Rule(
    lambda value: NON_NEGATIVE_COUNT.admits(value) or isinstance(value, str),
    "a column name, or a column position from 0 in a file without a header",
)


def key(rule, default=MISSING, *, each: bool = False, how: bool = False, help: str = ""):
    """A config key, declared once: the range `rule` of its value (of each of its entries, with
    `each`), or the declaration its value follows (a dataclass of keys, or a mapping of them: a
    nested group); its `default` where a group leaves it out; `how`: whether it changes how a run
    computes, not what (`COMPUTATION_ONLY`); `help`: what it sets, in one line."""
    metadata = {"rule": rule, "each": each, "how": how, "help": help}
    return field(default=default, metadata=metadata)


def like(default) -> Rule | None:
    """A rule admitting the values of `default`'s type: a flag for a flag, an integer for an
    integer, a number for a float, text for text; None for a default of another type (or none)."""
    if isinstance(default, bool):
        return FLAG
    if isinstance(default, int):
        return Rule(is_integer, "an integer")
    if isinstance(default, float):
        return Rule(is_number, "a number")
    if isinstance(default, str):
        return Rule(lambda value: isinstance(value, str), "text")
    return None


def shown(value) -> str:
    """A value as an override writes it: true, null, 'text', [1, 2]."""
    if isinstance(value, list):
        return f"[{', '.join(map(shown, value))}]"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    return repr(value) if isinstance(value, str) else str(value)


DEVICE_BATCH = Rule(
    lambda value: value is None or value == "auto" or COUNT.admits(value),
    "auto (what fits a GPU's memory, up to 64 elsewhere), a positive integer, or null (the whole "
    "batch)",
)
DEVICE = Rule(lambda value: isinstance(value, str), "a device: auto, cpu, cuda or cuda:N")
WORKERS = Rule(
    lambda value: value == "auto" or NON_NEGATIVE_COUNT.admits(value),
    "auto or a number of DataLoader worker processes (0: none)",
)


_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?")


def duration_seconds(value) -> float | None:
    """Seconds of a duration written as hours, minutes and seconds, each optional but one, in that
    order (`2h`, `90m`, `1h30m`, `1.5h`, `45s`); None for anything else or a zero duration."""
    if not isinstance(value, str):
        return None
    found = _DURATION.fullmatch(value.strip().lower())
    if not found or not any(found.groups()):
        return None
    hours, minutes, seconds = (float(part or 0) for part in found.groups())
    total = 3600 * hours + 60 * minutes + seconds
    return total if total > 0 else None


DURATION = Rule(
    lambda value: duration_seconds(value) is not None,
    "a duration in hours, minutes and seconds, e.g. 2h, 90m or 1h30m",
)
