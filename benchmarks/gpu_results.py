"""Formats `make gpu-check`'s folder (`benchmarks/gpu_check.py`) as a section of
benchmarks/RESULTS_GPU.md: `python benchmarks/gpu_results.py DIR` prints it.

DIR holds what the parts wrote: `tests.xml` (pytest's JUnit report of tests/gpu), `agnostic.jsonl`,
`agnostic_compiled.jsonl` and `host.jsonl` (`python -m kdbench.bench --mode agnostic|host`),
`peers.jsonl` (`benchmarks/measure.py`) and `e2e_result.json` (the user's command's record); a
missing file is reported as missing. The CLI exits 1 when a GPU test failed or did not run.
"""

from __future__ import annotations

import datetime
import json
import platform
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import torch
import transformers

from kdbench.records.record import PACKAGE, git_state, source_sha256

PAPER_STEPS, PAPER_BATCH = 100_000, 1024  # the paper's task-agnostic run (Table 5)


def environment() -> list[str]:
    """The device, the versions, and the code: its git commit where this is a checkout of kdbench,
    and always the hash of its source (`kdbench.records.record`)."""
    commit, dirty = git_state(PACKAGE)
    code = f"commit {commit}{' (with changes)' if dirty else ''}" if commit else "no git checkout"
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device"
    capability = (
        ".".join(map(str, torch.cuda.get_device_capability())) if torch.cuda.is_available() else "-"
    )
    return [
        f"- device: {device} (compute capability {capability}), {torch.cuda.device_count()} "
        "visible",
        f"- torch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN "
        f"{torch.backends.cudnn.version()}), "
        f"transformers {transformers.__version__}, Python {platform.python_version()}",
        f"- kdbench: {code}, source sha256 {source_sha256(PACKAGE)[:16]}",
    ]


def test_summary(report: Path) -> tuple[list[str], bool]:
    if not report.exists():
        return ["The GPU tests did not run (no tests.xml)."], False
    cases = ElementTree.parse(report).getroot().iter("testcase")
    outcome = {"passed": [], "failed": [], "skipped": []}
    for case in cases:
        kind = (
            "failed"
            if case.find("failure") is not None or case.find("error") is not None
            else ("skipped" if case.find("skipped") is not None else "passed")
        )
        outcome[kind].append(case.get("name"))
    lines = [
        f"{len(outcome['passed'])} passed, {len(outcome['failed'])} failed, "
        f"{len(outcome['skipped'])} skipped."
    ]
    lines += [f"- failed: `{name}`" for name in outcome["failed"]]
    lines += [f"- skipped: `{name}`" for name in outcome["skipped"]]
    return lines, not outcome["failed"] and bool(outcome["passed"])


