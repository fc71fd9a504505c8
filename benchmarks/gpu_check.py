"""`make gpu-check`: everything kdbench measures on a GPU, in one call of at most 9 minutes.

`python benchmarks/gpu_check.py [--out DIR]` runs each part in its own process under its own time
cap, so a slow or failing part loses only its own figures:

- tests: the gpu test tier (`tests/gpu`), as JUnit XML;
- e2e: the user's command end to end, on MiniLM-L6 and SST-2 where they are, else on the tiny
  random teacher and a few generated SST-2 rows;
- agnostic, agnostic_compiled: the task-agnostic steps at the paper's shapes (`kdbench.bench --mode
  agnostic`), eager for every objective and with `--compile` for two, loaded as a run loads
  (`trainer.num_workers=auto`: worker processes mask);
- host: the host's time per micro-step (`kdbench.bench --mode host`), and the time of masking a
  micro-batch on the main thread (`--workers 0`);
- peers: stage 1 side by side on SST-2 (MiniLM-L6 -> 3x384, att_kl+val_kl; `benchmarks/measure.py`):
  kdbench in fp32 and bf16, the tuned loop and TextBrewer (where installed) in fp32, at batch
  32 and 256, and the loss and gradient check; it needs SST-2 and MiniLM-L6 under
  `KDBENCH_GLUE_DIR` and `KDBENCH_MODELS_DIR`;
- profile: where the time of that stage-1 step at batch 256 in fp32 goes, kdbench's against the
  tuned loop's (`benchmarks/step_profile.py`: the host's time per phase, the GPU's busy time and
  operations per step, the top operations), in `log.txt`.

`--parts tests,profile` runs only those parts, `--budget S` within S seconds (default 540): the
parts run share it as their caps share 540 (a second call on a GPU lent for minutes).
DIR (default `benchmarks/gpu/DATE-DEVICE`) receives at most 8 files: the parts' outputs, `log.txt`
(each part's command, outcome and the end of its output) and `summary.md`, the figures in Markdown.
On a GPU the summary also goes into `benchmarks/RESULTS_GPU.md`, newest first;
`--record DIR` does that for a folder brought back from a GPU machine. Without CUDA it is a dry
run: the GPU parts are skipped, the end-to-end run is made on the CPU, and the folder is written.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "src")]  # a GPU machine runs the checkout, not an install

from benchmarks.gpu_results import summary  # noqa: E402

RESULTS = ROOT / "benchmarks" / "RESULTS_GPU.md"
BUDGET_S = 540  # the whole check: one call on a GPU machine lent for minutes
OBJECTIVES = (
    "vanilla_kd,hid_cls,hid_seq,att_mse,att_mse+hid_seq,att_kl,att_kl+hid_seq,att_kl+val_kl"
)
COMPILED = "att_kl+val_kl,vanilla_kd"
STAGES = ("teacher", "intermediate", "prediction")  # one epoch each in the e2e run
PEER_BASE = {"objective": "att_kl+val_kl", "task": "sst2", "seq_len": 128, "student_layers": 3}
TAIL = 3000  # characters of a part's output kept in log.txt (the profile's: all of it)


@dataclass(frozen=True)
class Part:
    name: str
    cap_s: int
    output: str | None  # the file its standard output goes to, or None
    gpu_only: bool = True
    kept: int = TAIL  # characters of its output log.txt keeps


# In order of what a lent GPU must show first: what no run has yet measured whole (stage 1 at batch
# 256 beside the tuned loop, and its profile) before what two runs measured alike (host time, the
# compiled steps). Caps from the H200 runs of benchmarks/gpu/: tests 25 s, e2e 42-48 s, agnostic
# 55 s for eight objectives loaded in the main process (here worker processes load them and two
# are profiled: 85 s), host 16-17 s, compiled 55 s (here the losses' chains compile too: 75 s);
# peers took 221 s as nine processes (here seven); the profile's two processes took more than 60 s
# (not yet measured whole).
PARTS = (
    Part("tests", 30, None),
    Part("e2e", 55, None, gpu_only=False),
    Part("agnostic", 85, "agnostic.jsonl"),
    Part("peers", 180, "peers.jsonl"),
    Part("profile", 90, None, kept=20000),
    Part("host", 25, "host.jsonl"),
    Part("agnostic_compiled", 75, "agnostic_compiled.jsonl"),
)


def python() -> list[str]:
    return [sys.executable]


def bench(mode: str, objectives: str, *extra: str) -> list[str]:
    return [*python(), "-m", "kdbench.bench", "--mode", mode, "--objectives", objectives, *extra]


def commands(part: str, out: Path) -> list[list[str]]:
    """The commands of a part, run one after the other under the part's cap (the end-to-end run
    in `out`/e2e, whose record `check` keeps)."""
    if part == "tests":
        junit = f"--junitxml={out / 'tests.xml'}"
        pytest = ["-m", "pytest", "tests/gpu", "-m", "gpu", "-q", "-p", "no:cacheprovider", junit]
        return [[*python(), *pytest]]
    if part == "agnostic":
        profiled = ("--profile", "att_kl,vanilla_kd")
        return [bench("agnostic", OBJECTIVES, "--steps", "5", "--warmup", "2", *profiled)]
    if part == "agnostic_compiled":
        # both profiled, beside the eager part's profiles: what the fused kernels save, by operator
        profiled = ("--compile", "--profile", COMPILED)
        return [bench("agnostic", COMPILED, "--steps", "5", "--warmup", "3", *profiled)]
    if part == "host":
        return [bench("host", "att_kl,vanilla_kd", "--steps", "5", "--workers", "0")]
    if part == "peers":
        script = str(ROOT / "benchmarks" / "measure.py")
        return [[*python(), script, json.dumps(spec)] for spec in peer_specs()]
    if part == "profile":
        spec = {**PEER_BASE, "batch_size": 256, "steps": 10, "warmup": 5, "seed": 1}
        return [[*python(), str(ROOT / "benchmarks" / "step_profile.py"), json.dumps(spec)]]
    return [e2e_command(out / "e2e")]


def peer_specs() -> list[dict]:
    """Stage 1 (att_kl+val_kl, MiniLM-L6 -> 3x384, SST-2) at batch 256 and 32: kdbench and the
    tuned loop in fp32, kdbench in bf16, TextBrewer in fp32, then the loss and gradient check (the
    tuned loop's own bf16 autocast ran at 0.11-0.13x its fp32 at batch 32 on the H200: no
    reference). Batch 256 first, kdbench beside the tuned loop first: the rows a part cut short by
    its cap must not lack (kdbench trailed the tuned loop there, 10,899 against 14,329 examples/s,
    in `gpu/2026-11-26-nvidia-h200`, over 20 timed steps; the first run, which had it ahead, timed
    40 after 5, as these do: a process's start-up, not its steps, takes most of its time)."""
    base = PEER_BASE
    peers = [("kdbench", "fp32"), ("tuned", "fp32"), ("kdbench", "bf16")]
    if textbrewer_installed():
        peers.append(("textbrewer_dynamic", "fp32"))
    specs = []
    for batch, steps, warmup in ((256, 40, 5), (32, 60, 10)):
        for impl, precision in peers:
            run = {"batch_size": batch, "steps": steps, "warmup": warmup, "seed": 1}
            specs.append({**base, **run, "impl": impl, "precision": precision})
    # the check in full fp32: TF32's 10-bit mantissa moves gradients by 1e-4 and would hide a
    # real difference of that size
    check = {"impl": "check", "seed": 1, "batch_size": 32, "steps": 1, "warmup": 0}
    return specs + [{**base, **check, "overrides": ["trainer.tf32=false"]}]


def textbrewer_installed() -> bool:
    probe = subprocess.run([*python(), "-c", "import textbrewer"], capture_output=True)
    return probe.returncode == 0


def real_data() -> bool:
    """SST-2 and MiniLM-L6 where the environment says they are."""
    glue, models = os.environ.get("KDBENCH_GLUE_DIR"), os.environ.get("KDBENCH_MODELS_DIR")
    return bool(
        glue
        and models
        and (Path(glue) / "SST-2" / "train.tsv").is_file()
        and any(Path(models).glob("*MiniLM-L6*"))
    )


def e2e_command(run_dir: Path) -> list[str]:
    """The mission's command (att_kl+val_kl from teacher layers 2,4,6 to 3x384) on MiniLM-L6 and
    SST-2, or its tiny twin on generated rows, writing its record in `run_dir`."""
    if real_data():
        model = ["teacher=minilm_l6", "student=3x384", "init=layers", "init.layers=[2,4,6]"]
        model += ["data.train_limit=8000", *(f"stages.{s}.epochs=1" for s in STAGES)]
        model += [f"stages.{s}.optimizer.lr=1e-4" for s in ("intermediate", "prediction")]
    else:
        from tests.helpers import write_tiny_glue

        glue = write_tiny_glue(Path(tempfile.mkdtemp(prefix="kdbench-glue-")))
        model = ["teacher=tiny", "student=tiny", "trainer=smoke", f"data.glue_dir={glue}"]
    command = [*python(), "-m", "kdbench.run", "objective=att_kl+val_kl", "task=sst2", *model]
    return [*command, f"paths.run_dir={run_dir}", "trainer.progress_bar=false"]


def run_part(part: Part, out: Path, deadline: float, gpu: bool) -> tuple[str, float, str]:
    """(outcome, seconds, the end of its output) of one part under min(its cap, what is left)."""
    if part.gpu_only and not gpu:
        return "skipped: no CUDA device (dry run)", 0.0, ""
    if part.name in ("peers", "profile") and not real_data():
        return "skipped: needs SST-2 and MiniLM-L6 (KDBENCH_GLUE_DIR, KDBENCH_MODELS_DIR)", 0.0, ""
    start, output = time.monotonic(), []
    cap = part.cap_s if gpu else BUDGET_S  # a dry run's one part may take the whole budget
    stdout = open(out / part.output, "w") if part.output else subprocess.PIPE  # noqa: SIM115
    try:
        for command in commands(part.name, out):
            left = min(start + cap, deadline) - time.monotonic()
            if left <= 0:
                return f"timed out after {cap} s", time.monotonic() - start, "".join(output)
            done = subprocess.run(
                command, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=left, cwd=ROOT
            )
            output.append((done.stdout or "") + done.stderr)
            if done.returncode != 0 and part.name != "peers":
                return f"failed (exit {done.returncode})", time.monotonic() - start, output[-1]
    except subprocess.TimeoutExpired as expired:
        output.append((expired.stderr or b"").decode(errors="replace"))
        return f"timed out after {cap} s", time.monotonic() - start, "".join(output)
    finally:
        if part.output:
            stdout.close()
    return "ok", time.monotonic() - start, "".join(output)


def device_name() -> str:
    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu-dry-run"


def default_out() -> Path:
    slug = re.sub(r"[^a-z0-9]+", "-", device_name().lower()).strip("-")
    return ROOT / "benchmarks" / "gpu" / f"{datetime.date.today()}-{slug}"


def chosen_parts(names: frozenset[str], budget_s: int) -> list[Part]:
    """The parts `names` names (all when empty), in order, their caps scaled to share `budget_s`
    as they share `BUDGET_S`."""
    parts = [part for part in PARTS if not names or part.name in names]
    scale = budget_s / sum(part.cap_s for part in parts)
    return [replace(part, cap_s=int(part.cap_s * scale)) for part in parts]


def check(out: Path, names: frozenset[str] = frozenset(), budget_s: int = BUDGET_S) -> dict:
    """Every part, or those `names` names, in order, within `budget_s`; returns each one's
    outcome."""
    out.mkdir(parents=True, exist_ok=True)
    gpu, deadline, outcomes = torch.cuda.is_available(), time.monotonic() + budget_s, {}
    env_src = str(ROOT / "src")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [env_src, os.environ.get("PYTHONPATH")])
    )
    with open(out / "log.txt", "w") as log:
        for part in chosen_parts(names, budget_s):
            outcome, seconds, tail = run_part(part, out, deadline, gpu)
            if part.name == "e2e":
                keep_record(out / "e2e", out / "e2e_result.json")
            outcomes[part.name] = f"{outcome} ({seconds:.0f} s)"
            log.write(f"## {part.name}: {outcomes[part.name]}\n{tail[-part.kept :]}\n\n")
            log.flush()
    return outcomes


