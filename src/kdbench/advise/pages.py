"""What the advice writes: the plan it prints, the design (with its decision rule) before the first
pilot job, `advice.md` whose first lines state the answer and how sure it is, and the section of
the shipped student's model card that carries the decision and its evidence."""

from __future__ import annotations

import math

from kdbench.advise import decide as rule
from kdbench.advise.decide import CHEAPEST, UNDECIDED, WINNER, Decision
from kdbench.advise.design import Sizing, duration_text
from kdbench.advise.inputs import Inputs
from kdbench.records.card import speed_line
from kdbench.report.paired import MAX_SEEDS
from kdbench.report.text import format_p, md_row, signed

CARD_HEADING = "## How this recipe was chosen (kdbench.advise)"


def cell_text(cell: dict) -> str:
    layers = "a random init" if cell["label"] == "random" else f"teacher layers {cell['label']}"
    return f"{cell['objective']} from {layers} (init={cell['init']})"


def scale_text(design: dict) -> str:
    sizing, scale = design["sizing"], design["scale"]
    first = min(sizing["epochs"], scale["intermediate_epochs"])
    second = min(sizing["epochs"], scale["prediction_epochs"])
    return (
        f"{sizing['subset']} of {scale['examples']} training examples, {first} and {second} "
        f"epoch(s) of stages 1 and 2 (the full run: {scale['intermediate_epochs']} and "
        f"{scale['prediction_epochs']})"
    )


def plan_lines(inputs: Inputs, design: dict) -> list[str]:
    """The plan, printed before the first pilot job."""
    sizing = Sizing(**design["sizing"])
    cells = ", ".join(f"{c['objective']}@{c['label']}" for c in design["cells"])
    return [
        f"kdbench.advise: the pilot for {inputs.task}, {inputs.teacher} -> {inputs.student}, "
        f"within {inputs.keys['budget']}:",
        f"  cells ({len(design['cells'])}): {cells}",
        f"  pilot: {scale_text(design)}",
        f"  seeds: {sizing.first_seeds} first; then, from their spread, those that detect "
        f"{inputs.keys['min_effect']:g} dev examples, at most {sizing.max_seeds}",
        f"  projected: {hours(sizing.projected_s(sizing.first_seeds))} with "
        f"{sizing.first_seeds} seeds, {hours(sizing.projected_s(sizing.max_seeds))} with "
        f"{sizing.max_seeds} (calibration, teacher, tables and process starts: "
        f"{hours(sizing.fixed_s)})",
        f"  design and decision rule: {inputs.out / 'DESIGN.md'}",
    ]


def hours(seconds: float) -> str:
    """A wall time: 1h05m (1.08 h), 45m, 30s."""
    text = duration_text(seconds)
    return f"{text} ({seconds / 3600:.2f} h)" if seconds >= 3600 else text


def pairs_text(n: int) -> str:
    return f"{n} pair" if n == 1 else f"{n} pairs"


def rule_text(inputs: Inputs, design: dict) -> list[str]:
    keys = inputs.keys
    return [
        "## Decision rule",
        "",
        rule.__doc__.strip(),
        "",
        f"Numbers: alpha {design['alpha']}; the design's {pairs_text(design['family'])} of cells; "
        f"margin {keys['margin']:g} dev examples; smallest difference worth acting on "
        f"{keys['min_effect']:g} dev examples (`advise.margin`, `advise.min_effect`).",
    ]


def design_markdown(inputs: Inputs, design: dict) -> str:
    """DESIGN.md: written before the pilot's first job, never edited after."""
    cal = design["calibration"]
    rows = [
        md_row([f"`{c['objective']}@{c['label']}`", c["objective"], c["init"], c["label"]])
        for c in design["cells"]
    ]
    lines = [
        f"# Pilot design: {inputs.task}, {inputs.teacher} -> {inputs.student}",
        "",
        "Written by `python -m kdbench.advise` before the pilot's first job; not edited after.",
        "",
        f"Command: `python -m kdbench.advise {' '.join(design['command'])}`",
        "",
        "## Question",
        "",
        f"Which objective and init distil {inputs.teacher} into {inputs.student} best on this "
        f"data, within a pilot budget of {inputs.keys['budget']}.",
        "",
        "## Cells",
        "",
        "| cell | objective | init | teacher layers |",
        "|---|---|---|---|",
        *rows,
        "",
        "## Size",
        "",
        *(f"- {line.strip()}" for line in plan_lines(inputs, design)[2:5]),
        f"- calibration (seconds per training example and epoch, measured here): teacher "
        f"{cal['teacher']:.4f}, stage 2 {cal['prediction']:.4f}, stage 1 "
        + ", ".join(f"{o} {s:.4f}" for o, s in cal["intermediate"].items())
        + f"; per job {cal['job']:.1f} s, per sweep command {cal['sweep']:.1f} s",
        "",
        *rule_text(inputs, design),
        "",
    ]
    return "\n".join(lines)