def rows(path: Path) -> list[dict]:
    return (
        [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if path.exists()
        else []
    )


def precision(row: dict) -> str:
    """A row's precision, and whether its float32 matrix products ran in TF32."""
    return row.get("precision", "fp32") + (" (TF32)" if row.get("tf32") else "")


def agnostic_table(results: list[dict]) -> list[str]:
    lines = [
        "| objective | precision | micro-batch | workers | seq/s | tokens/s | GFLOP/seq counted "
        "| analytic | TFLOP/s | MFU | peak | memory GiB | bound GiB | syncs/step "
        "| attention kernels | paper run, h |",
        "|" + "---|" * 16,
    ]
    for r in results:
        hours = PAPER_STEPS * PAPER_BATCH / r["examples_per_s"] / 3600
        lines.append(
            f"| {r['objective']} | {precision(r)} | {r['micro_batch']} "
            f"| {r.get('workers', 0)} | {r['examples_per_s']:.0f} | "
            f"{r['tokens_per_s']:.0f} "
            f"| {r['flops_per_example'] / 1e9:.2f} | {r['analytic_flops_per_example'] / 1e9:.2f} "
            f"| {r['achieved_tflops']:.1f} | {r['mfu']:.1%} | {r['peak_source']} "
            f"| {r.get('peak_memory_gib', float('nan')):.1f} | {r['memory_bound_gib']:.1f} "
            f"| {r.get('syncs_per_step', '-')} "
            f"| {', '.join(r['attention_kernels'])} | {hours:.0f} |"
        )
    return lines


NO_FIGURES = ["No figures (see log.txt)."]


def host_table(results: list[dict]) -> list[str]:
    if not results:
        return NO_FIGURES
    lines = [
        "| objective | host ms per micro-step | main-thread collation ms | target ms at 64 "
        "| micro-batch | target ms at it |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        collate = next(v for k, v in r.items() if k.startswith("collate_ms"))
        lines.append(
            f"| {r['objective']} | {r['micro_step_ms']:.2f} | {collate:.2f} | "
            f"{r['target_host_ms']:.2f} | {r['micro_batch']} "
            f"| {r['target_host_ms_at_micro_batch']:.2f} |"
        )
    return lines


def peers_table(results: list[dict]) -> list[str]:
    """Stage 1 side by side: examples/s, and the ratio to kdbench fp32 at the same batch."""
    timed = [r for r in results if "examples_per_s" in r]
    if not results:
        return NO_FIGURES
    baseline = {
        r["batch_size"]: r["examples_per_s"]
        for r in timed
        if (r["impl"], r.get("precision", "fp32")) == ("kdbench", "fp32")
    }
    lines = [
        "| batch | implementation | precision | examples/s | vs kdbench fp32 | peak MiB "
        "| warm-up s |",
        "|---:|---|---|---:|---:|---:|---:|",
    ]
    for r in sorted(timed, key=lambda r: r["batch_size"]):
        ratio = (
            r["examples_per_s"] / baseline[r["batch_size"]] if r["batch_size"] in baseline else 0
        )
        lines.append(
            f"| {r['batch_size']} | {r['impl']} | {precision(r)} "
            f"| {r['examples_per_s']:,.0f} | {ratio:.2f}x | {r['peak_mib']:,.0f} "
            f"| {r['warmup_s']:.1f} |"
        )
    for r in results:
        if r["impl"] == "check":
            lines += [
                "",
                f"Check: kdbench's loss {r['kdbench_loss']:.6f}, the tuned loop's "
                f"{r['tuned_loss']:.6f}; largest gradient difference "
                f"{r['tuned_max_grad_diff']:.1e} (tuned), {r['plain_max_grad_diff']:.1e} "
                f"(plain), largest gradient {r['max_grad']:.1e}.",
            ]
    return lines


def e2e_lines(path: Path) -> list[str]:
    if not path.exists():
        return ["No record (see log.txt)."]
    record = json.loads(path.read_text())
    timing = ", ".join(f"{k} {v:,.1f}" for k, v in record.get("timing", {}).items())
    return [
        f"`{record.get('teacher')}` -> `{record.get('student')}`, {record.get('objective')}, "
        f"{record.get('task')}: status {record.get('status')}, precision "
        f"{record.get('precision')} ({record.get('precision_reason', '-')}), score "
        f"{record.get('score')}, teacher {record.get('teacher_metrics')}, wall "
        f"{record.get('wall_s')} s.",
        "",
        f"Timing: {timing or '-'}.",
    ]


def profile_lines(log: Path) -> list[str]:
    """The profile part's table of phases (milliseconds per step), as `log.txt` keeps it."""
    text = log.read_text() if log.exists() else ""
    start = text.find("phase (ms per step)", text.find("## profile"))
    if "## profile" not in text or start < 0:
        return NO_FIGURES
    table, rest = (text[start:].split("\n\n", 1) + [""])[:2]
    part = rest.split("\n## ", 1)[0]
    tops = [line for line in part.splitlines() if ": the top operators by self time" in line]
    return ["```text", table, "```", "", *(f"- {line}" for line in tops)]


def parts_lines(outcomes: dict[str, str] | None) -> list[str]:
    if not outcomes:
        return []
    return ["| part | outcome |", "|---|---|"] + [f"| {k} | {v} |" for k, v in outcomes.items()]


def agnostic_section(title: str, results: list[dict]) -> list[str]:
    if not results:
        return [f"### {title}", "", *NO_FIGURES]
    shape = f"{results[0]['micro_batch']} x {results[0]['accumulation']}"
    return [
        f"### {title} (12x768 -> 6x768, length 128, micro-batches {shape})",
        "",
        "`paper run, h`: the paper's 100k steps of 1024 sequences at this rate on this one device.",
        "",
        *agnostic_table(results),
        *micro_step_profiles(results),
    ]


def compiled_gain(eager: list[dict], compiled: list[dict]) -> list[str]:
    """Each compiled objective's rate against its eager row of the same run."""
    rates = {r["objective"]: r["examples_per_s"] for r in eager}
    gains = [
        f"{r['objective']} {r['examples_per_s'] / rates[r['objective']]:.2f}x "
        f"({r['examples_per_s']:,.0f} against {rates[r['objective']]:,.0f} seq/s)"
        for r in compiled
        if r["objective"] in rates
    ]
    return ["", f"Compiled against eager in this run: {'; '.join(gains)}."] if gains else []


def micro_step_profiles(results: list[dict]) -> list[str]:
    """The profiled objectives' micro-steps (`--profile`): the timed step's ms per micro-step
    against the device's busy ms in one (forward and backward, no optimizer), the part of it in
    kernels no aten operator launched (a compiled graph's), and the operators that keep it busy
    longest."""
    profiled = [r for r in results if "profile" in r]
    if not profiled:
        return []
    lines = [
        "",
        "Where a micro-step's device time goes (`--profile`: forward and backward, ms):",
        "",
        "| objective | timed ms per micro-step | device busy ms | outside aten ms "
        "| top operators by device time |",
        "|---|---|---|---|---|",
    ]
    for r in profiled:
        timed = 1e3 * r["seconds"] / (r["steps"] * r["accumulation"])
        by_op = r["profile"]["by_op"]
        ops = ", ".join(f"{name.removeprefix('aten::')} {ms:.1f}" for name, ms in by_op)
        busy, outside = r["profile"]["busy_ms"], r["profile"].get("outside_aten_ms")
        outside = "" if outside is None else f"{outside:.1f}"
        lines.append(f"| {r['objective']} | {timed:.1f} | {busy:.1f} | {outside} | {ops} |")
    return lines


def sections(folder: Path) -> dict[str, list[str]]:
    """Each part's section of the summary, by the part's name."""
    eager, compiled = rows(folder / "agnostic.jsonl"), rows(folder / "agnostic_compiled.jsonl")
    return {
        "tests": ["### The gpu test tier", "", *test_summary(folder / "tests.xml")[0]],
        "agnostic": agnostic_section("Task-agnostic steps at the paper's shapes", eager),
        "agnostic_compiled": [
            *agnostic_section("The same, compiled (`--compile`)", compiled),
            *compiled_gain(eager, compiled),
        ],
        "host": [
            "### Host time per micro-step (tiny widths, the paper's depths)",
            "",
            *host_table(rows(folder / "host.jsonl")),
        ],
        "peers": [
            "### Stage 1 side by side (MiniLM-L6 -> 3x384, att_kl+val_kl, SST-2)",
            "",
            *peers_table(rows(folder / "peers.jsonl")),
        ],
        "profile": [
            "### Where stage 1's time goes at batch 256, fp32 (`benchmarks/step_profile.py`)",
            "",
            *profile_lines(folder / "log.txt"),
        ],
        "e2e": ["### The user's command end to end", "", *e2e_lines(folder / "e2e_result.json")],
    }


def summary(folder: Path, outcomes: dict[str, str] | None = None) -> str:
    """The folder's figures as one dated section of RESULTS_GPU.md: the sections of the parts
    `outcomes` names (all without it)."""
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device"
    title = f"## {datetime.date.today()}, {device} (`make gpu-check`, folder `{folder.name}`)"
    page = [title, "", *environment(), "", *parts_lines(outcomes)]
    for part, lines in sections(folder).items():
        if outcomes is None or part in outcomes:
            page += ["", *lines]
    return "\n".join(page) + "\n"


if __name__ == "__main__":
    folder = Path(sys.argv[1])
    print(summary(folder))
    sys.exit(0 if test_summary(folder / "tests.xml")[1] else 1)
