"""The trainer group read per setting: each run-wide key declared once, with its range and whether
it is computation-only; the finetune plan."""

from __future__ import annotations

from dataclasses import fields

import pytest
from transformers import BertConfig

from kdbench.errors import ConfigError
from kdbench.planning.group_keys import rule_for
from kdbench.planning.groups import trainer_spec
from kdbench.planning.plan import make_plan
from kdbench.planning.trainer_specs import (
    COMPUTATION_ONLY,
    TRAINER_KEYS,
    ComputeSpec,
    TaskAgnosticTrainer,
    TaskSpecificTrainer,
    TrainerSpec,
    kept_on_disk,
)
from tests.helpers import compose_config

FINETUNE = ("setting=finetune", "setting.student_path=unused")


def trainer(*overrides: str):
    return trainer_spec(compose_config(list(overrides)))


@pytest.mark.parametrize(
    ("overrides", "spec"),
    [
        ((), TaskSpecificTrainer),
        (("setting=task_agnostic",), TaskAgnosticTrainer),
        (FINETUNE, TrainerSpec),
    ],
)
def test_each_setting_reads_its_own_keys_over_the_shared_ones(overrides, spec):
    read = trainer(*overrides)
    assert type(read) is spec
    others = set(TRAINER_KEYS) - {f.name for f in fields(spec)}  # only other settings read them
    assert others and not any(hasattr(read, name) for name in others)
    assert {f.name for f in fields(ComputeSpec)} <= {f.name for f in fields(spec)}


def test_the_recipes_read_their_keys_as_attributes():
    specific = trainer("trainer.teacher_dropout=true", "trainer.precision=fp32")
    agnostic = trainer("setting=task_agnostic", "trainer.heldout_batches=7")
    assert (specific.teacher_dropout, specific.precision, agnostic.heldout_batches) == (
        True,
        "fp32",
        7,
    )


def test_a_key_no_setting_has_is_refused_in_one_line():
    with pytest.raises(
        ConfigError,
        match=r"^trainer has no key stage3_epochs; valid keys: .*heldout_batches.*teacher_seed",
    ) as refused:
        trainer("+trainer.stage3_epochs=1")
    assert "\n" not in str(refused.value)


def test_ranges_and_computation_only_come_from_the_declarations():
    for name, declared in TRAINER_KEYS.items():
        rule = declared.metadata.get("rule")
        path = f"trainer.{name}.any" if declared.metadata.get("each") else f"trainer.{name}"
        assert rule_for(path) is rule
    assert set(COMPUTATION_ONLY) == {
        name for name, declared in TRAINER_KEYS.items() if declared.metadata.get("how")
    }
    assert "num_workers" in COMPUTATION_ONLY and "teacher_seed" not in COMPUTATION_ONLY
    with pytest.raises(ConfigError, match=r"^trainer.log_every=0 must be a positive integer"):
        trainer("trainer.log_every=0")


def test_the_finetune_plan_is_a_student_alone(tmp_path, tiny_glue):
    BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4).save_pretrained(tmp_path)
    plan = make_plan(
        compose_config(
            [
                "setting=finetune",
                f"setting.student_path={tmp_path}",
                "task=rte",
                f"data.glue_dir={tiny_glue}",
            ]
        )
    )
    assert (plan.teacher_conf, plan.terms, plan.batches) == (None, [], None)
    assert (plan.init.path, plan.init.label, plan.student_path) == (
        tmp_path,
        "pretrained",
        tmp_path,
    )
    assert plan.student_conf.num_hidden_layers == 2 and plan.chain[-1] == "fine-tuned on rte"


@pytest.mark.parametrize(
    ("store", "device", "on_disk"),
    [
        ("auto", "cpu", True),
        ("auto", "cuda", False),
        ("disk", "cuda", True),
        ("memory", "cpu", False),
    ],
)
def test_kept_on_disk_follows_the_store_and_the_device(store, device, on_disk):
    assert kept_on_disk(store, device) is on_disk


def test_heldout_batches_zero_is_refused_since_the_heldout_loss_is_the_runs_metric():
    with pytest.raises(
        ConfigError, match=r"^trainer.heldout_batches=0 must be a positive integer$"
    ):
        trainer("setting=task_agnostic", "trainer.heldout_batches=0")
