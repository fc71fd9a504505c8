"""What the teacher's cache keys name: the dev subset that scores a fine-tuned teacher, the data
source of both the teacher and the tables computed from it (a given teacher's too), and TF32 where
it runs."""

from __future__ import annotations

from dataclasses import replace

from kdbench.planning.plan import make_plan
from kdbench.teacher.cache import cache_path, derived_key, teacher_key
from tests.helpers import compose_config, tiny_overrides

HUB = ["teacher=tiny", "student=tiny", "task=sst2", "trainer=smoke", "objective=vanilla_kd"]


def test_the_teachers_key_names_its_dev_subset_only_where_one_is_set(tiny_glue, tmp_path):
    def key(*extra):
        return teacher_key(make_plan(compose_config(tiny_overrides(tiny_glue, tmp_path, *extra))))

    whole, part = key(), key("data.eval_limit=4")
    assert "eval_limit" not in whole["data"]
    assert part == whole | {"data": whole["data"] | {"eval_limit": 4}}


def test_the_teachers_keys_name_the_hub_dataset_its_examples_come_from(tmp_path, monkeypatch):
    monkeypatch.delenv("KDBENCH_GLUE_DIR", raising=False)
    for hub in ("nyu-mll/glue", "someone/sst2-relabelled"):
        run_dir = f"paths.run_dir={tmp_path / 'run'}"
        plan = make_plan(compose_config([*HUB, run_dir, f"data.hf_dataset={hub}"]))
        assert teacher_key(plan)["data"]["source"] == hub
        assert derived_key("a given teacher", range(3), None, plan)["source"] == hub


def test_the_teachers_keys_name_tf32_only_where_its_matmuls_run(tiny_glue, tmp_path):
    """An fp32 run on a GPU with TF32 (`plan.tf32`, resolved for the device) and one with
    `trainer.tf32=false` fine-tune and read different teachers; off a GPU nothing changes."""
    plan = make_plan(compose_config(tiny_overrides(tiny_glue, tmp_path)))
    assert not plan.tf32  # the CPU: no TF32, and keys as before
    with_tf32 = replace(plan, tf32=True)
    assert teacher_key(with_tf32) == teacher_key(plan) | {
        "recipe": teacher_key(plan)["recipe"] | {"tf32": True}
    }
    assert cache_path(with_tf32) != cache_path(plan)
    tables = derived_key("a teacher", range(3), None, plan)
    assert derived_key("a teacher", range(3), None, with_tf32) == tables | {"tf32": True}


def test_the_teachers_key_names_weight_decay_on_only_where_it_is_not_matrices(tiny_glue, tmp_path):
    def key(*extra):
        return teacher_key(make_plan(compose_config(tiny_overrides(tiny_glue, tmp_path, *extra))))

    optimizer = key()["recipe"]["stage"]["optimizer"]
    every = key("stages.teacher.optimizer.weight_decay_on=every")["recipe"]["stage"]["optimizer"]
    assert "weight_decay_on" not in optimizer and every == optimizer | {"weight_decay_on": "every"}
