"""Faults: a run killed at any step resumes from its latest checkpoint and ends with the same metrics."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from kdbench import loop
from kdbench.checkpoint import Checkpoints
from kdbench.errors import KdbenchError
from kdbench.run import run
from tests.helpers import compose_config, tiny_overrides

CHECKPOINTED = ("trainer.checkpoint_every=1", "trainer.keep_checkpoints=true", "trainer.stage1_epochs=2",
                "trainer.stage2_epochs=2", "objective=att_kl+val_kl")


class Crash(Exception):
    """Stands in for a kill: raised from inside a training step."""


def crash_at(monkeypatch, stage: str, at_step: int):
    real = loop.to_device
    calls = {"n": 0}

    def crashing(batch, device):
        if loop_stage["name"] == stage:
            calls["n"] += 1
            if calls["n"] == at_step:
                raise Crash(f"simulated kill at {stage} step {at_step}")
        return real(batch, device)

    loop_stage = {"name": None}
    real_train = loop.train

    def tracking_train(stage_name, *args, **kwargs):
        loop_stage["name"] = stage_name
        return real_train(stage_name, *args, **kwargs)

    monkeypatch.setattr(loop, "to_device", crashing)
    monkeypatch.setattr(loop, "train", tracking_train)


@pytest.mark.parametrize(("stage", "at_step"), [("stage1", 3), ("stage1", 7), ("stage2", 1), ("stage2", 6)])
def test_resume_after_a_crash_gives_the_same_metrics(tiny_glue, tmp_path, monkeypatch, stage, at_step):
    reference = run(compose_config(tiny_overrides(tiny_glue, tmp_path / "ref", *CHECKPOINTED)))
    crash_at(monkeypatch, stage, at_step)
    cfg = compose_config(tiny_overrides(tiny_glue, tmp_path / "run", *CHECKPOINTED))
    with pytest.raises(Crash):
        run(cfg)
    assert json.loads((tmp_path / "run" / "result.json").read_text())["status"] == "failed"
    monkeypatch.undo()
    resumed = run(cfg)
    assert resumed["status"] == "completed"
    assert resumed["metrics"] == reference["metrics"]  # bitwise on CPU


def test_resume_continues_from_the_latest_checkpoint_after_sigkill(tiny_glue, tmp_path):
    overrides = tiny_overrides(tiny_glue, tmp_path / "run", *CHECKPOINTED, "trainer.stage1_epochs=6")
    reference = run(compose_config(tiny_overrides(tiny_glue, tmp_path / "ref", *CHECKPOINTED, "trainer.stage1_epochs=6")))
    command = [sys.executable, "-m", "kdbench.run", *overrides]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ))
    log = tmp_path / "run" / "train_log.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline:
        lines = log.read_text().splitlines() if log.exists() else []
        if sum('"stage1"' in line for line in lines) >= 9:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert Checkpoints(tmp_path / "run" / "checkpoints").latest() is not None
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming from" in again.stderr + again.stdout
    record = json.loads((tmp_path / "run" / "result.json").read_text())
    assert record["status"] == "completed" and record["metrics"] == reference["metrics"]


def test_a_torn_checkpoint_falls_back_to_the_previous_one(tmp_path):
    checkpoints = Checkpoints(tmp_path, keep=3)
    checkpoints.save({"step": 1, "weights": torch.ones(3)})
    newest = checkpoints.save({"step": 2, "weights": torch.zeros(3)})
    newest.write_bytes(newest.read_bytes()[: len(newest.read_bytes()) // 2])  # truncated by a crash
    state, path = checkpoints.latest()
    assert state["step"] == 1 and path.name == "ckpt-00000001.pt"


def test_checkpoint_writes_leave_no_partial_files(tmp_path, monkeypatch):
    checkpoints = Checkpoints(tmp_path)
    checkpoints.save({"step": 1})

    def failing_save(obj, handle):
        handle.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", failing_save)
    with pytest.raises(OSError):
        checkpoints.save({"step": 2})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-00000001.pt"]


def test_a_different_config_does_not_resume_silently(tiny_glue, tmp_path, monkeypatch):
    crash_at(monkeypatch, "stage2", 2)
    with pytest.raises(Crash):
        run(compose_config(tiny_overrides(tiny_glue, tmp_path, *CHECKPOINTED)))
    monkeypatch.undo()
    with pytest.raises(KdbenchError, match="different configuration"):
        run(compose_config(tiny_overrides(tiny_glue, tmp_path, *CHECKPOINTED, "trainer.lr=3e-4")))


def test_sigterm_checkpoints_and_exits_cleanly_then_resumes(tiny_glue, tmp_path):
    overrides = tiny_overrides(tiny_glue, tmp_path / "run", *CHECKPOINTED, "trainer.stage1_epochs=6",
                               "trainer.checkpoint_every=1000")
    reference = run(compose_config(tiny_overrides(tiny_glue, tmp_path / "ref", *CHECKPOINTED, "trainer.stage1_epochs=6",
                                                  "trainer.checkpoint_every=1000")))
    command = [sys.executable, "-m", "kdbench.run", *overrides]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = tmp_path / "run" / "train_log.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (log.exists() and '"stage1"' in log.read_text()):
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr[-2000:]
    assert "stopped by a signal at stage1" in stderr
    record = json.loads((tmp_path / "run" / "result.json").read_text())
    assert record["status"] == "interrupted"
    state, _ = Checkpoints(tmp_path / "run" / "checkpoints").latest()
    assert state["stage"] == "stage1" and not state["done"]
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads((tmp_path / "run" / "result.json").read_text())["metrics"] == reference["metrics"]


def test_a_non_finite_loss_names_the_term_and_keeps_the_last_good_checkpoint(tiny_glue, tmp_path, monkeypatch):
    from kdbench.objectives import objective as objective_module

    real = objective_module.Objective.forward
    calls = {"n": 0}

    def poisoned(self, *args, **kwargs):
        losses = real(self, *args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 5:
            losses["val_kl"] = losses["val_kl"] * float("nan")
            losses["total"] = losses["att_kl"] + losses["val_kl"]
        return losses

    monkeypatch.setattr(objective_module.Objective, "forward", poisoned)
    with pytest.raises(KdbenchError, match=r"loss term 'val_kl' became nan at stage1 step 4"):
        run(compose_config(tiny_overrides(tiny_glue, tmp_path, *CHECKPOINTED)))
    record = json.loads((tmp_path / "result.json").read_text())
    assert record["status"] == "failed" and "val_kl" in record["error"]
    state, _ = Checkpoints(tmp_path / "checkpoints").latest()
    assert state["stage"] == "stage1" and state["step"] == 4  # the last good step
