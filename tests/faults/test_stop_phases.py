"""Faults: a stop signal in any long phase outside the training loop (tokenisation, the teacher's
evaluation, its features and logits tables, augmentation, building a loader, a study's step) or in a
held-out evaluation (the task-agnostic distillation's, during or after the stage) ends
the process within seconds, the record says where, no partial cache entry is left, and the same
command again ends with an uninterrupted run's metrics.

Each phase is made observable with KDBENCH_TEST_PHASE_DELAY
(`kdbench.training.signals._test_delay`): the process writes a marker file when it first checks for
a stop in the phase and sleeps before each check there."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from filelock import FileLock

from kdbench.job import run
from kdbench.recipes import task_agnostic
from kdbench.training.signals import TEST_DELAY_ENV, Interrupted
from tests.helpers import (
    TINY_MLM_SHAPE,
    agnostic_overrides,
    compose_config,
    released_finetune_overrides,
    tiny_overrides,
    write_tiny_corpus,
    write_tiny_mlm_tokenizer,
)

pytestmark = pytest.mark.slow  # a subprocess per phase, then the same command again

TABLES = (
    "stages.teacher.epochs=0",
    "objective=att_kl",
)  # teacher as loaded, then its features and logits tables
# from the signal to the record saying stopped (the phase's work abandoned, its entry cleaned)
STOPPED_WITHIN_S = 10
# to the process's end: the interpreter's teardown with torch loaded takes seconds on a busy CPU
ENDED_WITHIN_S = 30


def augment_overrides(tmp_path: Path) -> tuple[str, ...]:
    """TinyBERT's augmentation with a random 1-layer MLM over a tiny word-piece vocabulary."""
    mlm = write_tiny_mlm_tokenizer(tmp_path / "mlm")
    return (
        *TABLES,
        "augment=tinybert",
        f"augment.mlm_model={mlm}",
        "augment.n_per_example=2",
        "augment.batch_size=8",
        TINY_MLM_SHAPE,
    )


def clean_run(overrides: list[str], cache: Path) -> dict:
    """A run in this process with its own cache (which the config names)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KDBENCH_CACHE", str(cache))
        return run(compose_config(overrides))


@pytest.fixture(scope="module")
def tables_reference(tiny_glue, tmp_path_factory) -> dict:
    """An uninterrupted run with the teacher's tables (the reference of every phase it goes
    through)."""
    folder = tmp_path_factory.mktemp("reference")
    return clean_run(tiny_overrides(tiny_glue, folder / "run", *TABLES), folder / "cache")


def seconds_until_stopped(process: subprocess.Popen, record: Path, since: float) -> float:
    """Waits until the record says stopped (or the process ends); the seconds from `since`."""
    while process.poll() is None and '"status": "stopped"' not in (
        record.read_text() if record.exists() else ""
    ):
        time.sleep(0.02)
    return time.perf_counter() - since


def signal_in_phase(
    command: list[str], phase: str, tmp_path: Path, *signals: signal.Signals, delay_s: float = 1.0
) -> tuple[subprocess.CompletedProcess, float]:
    """Starts `command`, sends `signals` (0.3 s apart) once it works in `phase`, and waits for it to
    end (within ENDED_WITHIN_S); returns the process and the seconds from the first signal to its
    record saying stopped."""
    marker = tmp_path / f"in-{phase}"
    env = dict(
        os.environ,
        KDBENCH_CACHE=str(tmp_path / "cache"),
        **{TEST_DELAY_ENV: f"{phase}:{delay_s}:{marker}"},
    )
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    deadline = time.time() + 180
    while not marker.exists() and process.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert marker.exists(), f"the run never reached {phase}: {process.communicate()[1][-2000:]}"
    sent = time.perf_counter()
    for i, sig in enumerate(signals):
        time.sleep(0.3 if i else 0)
        process.send_signal(sig)
    stopped = seconds_until_stopped(process, tmp_path / "run" / "result.json", sent)
    stdout, stderr = process.communicate(timeout=ENDED_WITHIN_S)
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr), stopped


def assert_nothing_partial(cache: Path) -> None:
    """No temporary file or folder under the cache, and every entry lock free."""
    leftovers = [p for p in cache.rglob("*") if ".tmp" in p.name]
    assert not leftovers, leftovers
    for path in cache.rglob("*.lock"):
        lock = FileLock(str(path), timeout=0)
        lock.acquire()  # raises Timeout when still held
        lock.release()


def assert_stopped(
    stopped: subprocess.CompletedProcess, seconds: float, run_dir: Path, phase: str
) -> None:
    assert seconds < STOPPED_WITHIN_S, stopped.stderr[-2000:]
    assert stopped.returncode == 0, stopped.stderr[-2000:]
    assert (
        f"kdbench: stopped by a signal in {phase}; nothing of it is kept: re-run the same command"
        in stopped.stderr
    )
    record = json.loads((run_dir / "result.json").read_text())
    assert (record["status"], record["stopped_in"]) == ("stopped", phase)


def stop_then_resume(
    overrides: list[str], phase: str, tmp_path: Path, sig: signal.Signals, built: str | None
) -> dict:
    """Stops the run of `overrides` in `phase` with `sig`, checks how it stopped, and returns the
    same command's record when run again."""
    stopped, seconds = signal_in_phase(
        [sys.executable, "-m", "kdbench.run", *overrides], phase, tmp_path, sig
    )
    assert_stopped(stopped, seconds, tmp_path / "run", phase)
    assert_nothing_partial(tmp_path / "cache")
    if built is not None:  # the stopped phase's entry is not there at all
        assert not [
            p for p in (tmp_path / "cache" / built).iterdir() if not p.name.endswith(".lock")
        ]
    resumed = clean_run(overrides, tmp_path / "cache")  # the same command, the same cache
    assert resumed["status"] == "completed"
    return resumed