def answer_lines(decision: Decision, design: dict) -> list[str]:
    """The answer and how sure it is, in two lines."""
    chosen = cell_text(cell_by_name(design, decision.chosen))
    n, m = seeds_compared(decision), decision.family
    if decision.kind == WINNER:
        worst = max(pair.p_holm for pair in decision.pairs)
        return [
            f"**Answer: {chosen}.**",
            f"Sure at alpha {decision.alpha}: it scores significantly above every other cell "
            f"(paired t-tests over {n}, Holm over the design's {pairs_text(m)}; the largest Holm "
            f"p {format_p(worst)}).",
        ]
    if decision.kind == CHEAPEST:
        ties = [p for p in decision.pairs if p.verdict == rule.EQUIVALENT]
        tied = ", ".join(f"{p.other} (TOST Holm p {format_p(p.tost_p_holm)})" for p in ties)
        below = len(decision.pairs) - len(ties)
        rest = f"; the {below} other cell(s) score significantly below the best" if below else ""
        return [
            f"**Answer: {chosen}**, the cheapest of the cells as good as the best.",
            f"Sure at alpha {decision.alpha}: {'each of ' if len(ties) > 1 else ''}{tied} lies "
            f"within +-{decision.margin:.2f} points of the best, {decision.best} (an equivalence "
            f"test of each against the best over {n}, Holm over {pairs_text(m)}){rest}.",
        ]
    open_pairs = [p for p in decision.pairs if p.verdict == rule.OPEN]
    one = len(open_pairs) == 1
    return [
        f"**No decision within the budget.** Shipped provisionally: {chosen}, the cheapest cell no "
        "test put below the best.",
        f"Not sure: {', '.join(p.other for p in open_pairs)} neither "
        f"{'differs' if one else 'differ'} significantly from the best, {decision.best}, nor "
        f"{'is' if one else 'are'} shown equivalent to it after {n}; " + more_seeds_text(decision),
    ]


def seeds_compared(decision: Decision) -> str:
    """The seeds the decision compares the cells on: "the 4 seeds every cell scored"."""
    n = decision.seeds_run
    return f"the {n} seed{'' if n == 1 else 's'} every cell scored"


def pilot_line(design: dict, decision: Decision) -> str:
    """The pilot's scale and the seeds compared, naming the runs left out."""
    left = ", ".join(f"{cell}'s seed {seed}" for cell, seed in decision.left_out)
    why = f"; left out, as some cell has no score for their seed: {left}" if left else ""
    return f"The pilot: {scale_text(design)}; compared on {seeds_compared(decision)}{why}."


def more_seeds_text(decision: Decision) -> str:
    """The seeds per cell that give each open pair 80% power, at its observed spread, to detect
    the larger of its difference and the smallest worth acting on, or to show it equivalent (what
    `decide.seeds_to_decide` computes), or why they cannot be estimated: the spread of the paired
    differences takes 2 seeds every cell scored."""
    if decision.seeds_needed is None:
        return (
            "the seeds it needs cannot be estimated: they follow from the spread of "
            "each open pair's differences over the seeds every cell scored, which takes 2."
        )
    power = (
        "80% power, at each open pair's observed spread, to detect the larger of its difference "
        f"and {decision.min_effect:.2f} points or to show it within the margin where its "
        "difference lies inside it"
    )
    if decision.seeds_needed >= MAX_SEEDS:
        return f"over {MAX_SEEDS} seeds per cell would be needed for {power}."
    return (
        f"about {decision.seeds_needed} seeds per cell (about {duration_text(decision.more_s)} "
        f"more of this pilot) give {power}."
    )


def cell_by_name(design: dict, name: str) -> dict:
    return next(c for c in design["cells"] if f"{c['objective']}@{c['label']}" == name)


