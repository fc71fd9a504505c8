"""The trainer group read per setting: each key declared once, with its range and whether it is
computation-only; `trainer.finetune_epochs` and its old name."""

from __future__ import annotations

import logging
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
    FinetuneTrainer,
    TaskAgnosticTrainer,
    TaskSpecificTrainer,
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
        (FINETUNE, FinetuneTrainer),
    ],
)
def test_each_setting_reads_its_own_keys_over_the_shared_ones(overrides, spec):
    read = trainer(*overrides)
    assert type(read) is spec
    others = set(TRAINER_KEYS) - {f.name for f in fields(spec)}  # only other settings read them
    assert others and not any(hasattr(read, name) for name in others)
    assert {f.name for f in fields(ComputeSpec)} <= {f.name for f in fields(spec)}


def test_the_recipes_read_their_keys_as_attributes():
    specific = trainer("trainer.stage1_epochs=3", "trainer.precision=fp32")
    agnostic = trainer("setting=task_agnostic", "trainer.max_steps=7")
    assert (specific.stage1_epochs, specific.precision, agnostic.max_steps) == (3, "fp32", 7)


def test_a_key_no_setting_has_is_refused_in_one_line():
    with pytest.raises(
        ConfigError,
        match=r"^trainer has no key stage3_epochs; valid keys: .*"
        r"finetune_epochs.*max_steps.*stage1_epochs",
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
    assert "num_workers" in COMPUTATION_ONLY and "lr" not in COMPUTATION_ONLY
    with pytest.raises(ConfigError, match=r"^trainer.finetune_epochs=-1 must be a non-negative"):
        trainer(*FINETUNE, "trainer.finetune_epochs=-1")


@pytest.mark.parametrize(
    ("overrides", "epochs"),
    [
        ((), 10),
        (("trainer=finetune_released",), 20),
        (("trainer.finetune_epochs=4",), 4),
        (("trainer=smoke",), 1),
    ],
)  # a distillation recipe fine-tunes for its stage2_epochs
def test_finetune_epochs(overrides, epochs, caplog):
    with caplog.at_level(logging.WARNING, logger="kdbench"):
        assert trainer(*FINETUNE, *overrides).finetune_epochs == epochs
    assert caplog.records == []


def test_the_old_name_of_finetune_epochs_still_sets_them_with_a_one_line_note(caplog):
    with caplog.at_level(logging.WARNING, logger="kdbench"):
        assert trainer(*FINETUNE, "trainer.stage2_epochs=3").finetune_epochs == 3
    [note] = [record.getMessage() for record in caplog.records]
    assert (
        "\n" not in note
        and "trainer.stage2_epochs=3 is the old name of trainer.finetune_epochs" in note
    )
    assert "write trainer.finetune_epochs=3" in note


def test_distillation_keeps_stage2_epochs_under_a_finetuning_recipe():
    assert trainer("trainer=finetune", "trainer.finetune_epochs=4").stage2_epochs == 4


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
