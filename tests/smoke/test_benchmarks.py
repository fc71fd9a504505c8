"""The benchmark script's measurements on the tiny model: each implementation runs, and kdbench's
fast stage-1 path (SDPA, hooked q/k/v, early stop) gives the plain and tuned loops' loss and
gradients on the same batch."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import TINY_BENCH, realdata

ROOT = Path(__file__).resolve().parents[2]


def measure(glue: Path, impl: str, objective: str = "att_kl+val_kl", **extra) -> dict:
    spec = {
        "impl": impl,
        "objective": objective,
        "task": "sst2",
        "seq_len": 32,
        "student_layers": 2,
        "batch_size": 4,
        "steps": 2,
        "warmup": 1,
        "seed": 1,
        "threads": 1,
        "teacher": "tiny",
        "student": "tiny",
        "overrides": [f"data.glue_dir={glue}"],
        **extra,
    }
    return run_measure(spec)


def run_measure(spec: dict) -> dict:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "measure.py"), json.dumps(spec)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def assert_same_step(result: dict, peer: str, rel: float) -> None:
    assert result[f"{peer}_loss"] > 1e-4
    assert result["kdbench_loss"] == pytest.approx(result[f"{peer}_loss"], rel=rel)
    assert result[f"{peer}_same_parameters"]
    assert result[f"{peer}_max_grad_diff"] <= 1e-5 * max(result["max_grad"], 1.0)


@pytest.mark.slow
def test_fast_stage1_matches_the_plain_and_tuned_loops(tiny_glue):
    result = measure(
        tiny_glue, "check", init="random"
    )  # a student that is not a copy of teacher layers
    for peer in ("plain", "tuned"):
        assert_same_step(result, peer, rel=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("impl", ["kdbench", "tuned", "plain"])
@pytest.mark.parametrize("objective", ["att_kl+val_kl", "hid_seq", "vanilla_kd"])
def test_each_implementation_times_the_same_examples(tiny_glue, impl, objective):
    result = measure(tiny_glue, impl, objective)
    assert result["examples"] == 2 * 4 and result["tf32"] is False  # a CPU computes in fp32
    assert result["seconds"] > 0 and result["peak_mib"] > 0
    if impl == "plain":
        assert (
            result["padded_tokens"] == 2 * 4 * 32
        )  # run_glue's default: every batch padded to the maximum length
    else:
        assert result["padded_tokens"] < 2 * 4 * 32  # dynamic padding


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("textbrewer") is None, reason="TextBrewer lives in the benchmark env"
)
@pytest.mark.parametrize("impl", ["textbrewer", "textbrewer_dynamic"])
def test_textbrewer_runs(tiny_glue, impl):
    assert measure(tiny_glue, impl)["examples"] == 2 * 4


@realdata
def test_fast_stage1_matches_the_plain_and_tuned_loops_on_minilm():
    spec = {
        "impl": "check",
        "objective": "att_kl+val_kl",
        "task": "sst2",
        "seq_len": 64,
        "student_layers": 3,
        "batch_size": 8,
        "steps": 1,
        "warmup": 1,
        "seed": 1,
        "threads": 2,
    }
    result = run_measure(spec)
    for peer in ("plain", "tuned"):
        assert_same_step(result, peer, rel=1e-5)


@realdata
@pytest.mark.slow
def test_the_whole_study_benchmark_runs_every_job_of_the_tuned_loop():
    tiny = [
        "data.train_limit=32",
        "data.eval_limit=32",
        "stages.teacher.epochs=1",
        "stages.intermediate.epochs=1",
        "stages.prediction.epochs=1",
    ]
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "study.py"),
            "tuned",
            "--seeds",
            "1",
            "2",
            "--objectives",
            "vanilla_kd",
            "att_kl+val_kl",
            "--overrides",
            *tiny,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["seconds"] > 0
    jobs = {(job["objective"], job["seed"]): job["accuracy"] for job in result["jobs"]}
    assert set(jobs) == {(o, s) for o in ("vanilla_kd", "att_kl+val_kl") for s in (1, 2)}
    assert all(0 <= accuracy <= 100 for accuracy in jobs.values())


def test_the_gpu_results_page_reports_the_tests_and_the_bench(tmp_path, capsys):
    """`make gpu-check`'s formatter on a JUnit report and the bench's lines of a tiny run."""
    from kdbench.bench import main as bench

    (tmp_path / "tests.xml").write_text(
        '<testsuites><testsuite><testcase name="test_a"/><testcase '
        'name="test_b"><failure message="x"/></testcase>'
        '<testcase name="test_c"><skipped/></testcase></testsuite></testsuites>'
    )
    for mode, name in (("agnostic", "agnostic.jsonl"), ("host", "host.jsonl")):
        bench(
            [
                "--mode",
                mode,
                *TINY_BENCH,
                "--batch",
                "2",
                "--steps",
                "1",
                "--warmup",
                "0",
                "--profile",
                "att_kl",
            ]
        )
        (tmp_path / name).write_text(capsys.readouterr().out)
    eager = json.loads((tmp_path / "agnostic.jsonl").read_text().splitlines()[-1])
    compiled = eager | {"examples_per_s": eager["examples_per_s"] * 1.25}
    compiled["profile"] = eager["profile"] | {"outside_aten_ms": 7.3}  # as CUDA gives it
    (tmp_path / "agnostic_compiled.jsonl").write_text(json.dumps(compiled) + "\n")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_results.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 1, proc.stderr  # a GPU test failed
    assert "1 passed, 1 failed, 1 skipped." in proc.stdout and "- failed: `test_b`" in proc.stdout
    assert "| att_kl | fp32 |" in proc.stdout and "measured cpu" in proc.stdout
    # the bench's row and its profile's (on the CPU the operators' own time), the compiled row and
    # its profile's (its compiled kernels' time beside the busy time), the host row
    assert proc.stdout.count("| att_kl |") == 5
    assert proc.stdout.count(" | 7.3 | ") == 1
    assert "Compiled against eager in this run: att_kl 1.25x (" in proc.stdout
    assert "Where a micro-step's device time goes" in proc.stdout and "mm " in proc.stdout


def test_the_step_profile_reads_each_phase_from_the_hosts_events():
    """On CUDA each profiler label is also a GPU-side range of the same name, with no host time:
    the phases are read from the host's events, not whichever of the two comes last."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from benchmarks import step_profile

    def event(key, ms, device):
        return SimpleNamespace(key=key, cpu_time_total=ms * 1e3, device_type=device)

    host = {"teacher forward": 4, "student forward": 2, "step": 9, "backward": 5, "optimizer": 1}
    events = [event("timed step", 20, DeviceType.CPU)]
    for key, ms in host.items():
        events += [event(key, ms, DeviceType.CPU), event(key, 0, DeviceType.CUDA)]
    profile = SimpleNamespace(key_averages=lambda: events)
    phases = step_profile.phase_ms(profile, steps=2)
    assert phases["teacher forward"] == 2 and phases["losses"] == 1.5
    assert phases["other"] == 2.5 and phases["total"] == 10


def test_the_gpus_busy_time_counts_kernels_not_the_labels_ranges():
    """A `record_function` label is also a GPU-side range spanning the kernels inside it."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    from kdbench.measure.timing import gpu_events

    def event(name, device, annotation=False):
        return SimpleNamespace(name=name, device_type=device, is_user_annotation=annotation)

    kernel, copy = event("gemm", DeviceType.CUDA), event("Memcpy HtoD", DeviceType.CUDA)
    events = [event("aten::mm", DeviceType.CPU), kernel, copy, event("step", DeviceType.CUDA, True)]
    assert gpu_events(SimpleNamespace(events=lambda: events)) == [kernel, copy]
