"""The pilot's design within a budget: its cells (the study's candidates from the inits the
student's shape permits), and its size (training subset, epochs, seeds) from a measured
calibration, by arithmetic alone.

A job's seconds are its fixed part (loading, evaluation) plus, per training example and epoch, each
stage's measured seconds; the teacher's fine-tuning on the whole training set (unless given or
cached) and the teacher's tables on the subset (its features per cell, its logits once) are paid
once (its features by every job instead where each run keeps its table in memory:
`trainer.teacher_features_store`); each sweep command pays a process start. The pilot's subset and
epochs are the largest equal share of the full run's that lets `TARGET_SEEDS` seeds of every cell
fit the budget; with less budget the smallest pilot (`MIN_SUBSET` examples, one epoch) takes fewer
seeds, two at least, and a budget too small for two seeds is refused naming the smallest that fits.
The first `FIRST_SEEDS` seeds' spread then sets the seeds a paired test needs to detect the
smallest difference worth acting on at the Holm level, up to what the budget allows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kdbench.errors import ConfigError
from kdbench.models.layers import copy_mismatch, resolve_init_layers
from kdbench.report.paired import seeds_needed

# The study's answers: vanilla KD (its task-specific recommendation, from the lower layers) and
# MiniLM's attention and value-relation transfer (Table 1's best), and TinyBERT's hidden states
# where the widths let it compare them raw.
OBJECTIVES = ("vanilla_kd", "att_kl+val_kl")
HIDDEN = "hid_seq"
COPY_INITS = ("bottom", "every_kth")
TARGET_SEEDS = 5  # the seeds the pilot is sized for
FIRST_SEEDS = 3  # the seeds whose spread sets the rest
MIN_SUBSET = 100  # the smallest training subset a pilot takes (all examples when fewer)
SWEEPS_PER_GROUP = 2  # a pilot's sweep commands per init: its first seeds, then the rest


@dataclass(frozen=True)
class Calibration:
    """Seconds measured on the device at hand (per training example and epoch where a size
    applies)."""

    teacher: float  # the teacher's fine-tuning
    intermediate: dict[str, float]  # stage 1, per objective (0 or absent: no such stage)
    prediction: float  # stage 2
    tables: dict[str, float]  # the teacher's features table, per objective, per example
    logits: float  # the teacher's logits table, per example
    job: float  # every job, whatever its size
    sweep: float  # every sweep command
    spent: float  # the calibration itself
    tables_each_run: bool = False  # every run builds its features table (kept in memory)


@dataclass(frozen=True)
class Scale:
    """The full run: its training examples, each stage's epochs, whether its teacher is ready."""

    examples: int
    teacher_epochs: int
    intermediate_epochs: int
    prediction_epochs: int
    teacher_ready: bool  # given (teacher.finetuned_path) or cached: nothing to fine-tune


@dataclass(frozen=True)
class Sizing:
    subset: int
    epochs: int  # each stage's, at most its full run's
    first_seeds: int
    max_seeds: int
    fixed_s: float  # calibration, teacher, tables, process starts
    seed_s: float  # one seed of every cell

    def projected_s(self, seeds: int) -> float:
        return self.fixed_s + seeds * self.seed_s


def init_labels(teacher: tuple[int, ...], student: tuple[int, ...]) -> dict[str, str]:
    """The inits a student of (layers, hidden size, feed-forward size, head count) permits from a
    teacher of the same, each with the teacher layers it copies, distinct ones only: a copy where
    the plan takes one (`copy_mismatch`); random where fewer than two copy layers."""
    labels: dict[str, str] = {}
    if copy_mismatch(student[1:], teacher[1:]) is None:
        for name in COPY_INITS:
            try:
                layers = resolve_init_layers(name, None, teacher[0], student[0])
            except ConfigError:
                continue
            label = ",".join(map(str, layers))
            if label not in labels.values():
                labels[name] = label
    if len(labels) < 2:
        labels["random"] = "random"
    return labels


def default_cells(teacher: tuple[int, ...], student: tuple[int, ...]) -> list[tuple[str, str]]:
    """(objective, init) cells of the shapes `init_labels` takes: `OBJECTIVES` (and `HIDDEN` at
    equal widths) from each init the shape permits: six cells for a student of its teacher's block
    shape, two for a narrower one."""
    objectives = OBJECTIVES + ((HIDDEN,) if student[1] == teacher[1] else ())
    return [(objective, init) for init in init_labels(teacher, student) for objective in objectives]


def stage_epochs(scale: Scale, epochs: int) -> tuple[int, int]:
    return min(epochs, scale.intermediate_epochs), min(epochs, scale.prediction_epochs)


def seed_seconds(cal: Calibration, objectives: list[str], scale: Scale, n: int, epochs: int):
    """One seed of every cell (`objectives`: each cell's) on `n` examples for `epochs`."""
    first, second = stage_epochs(scale, epochs)
    per_example = sum(
        first * cal.intermediate.get(o, 0.0) + second * cal.prediction for o in objectives
    )
    tables = feature_tables(cal, objectives, each_run=True)
    return len(objectives) * cal.job + n * (per_example + tables)


