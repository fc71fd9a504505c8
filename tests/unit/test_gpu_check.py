"""`make gpu-check`'s runner: each part under its own cap (a slow part loses only its figures), at
most 8 files in its folder, a dry run without CUDA, and the record of runs newest first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import gpu_check  # noqa: E402

MAX_FILES = 8  # what a GPU machine's call brings back


def test_a_part_past_its_cap_times_out_and_the_next_still_runs(tmp_path, monkeypatch):
    scripts = {"slow": "import time; time.sleep(30)", "quick": "print('{\"ok\": 1}')"}
    monkeypatch.setattr(
        gpu_check, "commands", lambda part, out: [[sys.executable, "-c", scripts[part]]]
    )
    monkeypatch.setattr(gpu_check, "real_data", lambda: True)
    slow, quick = gpu_check.Part("slow", 1, None), gpu_check.Part("quick", 20, "quick.jsonl")
    far = gpu_check.time.monotonic() + 60
    outcome, seconds, _ = gpu_check.run_part(slow, tmp_path, far, gpu=True)
    assert outcome == "timed out after 1 s" and seconds < 10
    assert gpu_check.run_part(quick, tmp_path, far, gpu=True)[0] == "ok"
    assert (tmp_path / "quick.jsonl").read_text() == '{"ok": 1}\n'


def test_the_gpu_parts_are_skipped_without_cuda(tmp_path):
    outcome, _, _ = gpu_check.run_part(gpu_check.PARTS[0], tmp_path, 0.0, gpu=False)
    assert outcome.startswith("skipped: no CUDA device")


def test_the_parts_fit_the_budget_and_the_folder_its_files():
    assert sum(part.cap_s for part in gpu_check.PARTS) <= gpu_check.BUDGET_S <= 9 * 60
    outputs = {part.output for part in gpu_check.PARTS if part.output}
    written = outputs | {"tests.xml", "e2e_result.json", "log.txt", "summary.md"}
    assert len(written) <= MAX_FILES


def test_a_run_is_recorded_above_the_older_ones_once(tmp_path, monkeypatch):
    results = tmp_path / "RESULTS_GPU.md"
    results.write_text("# kdbench on GPUs\n\nIntro.\n\n<!-- run: old -->\n## old run\n")
    monkeypatch.setattr(gpu_check, "RESULTS", results)
    folder = tmp_path / "new"
    folder.mkdir()
    for figure in ("1", "2"):
        (folder / "summary.md").write_text(f"## new run\n\nfigure {figure}\n")
        gpu_check.record(folder)
    text = results.read_text()
    assert text.index("Intro.") < text.index("## new run") < text.index("## old run")
    assert text.count("## new run") == 1 and "figure 2" in text and "figure 1" not in text


@pytest.mark.slow
def test_without_cuda_it_is_a_dry_run_that_still_writes_its_folder(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KDBENCH_")}
    env["KDBENCH_CACHE"] = str(tmp_path / "cache")
    out = tmp_path / "check"
    done = subprocess.run(
        [sys.executable, "benchmarks/gpu_check.py", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    files = {path.name for path in out.iterdir()}
    assert files == {"log.txt", "summary.md", "e2e_result.json"} and len(files) <= MAX_FILES
    summary = (out / "summary.md").read_text()
    gpu_parts = sum(part.gpu_only for part in gpu_check.PARTS)
    assert summary.count("skipped: no CUDA device") == gpu_parts and "| e2e | ok" in summary
    assert "status completed" in summary


def test_only_the_parts_asked_for_run(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(
        gpu_check, "run_part", lambda part, *_: ran.append(part.name) or ("ok", 0.0, "")
    )
    outcomes = gpu_check.check(tmp_path, gpu_check.part_names("profile,tests"))
    assert ran == ["tests", "profile"] == list(outcomes)


def test_an_unknown_part_is_refused_with_the_known_ones(capsys):
    with pytest.raises(SystemExit) as exit_:
        gpu_check.main(["--parts", "tests,profiles"])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_.value.code == 2 and "no part named profiles" in error and "agnostic" in error


def test_the_parts_run_share_the_budget_as_their_caps_share_the_whole():
    assert gpu_check.chosen_parts(frozenset(), gpu_check.BUDGET_S) == list(gpu_check.PARTS)
    parts = {p.name: p for p in gpu_check.PARTS}
    tests, profile = gpu_check.chosen_parts(frozenset({"tests", "profile"}), 300)
    assert tests.cap_s + profile.cap_s <= 300
    assert tests.cap_s / profile.cap_s == pytest.approx(
        parts["tests"].cap_s / parts["profile"].cap_s, rel=0.05
    )


def test_a_summary_holds_the_sections_of_the_parts_run(tmp_path):
    from benchmarks.gpu_results import summary

    page = summary(tmp_path, {"profile": "ok (80 s)"})
    assert "### Where stage 1's time goes" in page and "| profile | ok (80 s) |" in page
    assert "### The gpu test tier" not in page and "### The user's command" not in page
    assert "### The gpu test tier" in summary(tmp_path)


def test_the_loss_and_gradient_check_runs_in_full_fp32():
    check = gpu_check.peer_specs()[-1]
    assert check["impl"] == "check" and "trainer.tf32=false" in check["overrides"]
