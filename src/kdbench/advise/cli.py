"""`python -m kdbench.advise task=... teacher=... student=... advise.budget=2h`: a budgeted pilot
study for the user's own teacher and data, decided with the report's tests, and the winner shipped
with its evidence.

1. calibration: a short measured run of each objective (`kdbench.advise.jobs`);
2. the design within the budget (`kdbench.advise.design`): printed, and written with its decision
   rule to advise.out/DESIGN.md (and design.json) before any pilot job, its time and SHA-256
   registered in the ledger;
3. the teacher fine-tuned once on the whole training set (unless given or cached);
4. the pilot, a kdbench sweep per init: its first seeds, then the seeds their spread asks for;
5. the decision (`kdbench.advise.decide`) and the report of the pilot (`kdbench.report`);
6. the answer trained on the whole training set, saved as a student with a model card carrying the
   decision and its evidence; advice.md, whose first lines state the answer and how sure it is,
   also the opening of the report's page.

Re-running the same command resumes: the design is reused, finished jobs are skipped.
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict
from pathlib import Path

from kdbench.advise.decide import (
    ALPHA,
    decide,
    dev_examples,
    in_points,
    none_learned,
    spread,
)
from kdbench.advise.design import Sizing, seeds_to_detect, size_pilot, total_seeds
from kdbench.advise.inputs import Inputs, read_inputs
from kdbench.advise.jobs import (
    CAL_EXAMPLES,
    CALIBRATION,
    FINAL,
    PILOT,
    REPORT,
    TEACHER,
    calibration_command,
    calibration_of,
    completed,
    final_command,
    ledger_seconds,
    pilot_commands,
    register,
    report,
    run_step,
    teacher_command,
)
from kdbench.advise.pages import (
    CARD_HEADING,
    advice_markdown,
    card_section,
    design_markdown,
    plan_lines,
)
from kdbench.errors import ConfigError, KdbenchError
from kdbench.planning.hydra_config import fail
from kdbench.records.record import read_json, write_json
from kdbench.report.paired import MAX_SEEDS
from kdbench.training.signals import SIGINT_EXIT, StoppedAtOnce

DESIGN_JSON, DESIGN_MD, CALIBRATION_JSON = "design.json", "DESIGN.md", "calibration.json"


def asked(inputs: Inputs) -> dict:
    """What the design answers: the shared overrides and the advise keys."""
    return {"overrides": list(inputs.overrides), "advise": inputs.keys}


def calibration(inputs: Inputs):
    """The calibration: this folder's, measured for the same overrides and objectives, else
    measured now."""
    path = inputs.out / CALIBRATION_JSON
    key = {"overrides": list(inputs.overrides), "objectives": [c.objective for c in inputs.cells]}
    saved = read_json(path)
    if saved and saved["asked"] == key:
        return saved["calibration"]
    examples = min(inputs.scale.examples, CAL_EXAMPLES)
    print(
        f"kdbench.advise: calibration: one short job per objective on {examples} examples, "
        "timed to size the pilot; its scores and warnings say nothing of the methods",
        flush=True,
    )
    elapsed = run_step(inputs.out, CALIBRATION, calibration_command(inputs), CALIBRATION)
    measured = asdict(calibration_of(inputs.out / CALIBRATION, examples, elapsed))
    write_json(path, {"asked": key, "calibration": measured})
    return measured


def design_of(inputs: Inputs, argv: list[str]) -> dict:
    """The pilot's design: this folder's, made for the same command, else made now (after the
    calibration) and written, with its decision rule, before any pilot job."""
    from kdbench.advise.design import Calibration

    path = inputs.out / DESIGN_JSON
    saved = read_json(path)
    if saved is not None:
        if saved["asked"] != asked(inputs):
            raise ConfigError(
                f"{inputs.out} holds the pilot of another command (see its {DESIGN_MD}): give "
                "this one its own folder, advise.out=DIR, or remove that one"
            )
        print(f"kdbench.advise: resuming the pilot designed in {inputs.out / DESIGN_MD}")
        return saved
    inputs.out.mkdir(parents=True, exist_ok=True)
    cal = Calibration(**calibration(inputs))
    objectives = [cell.objective for cell in inputs.cells]
    groups = len({cell.init for cell in inputs.cells})
    sizing = size_pilot(
        cal, objectives, inputs.scale, groups, inputs.budget_s, inputs.keys["max_seeds"]
    )
    design = {
        "asked": asked(inputs),
        "command": list(argv),
        "cells": [asdict(cell) for cell in inputs.cells],
        "scale": asdict(inputs.scale),
        "calibration": asdict(cal),
        "sizing": asdict(sizing),
        "alpha": ALPHA,
        "family": len(inputs.cells) * (len(inputs.cells) - 1) // 2,
    }
    (inputs.out / DESIGN_MD).write_text(design_markdown(inputs, design))
    register(inputs.out, inputs.out / DESIGN_MD)
    write_json(path, design)
    return design


def teacher_of(inputs: Inputs) -> str:
    """The fine-tuned teacher every pilot job reads: given, cached, or fine-tuned now."""
    from kdbench.runtime.storage import intact

    if inputs.teacher_path is not None:
        return inputs.teacher_path
    run_step(inputs.out, TEACHER, teacher_command(inputs), TEACHER)
    if not intact(Path(inputs.cache_entry), "the fine-tuned teacher"):
        fail(f"the teacher step left no fine-tuned teacher at {inputs.cache_entry}", 1)
    return inputs.cache_entry


def pilot_frame(inputs: Inputs):
    """The pilot's runs of the design's cells, as the report reads them."""
    from kdbench.report.frames import drop_duplicates, to_frame
    from kdbench.report.load import load_records

    frame, _ = drop_duplicates(to_frame(load_records(inputs.out / PILOT).records))
    names = {cell.name for cell in inputs.cells}
    return frame[(frame["objective"] + "@" + frame["init"]).isin(names)]


def run_pilot(inputs: Inputs, design: dict, teacher: str):
    """The pilot's first seeds, then those their spread asks for; its runs."""
    sizing = Sizing(**design["sizing"])
    first = range(1, sizing.first_seeds + 1)
    for command in pilot_commands(inputs, design, teacher, first):
        run_step(inputs.out, f"pilot seeds 1-{first[-1]}", command, PILOT)
    frame = pilot_frame(inputs)
    early = frame[frame["seed"] <= first[-1]]
    if none_learned(early):
        raise KdbenchError(
            f"every pilot run of seeds 1-{first[-1]} predicts one class: no student learned the "
            f"task on {sizing.subset} examples in {sizing.epochs} epoch(s), so the pilot compares "
            "no methods; raise the students' learning rate (task.lr) or advise.budget, with a new "
            "advise.out"
        )
    sd = spread(early, [cell.name for cell in inputs.cells])  # no seed every cell scored: stop
    effect = in_points(inputs.keys["min_effect"], dev_examples(frame, inputs.out / PILOT))
    seeds = total_seeds(sd, effect, design["alpha"], design["family"], sizing)
    print(spread_line(sd, effect, design, len(first), seeds), flush=True)
    if seeds > first[-1]:
        for command in pilot_commands(inputs, design, teacher, range(first[-1] + 1, seeds + 1)):
            run_step(inputs.out, f"pilot seeds {first[-1] + 1}-{seeds}", command, PILOT)
        frame = pilot_frame(inputs)
    return frame


