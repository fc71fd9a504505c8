"""Faults: a run killed at any step resumes from its latest checkpoint and ends with the same
metrics."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from kdbench.errors import KdbenchError
from kdbench.job import run
from kdbench.training import evaluate, loop
from kdbench.training.checkpoint import Checkpoints
from kdbench.training.signals import Interrupted, graceful_stop
from tests.helpers import (
    agnostic_overrides,
    compose_config,
    released_finetune_overrides,
    tiny_overrides,
    write_tiny_corpus,
)

CHECKPOINTED = (
    "trainer.checkpoint_every=1",
    "trainer.keep_checkpoints=true",
    "stages.intermediate.epochs=2",
    "stages.prediction.epochs=2",
    "objective=att_kl+val_kl",
)


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

    def tracking_train(stage, *args, **kwargs):
        loop_stage["name"] = stage.name
        return real_train(stage, *args, **kwargs)

    monkeypatch.setattr(loop, "to_device", crashing)
    monkeypatch.setattr(loop, "train", tracking_train)


@pytest.mark.parametrize(
    ("stage", "at_step"),
    [("intermediate", 3), ("intermediate", 7), ("prediction", 1), ("prediction", 6)],
)
def test_resume_after_a_crash_gives_the_same_metrics(
    tiny_glue, tmp_path, monkeypatch, stage, at_step
):
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
    overrides = tiny_overrides(
        tiny_glue, tmp_path / "run", *CHECKPOINTED, "stages.intermediate.epochs=6"
    )
    reference = run(
        compose_config(
            tiny_overrides(
                tiny_glue, tmp_path / "ref", *CHECKPOINTED, "stages.intermediate.epochs=6"
            )
        )
    )
    command = [sys.executable, "-m", "kdbench.run", *overrides]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ)
    )
    log = tmp_path / "run" / "train_log.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline:
        lines = log.read_text().splitlines() if log.exists() else []
        if sum('"intermediate"' in line for line in lines) >= 9:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert Checkpoints(tmp_path / "run" / "checkpoints").latest() is not None
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming from" in again.stderr + again.stdout
    assert (
        f"from pid {process.pid}" in again.stderr + again.stdout
    )  # the killed process's claim taken over
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
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt-00000001.pt",
        "ckpt-00000001.pt.manifest.json",
    ]


def test_a_different_config_does_not_resume_silently(tiny_glue, tmp_path, monkeypatch):
    crash_at(monkeypatch, "prediction", 2)
    with pytest.raises(Crash):
        run(compose_config(tiny_overrides(tiny_glue, tmp_path, *CHECKPOINTED)))
    monkeypatch.undo()
    with pytest.raises(KdbenchError, match="different configuration"):
        run(
            compose_config(
                tiny_overrides(
                    tiny_glue, tmp_path, *CHECKPOINTED, "stages.prediction.optimizer.lr=3e-4"
                )
            )
        )


def test_a_crashed_fine_tuning_resumes_with_the_evaluations_before_its_checkpoint(
    tiny_glue, tmp_path, monkeypatch
):
    corpus = write_tiny_corpus(tmp_path / "corpus")
    distilled = run(compose_config(agnostic_overrides(corpus, tmp_path / "d", "objective=att_kl")))

    def finetune(run_dir):  # 6 steps, each evaluated; checkpoints at steps 2, 3 (an epoch) and 4
        student = distilled["student_path"]
        return compose_config(
            released_finetune_overrides(
                student,
                tiny_glue,
                run_dir,
                "stages.finetune.eval_every_per_task.rte=1",
                "trainer.checkpoint_every=2",
            )
        )

    reference = run(finetune(tmp_path / "ref"))
    crash_at(monkeypatch, "finetune", 5)
    with pytest.raises(Crash):
        run(finetune(tmp_path / "run"))
    state, _ = Checkpoints(tmp_path / "run" / "checkpoints").latest()
    assert (state["stage"], state["step"]) == ("finetune", 4)
    monkeypatch.undo()
    resumed = run(finetune(tmp_path / "run"))
    assert resumed["status"] == "completed"
    assert (resumed["metrics"], resumed["scored"]) == (reference["metrics"], reference["scored"])
    assert not (tmp_path / "run" / "checkpoints").exists()


LONG_STAGE1 = (*CHECKPOINTED, "stages.intermediate.epochs=6", "trainer.checkpoint_every=1000")

# Stands in for submitit's job process: its pre-emption handler (USR2) requeues the job and exits
# with 144.
FAKE_SUBMITIT = """
import signal, sys
from pathlib import Path
marker = Path(sys.argv[1])
def requeue(signum, frame):
    marker.write_text("requeued")
    sys.exit(144)