@pytest.mark.parametrize(
    ("phase", "sig", "built"),
    [
        ("tokenisation", signal.SIGTERM, None),
        ("teacher_evaluation", signal.SIGINT, None),  # a first Ctrl-C stops like SIGTERM
        ("teacher_features", signal.SIGTERM, "teacher_features"),
        ("teacher_logits", signal.SIGTERM, "teacher_logits"),
        ("loaders", signal.SIGTERM, None),
    ],
)
def test_a_signal_in_a_phase_stops_it_in_seconds_and_the_same_command_resumes(
    tiny_glue, tmp_path, tables_reference, phase, sig, built
):
    resumed = stop_then_resume(
        tiny_overrides(tiny_glue, tmp_path / "run", *TABLES), phase, tmp_path, sig, built
    )
    assert resumed["metrics"] == tables_reference["metrics"]


def test_a_signal_during_augmentation_stops_it_in_seconds_and_the_same_command_resumes(
    tiny_glue, tmp_path
):
    augmenting = augment_overrides(tmp_path)
    resumed = stop_then_resume(
        tiny_overrides(tiny_glue, tmp_path / "run", *augmenting),
        "augmentation",
        tmp_path,
        signal.SIGTERM,
        "augmented",
    )
    reference = clean_run(
        tiny_overrides(tiny_glue, tmp_path / "ref", *augmenting), tmp_path / "ref-cache"
    )
    assert resumed["metrics"] == reference["metrics"]


def test_a_signal_while_a_corpus_is_tokenised_leaves_no_partial_entry_and_resumes(tmp_path):
    corpus = write_tiny_corpus(tmp_path / "corpus")
    resumed = stop_then_resume(
        agnostic_overrides(corpus, tmp_path / "run"),
        "tokenisation",
        tmp_path,
        signal.SIGTERM,
        "corpora",
    )
    reference = clean_run(agnostic_overrides(corpus, tmp_path / "ref"), tmp_path / "ref-cache")
    assert resumed["metrics"] == reference["metrics"]


def test_a_second_ctrl_c_stops_at_once(tiny_glue, tmp_path):
    overrides = tiny_overrides(tiny_glue, tmp_path / "run", *TABLES)
    stopped, seconds = signal_in_phase(
        [sys.executable, "-m", "kdbench.run", *overrides],
        "teacher_features",
        tmp_path,
        signal.SIGINT,
        signal.SIGINT,
        delay_s=60,
    )
    assert seconds < STOPPED_WITHIN_S, stopped.stderr[
        -2000:
    ]  # the first alone would wait out the 60 s batch
    assert stopped.returncode == 130, stopped.stderr[-2000:]
    assert "stopping at the next safe point (Ctrl-C again to stop at once)" in stopped.stderr
    assert (
        "kdbench: stopped at once by a second Ctrl-C" in stopped.stderr
        and "Traceback" not in stopped.stderr
    )
    record = json.loads((tmp_path / "run" / "result.json").read_text())
    assert (record["status"], record["stopped_in"]) == ("stopped", "teacher_features")
    assert_nothing_partial(tmp_path / "cache")


STUDY_STEP = "import sys; from kdbench.study import run_step; run_step('distil', sys.argv[1:])"


def test_a_signal_to_a_study_stops_its_running_step_cleanly_and_the_study(tiny_glue, tmp_path):
    overrides = tiny_overrides(tiny_glue, tmp_path / "run", *TABLES)
    command = [sys.executable, "-c", STUDY_STEP, sys.executable, "-m", "kdbench.run", *overrides]
    stopped, seconds = signal_in_phase(
        command, "teacher_logits", tmp_path, signal.SIGTERM
    )  # the study's pid only
    assert seconds < STOPPED_WITHIN_S and stopped.returncode == 0, stopped.stderr[-2000:]
    assert (
        "kdbench.study: stopped by a signal in step 'distil'; re-run the same command"
        in stopped.stderr
    )
    record = json.loads((tmp_path / "run" / "result.json").read_text())
    assert (record["status"], record["stopped_in"]) == ("stopped", "teacher_logits")