def keep_record(run_dir: Path, path: Path) -> None:
    """The end-to-end run's record kept as `path`, its folder (checkpoints, tables) removed."""
    if (run_dir / "result.json").exists():
        shutil.copy(run_dir / "result.json", path)
    shutil.rmtree(run_dir, ignore_errors=True)


def record(folder: Path) -> None:
    """Insert `folder`'s summary into RESULTS_GPU.md above the older runs (once per folder)."""
    marker = f"<!-- run: {folder.name} -->"
    section = f"{marker}\n{(folder / 'summary.md').read_text().strip()}\n\n"
    text = RESULTS.read_text() if RESULTS.exists() else "# kdbench on GPUs\n\n"
    text = re.sub(rf"{re.escape(marker)}.*?(?=<!-- run: |\Z)", "", text, flags=re.S)
    first = text.find("<!-- run: ")
    RESULTS.write_text(text + section if first < 0 else text[:first] + section + text[first:])


PARTS_HELP = f"comma-separated parts to run, of {', '.join(p.name for p in PARTS)} (default: all)"


def part_names(text: str) -> frozenset[str]:
    """`--parts`'s value: the names of known parts."""
    names = frozenset(filter(None, text.split(",")))
    if unknown := sorted(names - {part.name for part in PARTS}):
        raise argparse.ArgumentTypeError(f"no part named {', '.join(unknown)}: {PARTS_HELP}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="the folder (default benchmarks/gpu/DATE-DEVICE)")
    parser.add_argument("--record", type=Path, help="only insert FOLDER's summary into the record")
    parser.add_argument("--parts", type=part_names, default=frozenset(), help=PARTS_HELP)
    parser.add_argument(
        "--budget", type=int, default=BUDGET_S, help="seconds for all the parts run (their caps)"
    )
    args = parser.parse_args(argv)
    if args.record:
        record(args.record)
        return 0
    out = args.out or default_out()
    outcomes = check(out, args.parts, args.budget)
    (out / "summary.md").write_text(summary(out, outcomes))
    if torch.cuda.is_available():
        record(out)
    print((out / "summary.md").read_text())
    return 0 if all(o.startswith(("ok", "skipped")) for o in outcomes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
