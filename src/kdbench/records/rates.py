"""A run's durations and rates kept apart: a recipe's `timing` names both (`intermediate_s`,
seconds; `intermediate_examples_per_s`, examples per second); a completed record keeps the seconds
in `timing` and the rates in `throughput`, so that no reader sums a rate as a duration."""

from __future__ import annotations

# A rate's name ends so (examples per second); a duration's ends in "_s" alone.
RATE_SUFFIX = "_per_s"


def split_timing(timing) -> tuple[dict[str, float], dict[str, float]]:
    """(durations, rates) of a `timing` dict: its numbers named `*_per_s` are rates (examples per
    second), the others named `*_s` durations (seconds); anything else is neither."""
    numbers = {
        name: float(value)
        for name, value in (timing.items() if isinstance(timing, dict) else ())
        if isinstance(value, int | float) and not isinstance(value, bool)
    }
    rates = {name: value for name, value in numbers.items() if name.endswith(RATE_SUFFIX)}
    durations = {
        name: value for name, value in numbers.items() if name.endswith("_s") and name not in rates
    }
    return durations, rates


def rates_apart(outcome: dict) -> dict:
    """A recipe's outcome with the rates of its `timing` moved to `throughput`, right after it."""
    timing = outcome.get("timing")
    if not isinstance(timing, dict):
        return outcome
    rates = {name: value for name, value in timing.items() if name.endswith(RATE_SUFFIX)}
    apart = {}
    for name, value in outcome.items():
        if name == "timing":
            apart["timing"] = {k: v for k, v in timing.items() if k not in rates}
            apart |= {"throughput": rates} if rates else {}
        else:
            apart[name] = value
    return apart


def contended(cost: dict) -> bool:
    """Whether other work competed for the cores while `cost` was timed: a load average above the
    CPU count (more runnable threads than cores). A record without the figures counts as not."""
    return cost.get("load_1min", 0) > cost.get("cpu_count", float("inf"))
