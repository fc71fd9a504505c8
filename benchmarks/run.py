"""kdbench against the peers, side by side: `python benchmarks/run.py [--quick] [--only GROUP ...]`
(make bench).

Runs every case of every group in its own process (`measure.py`), each implementation in turn,
`--repeats` times, appends the raw measurements to benchmarks/raw.jsonl, and writes
benchmarks/RESULTS.md from them (medians over repeats, ratios to the peers, the machine). `--report`
rewrites RESULTS.md from raw.jsonl only. Needs the benchmark environment (make bench-env:
TextBrewer), KDBENCH_GLUE_DIR / KDBENCH_MODELS_DIR with the MiniLM-L6 teacher, and KDBENCH_CORPUS (a
WikiExtractor dump or text) for the sequence-length series.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
PEERS = ("tuned", "plain", "textbrewer_dynamic", "textbrewer")
NAMES = {
    "kdbench": "kdbench",
    "tuned": "tuned loop",
    "plain": "plain loop",
    "textbrewer_dynamic": "TextBrewer dyn.",
    "textbrewer": "TextBrewer padded",
}
GROUPS = ("main", "seq_len", "layers", "features", "bf16", "recompute", "compile", "study")
STUDY = {
    "kdbench": "kdbench",
    "tuned": "tuned loop",
    "textbrewer": "TextBrewer",
}  # whole-study implementations
STUDY_SEEDS = ("1", "2")
VARIANTS = (
    "features",
    "bf16",
    "recompute",
    "compile",
)  # groups of kdbench's optional settings, measured against its default
LOW_MEMORY = ["trainer.recompute_attention=true"]  # kdbench's setting for long sequences on a CPU
IMPLEMENTATIONS = ("kdbench", *PEERS)
BASE = {"seq_len": 128, "student_layers": 3, "warmup": 2, "seed": 1}


def groups(quick: bool) -> dict[str, list[dict]]:
    """The benchmark cases by group; `quick` shrinks the step counts (a smoke run of the whole
    script)."""
    steps = (lambda n: 2) if quick else (lambda n: n)
    main = [
        {**BASE, "task": task, "objective": objective, "batch_size": batch, "steps": steps(10)}
        for task, batch in (("sst2", 32), ("rte", 16))
        for objective in ("att_kl+val_kl", "hid_seq", "vanilla_kd")
    ]
    seq_len = [
        {
            **BASE,
            "task": "wiki",
            "objective": "att_kl+val_kl",
            "seq_len": length,
            "batch_size": 8,
            "steps": steps(8 if length <= 128 else 4),
        }
        for length in (64, 128, 256, 512)
    ]
    layers = [
        {
            **BASE,
            "task": "sst2",
            "objective": "att_kl+val_kl",
            "student_layers": k,
            "batch_size": 32,
            "steps": steps(6),
        }
        for k in (1, 2, 3, 6)
    ]
    # kdbench's optional settings, kdbench only: bf16 autocast (a CPU with bf16 support, or a GPU)
    # on the SST-2 stage-1 case; recomputation and the reference (autograd) losses on the longest
    # sequences
    long = seq_len[-1]
    recompute = [
        {**long, "overrides": o}
        for o in (
            LOW_MEMORY,
            ["trainer.fused_losses=false"],
            ["trainer.fused_losses=false", "trainer.recompute_losses=true"],
        )
    ]
    return {
        "main": main,
        "seq_len": seq_len,
        "layers": layers,
        "features": [{**c, "features": True} for c in main[:2]],
        "bf16": [{**main[0], "precision": "bf16"}],
        "recompute": recompute,
        "compile": [{**main[0], "overrides": ["trainer.compile=true"]}],
    }


def case_key(spec: dict) -> tuple:
    return tuple(
        spec.get(k) for k in ("task", "objective", "seq_len", "student_layers", "batch_size")
    )


def setting(row: dict) -> str:
    """A kdbench variant's setting, as the overrides that give it."""
    overrides = list(row.get("overrides", []))
    if row.get("precision") == "bf16":
        overrides.append("trainer.precision=bf16 (losses in float32)")
    if row.get("features"):
        overrides.append(
            "trainer.cache_teacher_features=true (the default in runs; built once, untimed)"
        )
    return " ".join(f"`{o}`" for o in overrides)