signal.signal(signal.SIGUSR2, requeue)
sys.argv = ["kdbench.run", *sys.argv[2:]]
from kdbench.run import main
main()
"""


def stop_during_stage1(command: list[str], run_dir, sig) -> subprocess.CompletedProcess:
    """Starts `command`, sends `sig` once stage 1 has logged a step, and waits for the process to
    end."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = run_dir / "train_log.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (log.exists() and '"intermediate"' in log.read_text()):
        time.sleep(0.05)
    process.send_signal(sig)
    stdout, stderr = process.communicate(timeout=120)
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def assert_checkpointed_then_resumes(command: list[str], run_dir, reference: dict) -> None:
    record = json.loads((run_dir / "result.json").read_text())
    assert record["status"] == "stopped" and record["stopped_in"] == "intermediate"
    state, _ = Checkpoints(run_dir / "checkpoints").latest()
    assert state["stage"] == "intermediate" and not state["done"]
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming from" in again.stderr + again.stdout
    assert json.loads((run_dir / "result.json").read_text())["metrics"] == reference["metrics"]


def test_sigterm_checkpoints_and_exits_cleanly_then_resumes(tiny_glue, tmp_path):
    reference = run(compose_config(tiny_overrides(tiny_glue, tmp_path / "ref", *LONG_STAGE1)))
    command = [
        sys.executable,
        "-m",
        "kdbench.run",
        *tiny_overrides(tiny_glue, tmp_path / "run", *LONG_STAGE1),
    ]
    stopped = stop_during_stage1(command, tmp_path / "run", signal.SIGTERM)
    assert stopped.returncode == 0, stopped.stderr[-2000:]
    assert "stopped by a signal at intermediate" in stopped.stderr
    assert_checkpointed_then_resumes(command, tmp_path / "run", reference)


def test_submitit_preemption_checkpoints_first_then_submitit_requeues(tiny_glue, tmp_path):
    reference = run(compose_config(tiny_overrides(tiny_glue, tmp_path / "ref", *LONG_STAGE1)))
    overrides = tiny_overrides(tiny_glue, tmp_path / "run", *LONG_STAGE1)
    marker = tmp_path / "requeued"
    stopped = stop_during_stage1(
        [sys.executable, "-c", FAKE_SUBMITIT, str(marker), *overrides],
        tmp_path / "run",
        signal.SIGUSR2,
    )
    # submitit's handler ran (requeue: exit 144), but only after kdbench wrote its checkpoint and
    # record
    assert stopped.returncode == 144, stopped.stderr[-2000:]
    assert marker.read_text() == "requeued"
    assert "stopped by a signal at intermediate" in stopped.stderr
    assert_checkpointed_then_resumes(
        [sys.executable, "-m", "kdbench.run", *overrides], tmp_path / "run", reference
    )


def stop_in_evaluation(monkeypatch, stage: str, evaluation: int) -> None:
    """A SIGTERM once the `evaluation`-th dev evaluation inside `stage`'s training has begun."""
    real_predict, real_train = evaluate.predict, loop.train
    calls, training = {"n": 0}, {"name": None}

    def predict(*args, **kwargs):
        if training["name"] == stage:
            calls["n"] += 1
            if calls["n"] == evaluation:
                os.kill(os.getpid(), signal.SIGTERM)
        return real_predict(*args, **kwargs)

    def tracking_train(stage, *args, **kwargs):
        training["name"] = stage.name
        try:
            return real_train(stage, *args, **kwargs)
        finally:
            training["name"] = None

    monkeypatch.setattr(evaluate, "predict", predict)
    monkeypatch.setattr(loop, "train", tracking_train)


def dev_steps(run_dir, stage: str) -> list[int]:
    """The steps whose dev evaluation the run's log holds."""
    rows = [json.loads(line) for line in (run_dir / "train_log.jsonl").read_text().splitlines()]
    return sorted({row["step"] for row in rows if row["stage"] == stage})


BEST_STEP = (
    "trainer.student_best_checkpoint=true",
    "stages.prediction.eval_every=1",
    "trainer.checkpoint_every=1000",
    "objective=att_kl",
)


