"""The teacher's best dev epoch (`trainer.teacher_best_checkpoint`, the study's released code)."""

from __future__ import annotations

import json

import pytest

from kdbench.planning.plan import make_plan
from kdbench.teacher.cache import cache_path, teacher_key
from tests.faults.test_resume import Crash, crash_at
from tests.helpers import compose_config, tiny_overrides, tiny_teacher_setup


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """A teacher fine-tuned here, not one another test left in the session's cache."""
    monkeypatch.setenv("KDBENCH_CACHE", str(tmp_path / "cache"))


# the tiny teacher's dev accuracy peaks at epoch 3 of these 8
BEST_BEFORE_THE_LAST = (
    "trainer.teacher_best_checkpoint=true",
    "stages.teacher.epochs=8",
    "stages.teacher.optimizer.lr=2e-2",
)


def test_teacher_best_checkpoint_names_itself_in_the_key_only_when_on(tiny_glue, tmp_path):
    def key(*extra):
        return teacher_key(make_plan(compose_config(tiny_overrides(tiny_glue, tmp_path, *extra))))

    off, on = key(), key("trainer.teacher_best_checkpoint=true")
    assert key("trainer.teacher_best_checkpoint=false") == off
    assert "best_checkpoint" not in off["recipe"]
    assert on == off | {"recipe": off["recipe"] | {"best_checkpoint": True}}


def test_teacher_best_checkpoint_keeps_the_best_epoch_on_dev(tiny_glue, tmp_path):
    """At this high lr the tiny teacher's dev accuracy peaks before the last epoch: the frozen
    teacher (evaluated anew) scores the best epoch's accuracy, not the last's."""
    plan, _, _, _, teacher = tiny_teacher_setup(tiny_glue, tmp_path, *BEST_BEFORE_THE_LAST)
    rows = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    scores = [row["accuracy"] for row in rows if row["stage"] == "teacher_dev"]
    assert len(scores) == 8 and scores[-1] < max(scores)
    assert teacher.metrics["accuracy"] == max(scores)
    entry = cache_path(plan)
    assert not entry.with_name(entry.name + ".checkpoints").exists()  # best.pt went with them


def test_teacher_best_checkpoint_survives_a_resumed_fine_tuning(tiny_glue, tmp_path, monkeypatch):
    """Killed in epoch 5 (6 steps an epoch), after the best epoch: the resumed fine-tuning still
    ends with that epoch's weights, kept on disk beside its checkpoints."""
    monkeypatch.setenv("KDBENCH_CACHE", str(tmp_path / "cache-ref"))
    reference = tiny_teacher_setup(tiny_glue, tmp_path / "ref", *BEST_BEFORE_THE_LAST)[-1]
    monkeypatch.setenv("KDBENCH_CACHE", str(tmp_path / "cache"))
    crash_at(monkeypatch, "teacher", 27)
    with pytest.raises(Crash):
        tiny_teacher_setup(tiny_glue, tmp_path / "run", *BEST_BEFORE_THE_LAST)
    (partial,) = (tmp_path / "cache" / "teachers").glob("*.checkpoints")
    assert (partial / "best.pt").exists()
    monkeypatch.undo()
    monkeypatch.setenv("KDBENCH_CACHE", str(tmp_path / "cache"))
    resumed = tiny_teacher_setup(tiny_glue, tmp_path / "run", *BEST_BEFORE_THE_LAST)[-1]
    assert resumed.metrics == reference.metrics
