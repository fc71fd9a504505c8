"""Formats `make gpu-check`'s outputs as benchmarks/RESULTS_GPU.md: `python
benchmarks/gpu_results.py DIR`.

DIR holds `tests.xml` (pytest's JUnit report of tests/gpu), `agnostic.jsonl` and `host.jsonl`
(`python -m kdbench.bench --mode agnostic|host`). Prints the Markdown; exits 1 when a GPU test
failed or did not run.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import torch
import transformers

PAPER_STEPS, PAPER_BATCH = 100_000, 1024  # the paper's task-agnostic run (Table 5)


def environment() -> list[str]:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
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
        f"- kdbench commit {commit or 'unknown'}",
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


def agnostic_table(results: list[dict]) -> list[str]:
    lines = [
        "| objective | precision | micro-batch | seq/s | tokens/s | GFLOP/seq counted | analytic "
        "| TFLOP/s | MFU | peak | memory GiB | bound GiB | syncs/step | attention kernels "
        "| paper run, h |",
        "|" + "---|" * 15,
    ]
    for r in results:
        hours = PAPER_STEPS * PAPER_BATCH / r["examples_per_s"] / 3600
        lines.append(
            f"| {r['objective']} | {r['precision']} | {r['micro_batch']} "
            f"| {r['examples_per_s']:.0f} | "
            f"{r['tokens_per_s']:.0f} "
            f"| {r['flops_per_example'] / 1e9:.2f} | {r['analytic_flops_per_example'] / 1e9:.2f} "
            f"| {r['achieved_tflops']:.1f} | {r['mfu']:.1%} | {r['peak_source']} "
            f"| {r.get('peak_memory_gib', float('nan')):.1f} | {r['memory_bound_gib']:.1f} "
            f"| {r.get('syncs_per_step', '-')} "
            f"| {', '.join(r['attention_kernels'])} | {hours:.0f} |"
        )
    return lines


def host_table(results: list[dict]) -> list[str]:
    lines = [
        "| objective | host ms per micro-step | collation ms | target ms at 64 | micro-batch "
        "| target ms at it |",
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


def main(folder: Path) -> int:
    tests, passed = test_summary(folder / "tests.xml")
    agnostic = rows(folder / "agnostic.jsonl")
    shape = f"{agnostic[0]['micro_batch']} x {agnostic[0]['accumulation']}" if agnostic else "-"
    page = [
        "# kdbench on a GPU (`make gpu-check`)",
        "",
        *environment(),
        "",
        "## The gpu test tier",
        "",
        *tests,
        "",
        "## Task-agnostic steps at the paper's shapes (12x768 -> 6x768, length 128, micro-batches "
        f"{shape})",
        "",
        "`paper run, h`: the paper's 100k steps of 1024 sequences at this rate on this one device.",
        "",
        *agnostic_table(agnostic),
        "",
        "## Host time per micro-step (tiny widths, the paper's depths)",
        "",
        *host_table(rows(folder / "host.jsonl")),
        "",
    ]
    print("\n".join(page))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