def measure(spec: dict) -> dict:
    proc = subprocess.run(
        [sys.executable, str(HERE / "measure.py"), json.dumps(spec)], capture_output=True, text=True
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        raise SystemExit(f"benchmarks: {spec['impl']} failed on {case_key(spec)}: {tail[0]}")
    return json.loads(lines[-1])


def machine() -> dict:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    versions = {}
    for package in ("torch", "transformers", "textbrewer"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "gpu": gpu,
        "python": platform.python_version(),
        **versions,
    }


def measure_study(impl: str, quick: bool) -> dict:
    """One timed whole study (study.py) of one implementation; `quick`: a tiny one that checks the
    script."""
    tiny = (
        [
            "--overrides",
            "data.train_limit=32",
            "data.eval_limit=32",
            "stages.teacher.epochs=1",
            "stages.intermediate.epochs=1",
            "stages.prediction.epochs=1",
        ]
        if quick
        else []
    )
    proc = subprocess.run(
        [sys.executable, str(HERE / "study.py"), impl, "--seeds", *STUDY_SEEDS, *tiny],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        raise SystemExit(f"benchmarks: the whole study failed with {impl}: {tail[0]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_study(repeats: int, quick: bool, out) -> None:
    for repeat in range(repeats):
        for impl in STUDY:
            result = {
                **measure_study(impl, quick),
                "group": "study",
                "repeat": repeat,
                "quick": quick,
            }
            out.write(json.dumps(result) + "\n")
            out.flush()
            print(f"study {impl} #{repeat}: {result['seconds']:.0f} s", flush=True)


def run(selected: list[str], repeats: int, quick: bool, raw: Path) -> None:
    cases = groups(quick)
    with raw.open("a") as out:
        check = measure({**cases["main"][0], "impl": "check", "group": "check"})
        out.write(json.dumps(check) + "\n")
        print(
            f"check: kdbench loss {check['kdbench_loss']:.6f}, plain {check['plain_loss']:.6f}, "
            f"tuned {check['tuned_loss']:.6f}",
            flush=True,
        )
        for group in selected:
            if group == "study":
                run_study(repeats, quick, out)
                continue
            for spec in cases[group]:
                for repeat in range(repeats):
                    for impl in ("kdbench",) if group in VARIANTS else IMPLEMENTATIONS:
                        result = measure({**spec, "impl": impl, "group": group, "repeat": repeat})
                        out.write(json.dumps(result) + "\n")
                        out.flush()
                        print(
                            f"{group} {case_key(spec)} {impl} #{repeat}: "
                            f"{result['examples_per_s']:.1f} ex/s, "
                            f"peak {result['peak_mib']:.0f} MiB",
                            flush=True,
                        )


# ---- the report
# ------------------------------------------------------------------------------------------


def medians(rows: list[dict]) -> dict[tuple, dict[str, dict[str, float]]]:
    """{case: {impl: {metric: median over repeats}}}"""
    grouped: dict[tuple, dict[str, list[dict]]] = {}
    for row in rows:
        grouped.setdefault(case_key(row), {}).setdefault(row["impl"], []).append(row)
    return {
        case: {
            impl: {
                m: statistics.median(r.get(m, math.nan) for r in runs)
                for m in ("examples_per_s", "tokens_per_s", "peak_mib", "warmup_s")
            }
            | {"n": len(runs)}
            for impl, runs in impls.items()
        }
        for case, impls in grouped.items()
    }


def describe(case: tuple) -> str:
    task, objective, seq_len, layers, batch = case
    stage = "stage 2 (KD)" if objective == "vanilla_kd" else f"stage 1 ({objective})"
    data = {"sst2": "SST-2", "rte": "RTE", "wiki": "Wikipedia, packed"}[task]
    return (
        f"{data}, {stage}, max len {seq_len}, {layers} "
        f"mapped layer{'s' * (layers > 1)}, batch {batch}"
    )


def table(group_rows: list[dict], title: str) -> list[str]:
    peers = [p for p in PEERS if any(r["impl"] == p for r in group_rows)]
    impls = ["kdbench", *peers]
    lines = [
        f"### {title}",
        "",
        "| case | "
        + " | ".join(f"{NAMES[i]} ex/s" for i in impls)
        + " | "
        + " | ".join(f"vs {NAMES[p]}" for p in peers)
        + " | peak MiB "
        + " / ".join(NAMES[i] for i in impls)
        + " | n |",
        "|---|" + "---:|" * (2 * len(impls) + 1),
    ]
    for case, measured in medians(group_rows).items():
        if not all(i in measured for i in impls):
            continue
        speed = [measured[i]["examples_per_s"] for i in impls]
        lines.append(
            f"| {describe(case)} | "
            + " | ".join(f"{v:.1f}" for v in speed)
            + " | "
            + " | ".join(f"**{speed[0] / v:.2f}x**" for v in speed[1:])
            + " | "
            + " / ".join(f"{measured[i]['peak_mib']:.0f}" for i in impls)
            + f" | {measured['kdbench']['n']} |"
        )
    return lines + [""]


def targets(rows: list[dict]) -> list[str]:
    """The speed targets, each against its measured ratio."""
    main = medians([r for r in rows if r.get("group") == "main"])
    lengths = medians([r for r in rows if r.get("group") == "seq_len"])
    checks = []

    def ratio(table, case_match, metric, peer):
        for case, impls in table.items():
            if case_match(case) and "kdbench" in impls and peer in impls:
                return impls["kdbench"][metric] / impls[peer][metric]
        return None

    sst2_stage1 = lambda c: c[0] == "sst2" and c[1] == "att_kl+val_kl"  # noqa: E731
    speed = "examples_per_s"
    for name, value, goal, better in (
        (
            "stage 1 att_kl+val_kl on SST-2, examples/s vs the tuned loop (same batches)",
            ratio(main, sst2_stage1, speed, "tuned"),
            1,
            "ge",
        ),
        (
            "stage 1 hid_seq on SST-2, examples/s vs the tuned loop (same batches)",
            ratio(main, lambda c: c[0] == "sst2" and c[1] == "hid_seq", speed, "tuned"),
            1,
            "ge",
        ),
        (
            "stage 1 att_kl+val_kl on SST-2, examples/s vs TextBrewer (padded batches)",
            ratio(main, sst2_stage1, speed, "textbrewer"),
            2,
            "ge",
        ),
        (
            "stage 1 att_kl+val_kl on SST-2, examples/s vs plain loop (padded batches)",
            ratio(main, sst2_stage1, speed, "plain"),
            3,
            "ge",
        ),
        (
            "stage 2 (cached logits) on SST-2, examples/s vs plain loop (padded batches)",
            ratio(
                main, lambda c: c[0] == "sst2" and c[1] == "vanilla_kd", "examples_per_s", "plain"
            ),
            3,
            "ge",
        ),
        (
            "stage 2 (cached logits) on SST-2, examples/s vs the tuned loop (same batches, teacher "
            "recomputed)",
            ratio(
                main, lambda c: c[0] == "sst2" and c[1] == "vanilla_kd", "examples_per_s", "tuned"
            ),
            1,
            "ge",
        ),
        (
            "stage 2 (cached logits) on RTE, examples/s vs plain loop (padded batches)",
            ratio(
                main, lambda c: c[0] == "rte" and c[1] == "vanilla_kd", "examples_per_s", "plain"
            ),
            3,
            "ge",
        ),
        (
            "whole study (study.py), wall time of the tuned loop over kdbench's",
            study_ratio(rows, "tuned"),
            2,
            "ge",
        ),
        (
            "whole study (study.py), wall time of TextBrewer over kdbench's",
            study_ratio(rows, "textbrewer"),
            2,
            "ge",
        ),
        (
            "peak memory at length 512 vs plain loop",
            ratio(lengths, lambda c: c[2] == 512, "peak_mib", "plain"),
            0.5,
            "le",
        ),
        (
            "peak memory at length 512 vs plain loop, kdbench with "
            + setting({"overrides": LOW_MEMORY}),
            low_memory_ratio(rows),
            0.5,
            "le",
        ),
    ):
        if value is not None:
            met = value >= goal if better == "ge" else value <= goal
            sign = ">=" if better == "ge" else "<="
            checks.append(
                f"| {name} | {sign} {goal}x | {value:.2f}x | {'met' if met else '**not met**'} |"
            )
    if not checks:
        return []
    return ["### Targets", "", "| target | goal | measured | |", "|---|---:|---:|---|", *checks, ""]


def study_ratio(rows: list[dict], peer: str) -> float | None:
    seconds = study_seconds(rows)
    return seconds[peer] / seconds["kdbench"] if peer in seconds and "kdbench" in seconds else None


def low_memory_ratio(rows: list[dict]) -> float | None:
    """kdbench's peak at length 512 with its long-sequence setting over the plain loop's (the
    seq_len group's)."""
    low = medians(
        [r for r in rows if r.get("group") == "recompute" and r.get("overrides") == LOW_MEMORY]
    )
    plain = medians([r for r in rows if r.get("group") == "seq_len" and r["impl"] == "plain"])
    ours = next(
        (impls["kdbench"]["peak_mib"] for case, impls in low.items() if case[2] == 512), None
    )
    theirs = next(
        (impls["plain"]["peak_mib"] for case, impls in plain.items() if case[2] == 512), None
    )
    return ours / theirs if ours and theirs else None


def seconds(value: float) -> str:
    return "not recorded" if math.isnan(value) else f"{value:.1f}"


def variant_lines(rows: list[dict]) -> list[str]:
    """kdbench's optional settings against its defaults on the same case."""
    defaults = medians(
        [r for r in rows if r.get("group") in ("main", "seq_len") and r["impl"] == "kdbench"]
    )
    lines = []
    variants = [r for r in rows if r.get("group") in VARIANTS]
    for text in dict.fromkeys(setting(r) for r in variants):
        for case, impls in medians([r for r in variants if setting(r) == text]).items():
            base, new = defaults.get(case, {}).get("kdbench"), impls["kdbench"]
            if base:
                lines.append(
                    f"| {describe(case)} | {text} | {new['examples_per_s']:.2f} vs "
                    f"{base['examples_per_s']:.2f} "
                    f"({new['examples_per_s'] / base['examples_per_s']:.2f}x) | "
                    f"{new['peak_mib']:.0f} vs "
                    f"{base['peak_mib']:.0f} ({new['peak_mib'] / base['peak_mib']:.2f}x) "
                    f"| {seconds(new['warmup_s'])} vs {seconds(base['warmup_s'])} |"
                )
    if not lines:
        return []
    return [
        "### kdbench's optional settings",
        "",
        "| case | setting | examples/s (vs default) | peak MiB (vs default) | warm-up steps, s (vs "
        "default) |",
        "|---|---|---:|---:|---:|",
        *lines,
        "",
    ]


def study_runs(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r.get("group") == "study" and not r.get("quick")]


def study_seconds(rows: list[dict]) -> dict[str, float]:
    """The median wall time of the whole study per implementation."""
    runs = study_runs(rows)
    return {
        impl: statistics.median(r["seconds"] for r in runs if r["impl"] == impl)
        for impl in STUDY
        if any(r["impl"] == impl for r in runs)
    }


def study_lines(rows: list[dict]) -> list[str]:
    """The whole-study wall times: median per implementation, kdbench's ratio to each, the jobs'
    mean accuracy."""
    runs = study_runs(rows)
    if not runs:
        return []
    by_impl = {
        impl: [r for r in runs if r["impl"] == impl]
        for impl in STUDY
        if any(r["impl"] == impl for r in runs)
    }
    seconds = study_seconds(rows)
    first = runs[0]
    lines = [
        "### A whole small study, end to end",
        "",
        "mini_table1's design (SST-2, 1000 training examples, teacher fine-tuned once, stage 1 "
        "two epochs, stage "
        f"2 three, dev evaluation) for the objectives {', '.join(first['objectives'])} and seeds "
        f"{', '.join(map(str, first['seeds']))}: every job of the study in one fresh process per "
        "implementation "
        "(`study.py`), timed from outside: imports, data, the teacher's fine-tuning and every job, "
        "all on the same "
        "length-grouped batches. kdbench: its sweep with its defaults from an empty cache (the "
        "teacher's "
        "logits and stage-1 features computed once, shared by every job and epoch); tuned loop and "
        "TextBrewer: "
        "the teacher recomputed every step.",
        "",
        "| implementation | wall time, s | kdbench's speed-up over it | mean dev accuracy of the "
        "jobs | n |",
        "|---|---:|---:|---:|---:|",
    ]
    for impl, found in by_impl.items():
        accuracy = statistics.mean(job["accuracy"] for r in found for job in r["jobs"])
        ratio = seconds[impl] / seconds["kdbench"] if "kdbench" in seconds else math.nan
        lines.append(
            f"| {STUDY[impl]} | {seconds[impl]:.0f} | "
            f"{'' if impl == 'kdbench' else f'**{ratio:.2f}x**'} "
            f"| {accuracy:.1f} | {len(found)} |"
        )
    return lines + [""]


PHASE_NAMES = {
    "teacher": "the teacher's fine-tuning",
    "intermediate": "stage 1 (every job's training loop)",
    "prediction": "stage 2 (every job's training loop)",
    "eval": "dev evaluation",
    "other": "the rest: imports, data, the caches' tables, Hydra, records",
}
# the phases' names in rows measured before the stages were named (raw.jsonl keeps them)
EARLIER_PHASES = {"intermediate": "stage1", "prediction": "stage2"}


def job_seconds(job: dict, phase: str) -> float:
    """A job's seconds in `phase`, under its name or its earlier one."""
    seconds = job["seconds"]
    return seconds[phase] if phase in seconds else seconds[EARLIER_PHASES[phase]]


def phase_lines(rows: list[dict]) -> list[str]:
    """Where each implementation's study time goes: median seconds per phase over the runs that
    timed them."""
    timed = [r for r in study_runs(rows) if all("seconds" in job for job in r["jobs"])]
    impls = [impl for impl in STUDY if any(r["impl"] == impl for r in timed)]
    if "kdbench" not in impls:
        return []

    def phases(run: dict) -> dict[str, float]:
        sums = {
            p: sum(job_seconds(job, p) for job in run["jobs"]) for p in PHASE_NAMES if p != "other"
        }
        return sums | {"other": run["seconds"] - sum(sums.values())}

    median = {
        impl: {
            p: statistics.median(phases(r)[p] for r in timed if r["impl"] == impl)
            for p in PHASE_NAMES
        }
        for impl in impls
    }
    lines = [
        "Where the time goes (median seconds over the runs that timed their phases, n = "
        + ", ".join(f"{STUDY[i]} {sum(r['impl'] == i for r in timed)}" for i in impls)
        + "):",
        "",
        "| phase | " + " | ".join(STUDY[i] for i in impls) + " |",
        "|---|" + "---:|" * len(impls),
    ]
    for phase, name in PHASE_NAMES.items():
        lines.append(f"| {name} | " + " | ".join(f"{median[i][phase]:.0f}" for i in impls) + " |")
    return lines + [""]


def missing_lines(rows: list[dict]) -> list[str]:
    """Which series of the earlier report this one lacks, and where their latest figures are."""
    names = {
        "seq_len": "the sequence-length series",
        "layers": "the mapped-layer series",
        "bf16": "bf16 autocast",
        "recompute": "recomputation at length 512",
        "compile": "compiled blocks",
    }
    missing = [
        name for group, name in names.items() if not any(r.get("group") == group for r in rows)
    ]
    if not missing:
        return []
    return [
        f"Not measured in this report: {'; '.join(missing)}. The latest figures for them are in "
        "this file's git history (`git log -p benchmarks/RESULTS.md`).",
        "",
    ]


def report(raw: Path, out: Path) -> None:
    rows = [json.loads(line) for line in raw.read_text().splitlines() if line.strip()]
    info = machine()
    lines = [
        "# Benchmarks: kdbench against Hugging Face loops and TextBrewer",
        "",
        "Generated by `python benchmarks/run.py` (`make bench`) from `raw.jsonl`; see `measure.py` "
        "for what one",
        "measurement is. Same teacher (MiniLM-L6, all-MiniLM-L6-v2 with a seeded classifier), same "
        "student weights",
        "(3x384 initialised from teacher layers 2,4,6 unless stated), same examples, same number "
        "of optimizer steps;",
        "examples/s and the peak memory are medians over the repeats (n). *peak*: the process's "
        "resident-memory",
        "high-water mark over the timed steps, models, data and Python included (the allocator "
        "keeps what the",
        "warm-up steps took, so this is the training peak; about 1.1 GiB of it is the common "
        "base). Ratios:",
        "kdbench's over the peer's, each against the peer named in its column.",
        "",
        f"**Machine**: {info['cpu']}, {info['cores']} cores, {info['threads']} torch threads"
        f"{', GPU ' + info['gpu'] if info['gpu'] else ', no GPU'}; Python {info['python']}, torch "
        f"{info['torch']}, "
        f"transformers {info['transformers']}, TextBrewer {info['textbrewer']}.",
        "",
        "**Implementations**: *kdbench*: its stage-1 / stage-2 step functions and the same loop as "
        "the training "
        "recipe (SDPA attention, scores recomputed from hooked q/k at the mapped layers only, both "
        "models stopped "
        "after their last mapped layer, teacher under inference mode, length-grouped batches with "
        "dynamic padding, "
        "stage 2 from cached teacher logits); in stage 1 its teacher runs every step, as the "
        "peers' do (equal work: "
        "the teacher-features cache that runs use by default is measured in its own row below). "
        "*tuned loop*: a "
        "Hugging Face loop as a careful user writes it "
        "(`benchmarks/peers.py`): kdbench's batches (length-grouped, dynamic padding), SDPA "
        "attention, the query, key "
        "and value projections (or block outputs) hooked at the mapped layers only and the "
        "attention probabilities "
        "rebuilt from them, the whole teacher under `inference_mode` every step, the losses "
        "through autograd. "
        "*plain loop*: a Hugging Face loop as run_glue's defaults and most examples write it: "
        "eager attention with "
        "`output_attentions=True, output_hidden_states=True` on both models, value projections by "
        "hooks, teacher "
        "recomputed under `no_grad` every step, every batch padded to the maximum length; in stage "
        "2 it runs without "
        "the output flags (the stricter baseline). *TextBrewer*: `GeneralDistiller` with the "
        "matching intermediate "
        "matches (attention and value-relation KL registered as match losses since TextBrewer's "
        "own expect "
        "pre-softmax scores; hid_seq with its `hidden_mse` and a linear projection; stage 2 with "
        "its `ce` KD loss and "
        "the hard-label loss), eager attention in stage 1 (it reads attention maps from the "
        "outputs), fed kdbench's "
        "batches (*dyn.*) or the padded ones (*padded*).",
        "",
    ]
    checks = [r for r in rows if r.get("impl") == "check"]
    if checks:
        c = checks[-1]
        compared = [p for p in ("plain", "tuned") if f"{p}_loss" in c]
        lines += [
            f"**Same work**: on one padded batch with the same weights, kdbench's stage-1 loss is "
            f"{c['kdbench_loss']:.6f}; "
            + "; ".join(
                f"the {p} loop's {c[f'{p}_loss']:.6f}, the largest difference of a student "
                "gradient entry "
                f"{c[f'{p}_max_grad_diff']:.1e}"
                for p in compared
            )
            + f" (largest entry {c['max_grad']:.2f}).",
            "",
        ]
    titles = {
        "main": "Distillation stages (max length 128)",
        "seq_len": "Sequence length (att_kl+val_kl, Wikipedia "
        "text packed to exactly that length: no padding)",
        "layers": "Number of mapped layers (att_kl+val_kl on "
        "SST-2; student depth = mapped layers; a case "
        "appears when every implementation was measured)",
    }
    for group, title in titles.items():
        group_rows = [r for r in rows if r.get("group") == group]
        if group_rows:
            lines += table(group_rows, title)
    lines += missing_lines(rows)
    lines += study_lines(rows)
    lines += phase_lines(rows)
    lines += targets(rows)
    lines += variant_lines(rows)
    out.write_text("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", choices=GROUPS, default=list(GROUPS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="two timed steps per case: checks the script, not speed",
    )
    parser.add_argument("--raw", type=Path, default=HERE / "raw.jsonl")
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md")
    parser.add_argument("--report", action="store_true", help="only rewrite --out from --raw")
    args = parser.parse_args()
    if not args.report:
        start = time.perf_counter()
        run(args.only, args.repeats, args.quick, args.raw)
        print(f"benchmarks: {time.perf_counter() - start:.0f} s", flush=True)
    report(args.raw, args.out)


if __name__ == "__main__":
    main()