def spread_line(sd: float, effect: float, design: dict, first: int, seeds: int) -> str:
    """The seeds the first ones' spread asks for (`seeds_to_detect`) and those the pilot runs."""
    level = f"at alpha {design['alpha']}/{design['family']} with 80% power"
    needed = seeds_to_detect(sd, effect, design["alpha"], design["family"])
    if math.isnan(needed):
        asks = "unknown (fewer than 2 seeds every cell scored), so the budget's most"
    else:
        count = f"over {MAX_SEEDS}" if needed >= MAX_SEEDS else f"{needed:.0f}"
        asks = f"{sd:.2f} points: {count} seeds per cell detect {effect:.2f} points {level}"
    allows = f"; the budget allows {seeds}" if needed > seeds else ""
    return (
        f"kdbench.advise: the first {first} seeds' spread (std of paired differences) is {asks}"
        f"{allows}: the pilot runs {seeds} seeds per cell"
    )


def ship(inputs: Inputs, name: str) -> tuple[Path, dict]:
    """The chosen cell on the whole training set: its run folder and record."""
    cell = next(cell for cell in inputs.cells if cell.name == name)
    run_step(inputs.out, FINAL, final_command(inputs, cell.objective, cell.init), FINAL)
    (folder, record), *_ = completed(inputs.out / FINAL)
    return folder, record.as_json()


def add_card_section(card: Path, section: str) -> None:
    """The model card with the advice's section at its end (in place of an earlier one)."""
    text = card.read_text()
    text = text.split(f"\n{CARD_HEADING}")[0].rstrip("\n")
    card.write_text(f"{text}\n\n{section}")


def lead_report(page: Path, advice: str) -> None:
    """The pilot's report page, opening with the advice (its answer and how sure it is first)."""
    from kdbench.report.page import add_lead

    title, *lines = advice.splitlines()
    add_lead(page, title.removeprefix("# "), lines)


def advise(inputs: Inputs, argv: list[str]) -> None:
    design = design_of(inputs, argv)
    print("\n".join(plan_lines(inputs, design)), flush=True)
    frame = run_pilot(inputs, design, teacher_of(inputs))
    dev = dev_examples(frame, inputs.out / PILOT)
    keys = inputs.keys
    margin, effect = in_points(keys["margin"], dev), in_points(keys["min_effect"], dev)
    decision = decide(frame, margin, effect, names=[cell.name for cell in inputs.cells])
    report(inputs.out)
    folder, final = ship(inputs, decision.chosen)
    student = folder / "student"
    add_card_section(student / "README.md", card_section(inputs, design, decision, final))
    projected = Sizing(**design["sizing"]).projected_s(frame["seed"].nunique())
    actual = ledger_seconds(inputs.out, CALIBRATION, TEACHER, PILOT, REPORT)
    times = (projected, actual, final.get("wall_s") or 0.0, student.relative_to(inputs.out))
    advice = advice_markdown(inputs, design, decision, final, times)
    (inputs.out / "advice.md").write_text(advice)
    lead_report(inputs.out / REPORT / "report.html", advice)
    write_json(inputs.out / "decision.json", asdict(decision))
    print("\n".join(advice.splitlines()[:6]), flush=True)
    print(f"kdbench.advise: {inputs.out / 'advice.md'}; the student: {student}", flush=True)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if {"-h", "--help"} & set(argv):
        print(__doc__)
        return
    try:
        advise(read_inputs(argv), argv)
    except KdbenchError as exc:
        fail(str(exc), exc.exit_code)
    except StoppedAtOnce:
        print(
            "kdbench.advise: stopped at once by a second Ctrl-C; re-run the same command to "
            "resume: finished jobs are skipped",
            file=sys.stderr,
        )
        raise SystemExit(SIGINT_EXIT) from None