def stop_in_heldout(monkeypatch, evaluation: int, batch_s: float) -> dict:
    """A SIGTERM at the first batch of a task-agnostic run's `evaluation`-th held-out evaluation,
    each of whose batches then takes `batch_s` seconds; the dict gets the time it was sent."""
    real = task_agnostic.heldout_losses
    calls, sent = {"n": 0}, {}

    def heldout_losses(step, *args):
        calls["n"] += 1
        if calls["n"] != evaluation:
            return real(step, *args)

        def slow_step(batch):
            if not sent:
                sent["at"] = time.perf_counter()
                os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(batch_s)
            return step(batch)

        return real(slow_step, *args)

    monkeypatch.setattr(task_agnostic, "heldout_losses", heldout_losses)
    return sent


def logged(run_dir: Path) -> list[tuple[str, int]]:
    rows = (run_dir / "train_log.jsonl").read_text().splitlines()
    return [(row["stage"], row["step"]) for row in map(json.loads, rows)]


# the evaluations: at step 0, every 3 steps (3 and 6, the last) and the final one (the metrics)
@pytest.mark.parametrize("evaluation", [2, 4], ids=["step_3", "final"])
def test_a_signal_during_a_heldout_evaluation_stops_it_in_seconds_and_the_same_command_resumes(
    tmp_path, monkeypatch, evaluation
):
    corpus = write_tiny_corpus(tmp_path / "corpus")
    reference = clean_run(agnostic_overrides(corpus, tmp_path / "ref"), tmp_path / "ref-cache")
    overrides = agnostic_overrides(corpus, tmp_path / "run")
    sent = stop_in_heldout(monkeypatch, evaluation, batch_s=4)  # 4 batches: 16 s uncut
    with pytest.raises(Interrupted, match="in heldout"):
        clean_run(overrides, tmp_path / "cache")
    assert time.perf_counter() - sent["at"] < STOPPED_WITHIN_S
    record = json.loads((tmp_path / "run" / "result.json").read_text())
    assert (record["status"], record["stopped_in"]) == ("stopped", "heldout")
    monkeypatch.undo()
    resumed = clean_run(overrides, tmp_path / "cache")
    assert resumed["metrics"] == reference["metrics"]
    assert logged(tmp_path / "run") == logged(tmp_path / "ref")


def stop_in_dev_evaluation(monkeypatch, evaluation: int) -> dict:
    """A SIGTERM as a fine-tuning's `evaluation`-th dev evaluation starts; the dict gets the time
    it was sent."""
    from kdbench.recipes import finetune

    real, calls, sent = finetune.evaluate, {"n": 0}, {}

    def evaluate(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == evaluation:
            sent["at"] = time.perf_counter()
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(finetune, "evaluate", evaluate)
    return sent


# 6 steps, the dev set evaluated at steps 2 and 4 and at the end (step 6)
@pytest.mark.parametrize("evaluation", [1, 2, 3], ids=["step_2", "step_4", "final"])
def test_a_signal_during_a_fine_tuning_dev_evaluation_resumes_to_the_same_scores_and_log(
    tiny_glue, tmp_path, monkeypatch, evaluation
):
    corpus = write_tiny_corpus(tmp_path / "corpus")
    distilled = clean_run(agnostic_overrides(corpus, tmp_path / "d"), tmp_path / "cache")

    def finetune(run_dir: Path) -> list[str]:
        student = distilled["student_path"]
        return released_finetune_overrides(
            student,
            tiny_glue,
            run_dir,
            "stages.finetune.eval_every_per_task.rte=2",
            "trainer.log_every=1",
        )

    reference = clean_run(finetune(tmp_path / "ref"), tmp_path / "cache")
    sent = stop_in_dev_evaluation(monkeypatch, evaluation)
    with pytest.raises(Interrupted, match="in evaluation"):
        clean_run(finetune(tmp_path / "run"), tmp_path / "cache")
    assert time.perf_counter() - sent["at"] < STOPPED_WITHIN_S
    record = json.loads((tmp_path / "run" / "result.json").read_text())
    assert (record["status"], record["stopped_in"]) == ("stopped", "evaluation")
    monkeypatch.undo()
    resumed = clean_run(finetune(tmp_path / "run"), tmp_path / "cache")
    assert (resumed["metrics"], resumed["scored"]) == (reference["metrics"], reference["scored"])
    assert logged(tmp_path / "run") == logged(tmp_path / "ref")