def test_a_stop_during_a_dev_evaluation_checkpoints_its_step_and_resumes(
    tiny_glue, tmp_path, monkeypatch
):
    reference = run(compose_config(tiny_overrides(tiny_glue, tmp_path / "ref", *BEST_STEP)))
    stop_in_evaluation(monkeypatch, "prediction", 3)
    cfg = compose_config(tiny_overrides(tiny_glue, tmp_path / "run", *BEST_STEP))
    with pytest.raises(Interrupted, match="in evaluation"):
        run(cfg)
    monkeypatch.undo()
    state, _ = Checkpoints(tmp_path / "run" / "checkpoints").latest()
    assert (state["stage"], state["step"], state["done"]) == ("prediction", 3, False)
    resumed = run(cfg)
    assert (resumed["metrics"], resumed["scored"]) == (reference["metrics"], reference["scored"])
    assert dev_steps(tmp_path / "run", "student_dev") == dev_steps(tmp_path / "ref", "student_dev")


def test_a_stop_during_the_teacher_s_epoch_evaluation_checkpoints_the_epoch_and_resumes(
    tiny_glue, tmp_path, monkeypatch
):
    teacher = (
        "trainer.teacher_best_checkpoint=true",
        "stages.teacher.epochs=2",
        "objective=att_kl",
    )
    monkeypatch.setenv("KDBENCH_CACHE", str(tmp_path / "cache-ref"))
    reference = run(compose_config(tiny_overrides(tiny_glue, tmp_path / "ref", *teacher)))
    monkeypatch.setenv("KDBENCH_CACHE", str(tmp_path / "cache"))
    stop_in_evaluation(monkeypatch, "teacher", 1)  # the first epoch's
    cfg = compose_config(tiny_overrides(tiny_glue, tmp_path / "run", *teacher))
    with pytest.raises(Interrupted, match="in evaluation"):
        run(cfg)
    (partial,) = (tmp_path / "cache" / "teachers").glob("*.checkpoints")
    state, _ = Checkpoints(partial).latest()
    assert (state["stage"], state["epoch"], state["batch"], state["done"]) == (
        "teacher",
        1,
        0,
        False,
    )
    monkeypatch.undo()
    monkeypatch.setenv("KDBENCH_CACHE", str(tmp_path / "cache"))
    resumed = run(cfg)
    assert resumed["teacher_metrics"] == reference["teacher_metrics"]
    assert resumed["metrics"] == reference["metrics"]
    assert dev_steps(tmp_path / "run", "teacher_dev") == dev_steps(tmp_path / "ref", "teacher_dev")


def test_without_a_scheduler_the_preemption_signal_is_left_alone():
    with graceful_stop():
        assert signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL


def test_a_crash_resumes_from_the_last_epoch_boundary(tiny_glue, tmp_path, monkeypatch):
    epochs = (
        "trainer.checkpoint_every=0",
        "trainer.keep_checkpoints=true",
        "stages.intermediate.epochs=3",
        "objective=att_kl",
    )
    reference = run(compose_config(tiny_overrides(tiny_glue, tmp_path / "ref", *epochs)))
    crash_at(monkeypatch, "intermediate", 6 * 2 + 3)  # 6 steps per epoch: in the third epoch
    cfg = compose_config(tiny_overrides(tiny_glue, tmp_path / "run", *epochs))
    with pytest.raises(Crash):
        run(cfg)
    state, _ = Checkpoints(tmp_path / "run" / "checkpoints").latest()
    assert (state["stage"], state["epoch"], state["batch"], state["step"], state["done"]) == (
        "intermediate",
        2,
        0,
        12,
        False,
    )
    monkeypatch.undo()
    assert run(cfg)["metrics"] == reference["metrics"]


def test_a_killed_teacher_fine_tuning_resumes_from_its_checkpoint(tiny_glue, tmp_path, monkeypatch):
    teacher = ("stages.teacher.epochs=3", "trainer.checkpoint_every=4", "objective=att_kl")
    monkeypatch.setenv("KDBENCH_CACHE", str(tmp_path / "cache-ref"))
    reference = run(compose_config(tiny_overrides(tiny_glue, tmp_path / "ref", *teacher)))
    monkeypatch.setenv("KDBENCH_CACHE", str(tmp_path / "cache"))
    crash_at(monkeypatch, "teacher", 10)
    cfg = compose_config(tiny_overrides(tiny_glue, tmp_path / "run", *teacher))
    with pytest.raises(Crash):
        run(cfg)
    (partial,) = (tmp_path / "cache" / "teachers").glob("*.checkpoints")
    state, _ = Checkpoints(partial).latest()
    assert state["stage"] == "teacher" and state["step"] == 8
    assert not partial.with_name(
        partial.name.removesuffix(".checkpoints")
    ).exists()  # no half-built cache entry
    monkeypatch.undo()
    monkeypatch.setenv("KDBENCH_CACHE", str(tmp_path / "cache"))
    resumed = run(cfg)
    assert resumed["teacher_metrics"] == reference["teacher_metrics"]
    assert resumed["metrics"] == reference["metrics"]
    assert not partial.exists()  # cleared once the teacher is cached


