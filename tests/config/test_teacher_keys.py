"""What the teacher's cache keys name: the dev subset that scores a fine-tuned teacher, and the data
source of both the teacher and the tables computed from it (a given teacher's too)."""

from __future__ import annotations

from kdbench.planning.plan import make_plan
from kdbench.teacher.cache import derived_key, teacher_key
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