def feature_tables(cal: Calibration, objectives: list[str], *, each_run: bool) -> float:
    """Seconds per example of the cells' features tables paid by every run (`each_run`), or once
    per cell."""
    if cal.tables_each_run != each_run:
        return 0.0
    return sum(cal.tables.get(o, 0.0) for o in objectives)


def fixed_seconds(cal: Calibration, objectives: list[str], scale: Scale, n: int, groups: int):
    """What the pilot pays once: calibration, the teacher's fine-tuning (a job of its own), its
    tables on `n` examples, the sweep commands of `groups` inits and the report's."""
    teacher = 0.0
    if not scale.teacher_ready:
        teacher = scale.examples * scale.teacher_epochs * cal.teacher + cal.job + cal.sweep
    tables = n * (feature_tables(cal, objectives, each_run=False) + cal.logits)
    return cal.spent + teacher + tables + (SWEEPS_PER_GROUP * groups + 1) * cal.sweep


def total_seconds(cal, objectives, scale, groups: int, n: int, epochs: int, seeds: int) -> float:
    fixed = fixed_seconds(cal, objectives, scale, n, groups)
    return fixed + seeds * seed_seconds(cal, objectives, scale, n, epochs)


def largest_subset(cal, objectives, scale, groups, epochs, seeds, budget) -> int | None:
    """The most examples (at most the training set's) that `seeds` seeds for `epochs` fit in
    `budget` seconds; None below the smallest subset. The total is linear in the subset."""
    start = total_seconds(cal, objectives, scale, groups, 0, epochs, seeds)
    slope = total_seconds(cal, objectives, scale, groups, 1, epochs, seeds) - start
    fits = scale.examples if slope <= 0 else math.floor((budget - start) / slope)
    fits = min(fits, scale.examples) if budget >= start else -1
    return fits if fits >= min(scale.examples, MIN_SUBSET) else None


def size_pilot(
    cal: Calibration, objectives: list[str], scale: Scale, groups: int, budget: float, most: int
) -> Sizing:
    """The pilot's subset, epochs and seeds within `budget` seconds (see the module); `most`: the
    most seeds a cell gets. A budget too small for two seeds is a ConfigError of one line."""
    top = max(scale.intermediate_epochs, scale.prediction_epochs, 1)
    seeds = min(TARGET_SEEDS, most)
    options = []
    for epochs in range(1, top + 1):
        n = largest_subset(cal, objectives, scale, groups, epochs, seeds, budget)
        if n is not None:
            options.append((min(n / scale.examples, epochs / top), n, epochs))
    if options:
        _, n, epochs = max(options)
    else:
        n, epochs = min(scale.examples, MIN_SUBSET), 1
        seeds = fewer_seeds(cal, objectives, scale, groups, n, budget, seeds)
    fixed = fixed_seconds(cal, objectives, scale, n, groups)
    seed_s = seed_seconds(cal, objectives, scale, n, epochs)
    room = max(seeds, math.floor((budget - fixed) / seed_s)) if seed_s > 0 else most
    return Sizing(n, epochs, min(FIRST_SEEDS, seeds), min(most, room), fixed, seed_s)


def fewer_seeds(cal, objectives, scale, groups, n: int, budget: float, seeds: int) -> int:
    """The most seeds below `seeds`, two at least, of the smallest pilot that fit `budget`."""
    for fewer in range(seeds - 1, 1, -1):
        if total_seconds(cal, objectives, scale, groups, n, 1, fewer) <= budget:
            return fewer
    need = total_seconds(cal, objectives, scale, groups, n, 1, 2)
    raise ConfigError(
        f"advise.budget={duration_text(budget)} is too small: two seeds of {len(objectives)} "
        f"cells on {n} examples for one epoch, with the calibration, the teacher and its tables, "
        f"take about {duration_text(need)} on this device; set "
        f"advise.budget={duration_text(need, up=True)} or more, or fewer advise.candidates"
    )


def duration_text(seconds: float, up: bool = False) -> str:
    """A duration as advise.budget takes it: 1h05m, 45m, 30s (`up`: whole minutes, rounded up)."""
    if up or seconds >= 60:
        minutes = math.ceil(seconds / 60) if up else round(seconds / 60)
        hours, minutes = divmod(minutes, 60)
        return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m"
    return f"{math.ceil(seconds)}s"


def seeds_to_detect(sd: float, min_effect: float, alpha: float, family: int) -> float:
    """The seeds per cell a paired t-test at the Holm level (alpha / the design's pairs) needs to
    detect `min_effect` points with 80% power at the first seeds' spread `sd` (`seeds_needed`);
    NaN where the spread is unknown."""
    if math.isnan(sd):
        return math.nan
    return seeds_needed(math.inf if sd == 0 else min_effect / sd, alpha / family)


def total_seeds(sd: float, min_effect: float, alpha: float, family: int, sizing: Sizing) -> int:
    """The seeds per cell after the first ones: `seeds_to_detect`, from the first seeds up to the
    budget's most (the most where the spread is unknown)."""
    needed = seeds_to_detect(sd, min_effect, alpha, family)
    if math.isnan(needed):
        return sizing.max_seeds
    return int(min(sizing.max_seeds, max(sizing.first_seeds, needed)))