def test_a_non_finite_loss_names_the_term_and_keeps_the_last_good_checkpoint(
    tiny_glue, tmp_path, monkeypatch
):
    from kdbench.objectives import terms as objective_module

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
    with pytest.raises(KdbenchError, match=r"loss term 'val_kl' became nan at intermediate step 4"):
        run(compose_config(tiny_overrides(tiny_glue, tmp_path, *CHECKPOINTED)))
    record = json.loads((tmp_path / "result.json").read_text())
    assert record["status"] == "failed" and "val_kl" in record["error"]
    state, _ = Checkpoints(tmp_path / "checkpoints").latest()
    assert state["stage"] == "intermediate" and state["step"] == 4  # the last good step


def fine_tuning_of_a_student(tiny_glue, tmp_path, *overrides):
    """The fine-tuning config (`overrides` added) of a tiny task-agnostic student, and what distils
    that student again into its folder from another corpus (the corpus' path is not in a job
    folder's name)."""
    corpora = [
        write_tiny_corpus(tmp_path / f"corpus{i}", docs=docs) for i, docs in ((0, 60), (1, 40))
    ]

    def distil(corpus):
        return run(compose_config(agnostic_overrides(corpus, tmp_path / "d", "objective=att_kl")))

    finetune = compose_config(
        [
            "setting=finetune",
            "task=rte",
            f"data.glue_dir={tiny_glue}",
            f"setting.student_path={distil(corpora[0])['student_path']}",
            *overrides,
            "trainer.progress_bar=false",
            f"paths.run_dir={tmp_path / 'f'}",
        ]
    )
    return finetune, lambda: distil(corpora[1])


def test_a_student_distilled_again_in_place_is_fine_tuned_again(tiny_glue, tmp_path):
    """A completed fine-tuning stands for its config and the student it read: distilled again in
    its folder, the student is a new input and its fine-tuning runs again; the same student is
    skipped."""
    finetune, distil_again = fine_tuning_of_a_student(
        tiny_glue, tmp_path, "stages.finetune.epochs=1"
    )
    first = run(finetune)
    assert run(finetune).get("skipped")
    distil_again()
    again = run(finetune)
    assert not again.get("skipped")
    inputs = [record["provenance"]["inputs"] for record in (first, again)]
    assert list(inputs[0]) == ["setting.student_path"] and inputs[0] != inputs[1]


def test_a_fine_tuning_stopped_before_its_student_was_distilled_again_does_not_resume(
    tiny_glue, tmp_path, monkeypatch
):
    """Its checkpoint and best dev evaluation are the old student's: the run is refused in one line
    rather than ending with the old student's fine-tuning under the new student's name."""
    finetune, distil_again = fine_tuning_of_a_student(
        tiny_glue,
        tmp_path,
        "stages.finetune.epochs=2",
        "stages.finetune.batch_size=16",
        "trainer.checkpoint_every=2",
    )
    crash_at(monkeypatch, "finetune", 4)
    with pytest.raises(Crash):
        run(finetune)
    monkeypatch.undo()
    distil_again()
    with pytest.raises(KdbenchError, match="another version of a saved model it reads"):
        run(finetune)
    record = json.loads((tmp_path / "f" / "result.json").read_text())
    assert record["status"] == "failed" and "distilled again" in record["error"]


def logged_steps(run_dir) -> list[tuple[str, int]]:
    """The (stage, step) of every row of the run's log but the teacher's (a cached teacher's
    fine-tuning is not the run's)."""
    rows = (run_dir / "train_log.jsonl").read_text().splitlines()
    keys = [(row["stage"], row["step"]) for row in map(json.loads, rows)]
    return [key for key in keys if not key[0].startswith("teacher")]


def test_a_resumed_run_logs_each_step_once(tiny_glue, tmp_path, monkeypatch):
    every_two = ("trainer.checkpoint_every=2", "trainer.log_every=1")
    run(compose_config(tiny_overrides(tiny_glue, tmp_path / "ref", *every_two)))
    crash_at(monkeypatch, "intermediate", 4)  # after step 3, logged; its checkpoint is step 2's
    cfg = compose_config(tiny_overrides(tiny_glue, tmp_path / "run", *every_two))
    with pytest.raises(Crash):
        run(cfg)
    monkeypatch.undo()
    assert run(cfg)["status"] == "completed"
    assert logged_steps(tmp_path / "run") == logged_steps(tmp_path / "ref")