def evidence_table(decision: Decision) -> list[str]:
    """Every cell: its mean and std over seeds, its training time, and its test against the
    best."""
    pairs = {pair.other: pair for pair in decision.pairs}
    lines = [
        "| cell | mean | std | seeds | stage 1 | training (s) | best - cell | Holm p | TOST Holm p "
        "| verdict |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    for cell in sorted(decision.cells, key=lambda c: -c.mean):
        pair = pairs.get(cell.name)
        test = (
            [signed(pair.diff, 2), format_p(pair.p_holm), format_p(pair.tost_p_holm), pair.verdict]
            if pair
            else ["", "", "", "best" + (" (chosen)" if cell.name == decision.chosen else "")]
        )
        if pair and cell.name == decision.chosen:
            test[-1] += " (chosen)"
        head = [f"`{cell.name}`", f"{cell.mean:.2f}", std_text(cell.std), str(cell.seeds)]
        lines.append(md_row([*head, "yes" if cell.staged else "no", f"{cell.train_s:.1f}", *test]))
    return lines


def std_text(value: float) -> str:
    return "" if math.isnan(value) else f"{value:.2f}"


def held_line(decision: Decision, final: dict) -> str:
    """The chosen cell's full-data score beside its pilot score, and whether the decision (the
    provisional choice, undecided) held: the full run scores no lower than the pilot's mean less
    the margin."""
    pilot = decision.cell(decision.chosen)
    score = final["score"]
    held = score >= pilot.mean - decision.margin
    choice = "the provisional choice" if decision.kind == UNDECIDED else "the decision"
    verdict = (
        f"{choice} held: the full run scores no lower than the pilot, less the margin"
        if held
        else f"{choice} did not hold: the full run scores below the pilot by more than the "
        "margin; the pilot's scale may not carry to the full data"
    )
    return (
        f"The chosen cell scored {score:.2f} on the full training set against {pilot.mean:.2f} "
        f"(std {std_text(pilot.std)}, {pilot.seeds} seeds) in the pilot: {verdict}. One full run "
        "checks the recipe at full scale, not the pilot's ranking."
    )


def cost_line(final: dict) -> str:
    """The student's measured cost against its teacher's, as its model card states it."""
    return speed_line(final.get("cost"))


def kind_title(decision: Decision) -> str:
    return {WINNER: "a clear winner", CHEAPEST: "the cheapest equivalent", UNDECIDED: "none"}[
        decision.kind
    ]


def evidence_lines(decision: Decision, inputs: Inputs) -> list[str]:
    keys = inputs.keys
    return [
        f"Decision: {kind_title(decision)}, by the rule in DESIGN.md: alpha {decision.alpha}, "
        f"Holm over the design's {pairs_text(decision.family)}, margin "
        f"+-{decision.margin:.2f} points ({keys['margin']:g} dev examples), smallest difference "
        f"worth acting on {decision.min_effect:.2f} points ({keys['min_effect']:g} dev examples).",
        "",
        *evidence_table(decision),
    ]


def card_section(inputs: Inputs, design: dict, decision: Decision, final: dict) -> str:
    """The model card's section: the decision, its evidence, the pilot's scale against the full
    run's."""
    return "\n".join(
        [
            CARD_HEADING,
            "",
            *answer_lines(decision, design),
            "",
            pilot_line(design, decision),
            held_line(decision, final),
            "",
            *evidence_lines(decision, inputs),
            "",
        ]
    )


def advice_markdown(inputs: Inputs, design: dict, decision: Decision, final: dict, times) -> str:
    """advice.md: the answer and how sure it is first; then the scale, the evidence, the student
    and the time. `times`: (projected, actual) seconds of the pilot, the full run's, its folder."""
    projected, actual, final_s, student = times
    return "\n".join(
        [
            f"# Advice: {inputs.task}, {inputs.teacher} -> {inputs.student}",
            "",
            *answer_lines(decision, design),
            "",
            pilot_line(design, decision),
            held_line(decision, final),
            "",
            "## Evidence",
            "",
            *evidence_lines(decision, inputs),
            "",
            "## The student",
            "",
            f'`{student}` loads with `pipeline("text-classification", model=...)`; its model '
            "card (README.md) carries this decision and its evidence.",
            cost_line(final),
            "",
            "## Time",
            "",
            f"The pilot: projected {hours(projected)}, took {hours(actual)} (calibration, "
            f"teacher, pilot jobs and report); the full run took {hours(final_s)}.",
            "",
            "Files: `DESIGN.md` (the design and its decision rule, written before the pilot), "
            "`pilot/` (its runs), `report/report.html` (the report's tables, tests and plots), "
            "`final/` (the full run), `decision.json`.",
            "",
        ]
    )
