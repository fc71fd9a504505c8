"""The stage blocks: each setting runs its own stages, of one schema; a per-stage setting is one
key; the prediction stage's objective is terms of the loss registry; the flat keys the blocks
replace are refused in one line naming the new key."""

from __future__ import annotations

import pytest
import torch
from transformers import BertConfig

from kdbench.errors import ConfigError
from kdbench.planning.command_line import compose_check
from kdbench.planning.group_keys import rule_for
from kdbench.planning.plan import make_plan
from kdbench.planning.stage_specs import RENAMED, OptimizerSpec, StageSpec
from kdbench.recipes.task_agnostic import distillation_models
from kdbench.recipes.task_specific import stage_objective
from tests.helpers import agnostic_overrides, compose_config, tiny_overrides, write_tiny_corpus


def plan_of(glue, tmp_path, *overrides: str):
    return make_plan(compose_config(tiny_overrides(glue, tmp_path / "run", *overrides)))


def setting_overrides(setting: str, glue, tmp_path) -> list[str]:
    if setting == "task_agnostic":
        return agnostic_overrides(write_tiny_corpus(tmp_path / "corpus"), tmp_path / "run")
    if setting == "finetune":
        BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4).save_pretrained(
            tmp_path / "student"
        )
        return ["setting=finetune", f"setting.student_path={tmp_path / 'student'}"]
    return tiny_overrides(glue, tmp_path / "run")


@pytest.mark.parametrize(
    ("setting", "stages"),
    [
        ("task_specific", ["teacher", "intermediate", "prediction"]),
        ("task_agnostic", ["distillation"]),
        ("finetune", ["finetune"]),
    ],
)
def test_each_setting_runs_its_own_stages_in_order(tiny_glue, tmp_path, setting, stages):
    overrides = [*setting_overrides(setting, tiny_glue, tmp_path), f"data.glue_dir={tiny_glue}"]
    plan = make_plan(compose_config(overrides))
    assert list(plan.stages) == stages == list(plan.config["stages"])  # the record: its own only
    assert all(
        type(stage) is StageSpec and stage.name == name for name, stage in plan.stages.items()
    )


def test_one_key_clips_gradients_in_one_stage(tiny_glue, tmp_path):
    plan = plan_of(tiny_glue, tmp_path, "stages.intermediate.optimizer.max_grad_norm=1.0")
    clipped = {name: stage.optimizer.max_grad_norm for name, stage in plan.stages.items()}
    assert clipped == {"teacher": None, "intermediate": 1.0, "prediction": None}


def test_the_prediction_stage_distils_with_a_kd_term_of_the_registry(tiny_glue, tmp_path):
    plan = plan_of(tiny_glue, tmp_path, "objective=att_kl")
    [kd] = plan.stages["prediction"].terms
    assert (kd.loss, kd.feature, kd.weight, kd.params) == (
        "kd",
        "logits",
        1.0,
        {"temperature": 2.0, "alpha": 0.5},
    )
    assert [term.loss for term in plan.stages["intermediate"].terms] == ["att_kl"]
    assert plan.stages["teacher"].terms == ()  # the task's own loss


def test_any_registry_loss_can_serve_the_prediction_stage(tiny_glue, tmp_path):
    plan = plan_of(
        tiny_glue,
        tmp_path,
        "stages.prediction.objective.terms=[{loss: cosine, feature: hidden, weight: 2.0}]",
    )
    [cosine] = plan.stages["prediction"].terms
    assert (cosine.loss, cosine.weight, cosine.pairs) == ("cosine", 2.0, [(1, 2), (2, 4)])  # init


@pytest.mark.parametrize(
    ("setting_mapping", "own_mapping"), [(None, None), (None, "last"), ("last", None)]
)
def test_a_stage_objective_maps_its_layers_as_the_objective_group(
    tiny_glue, tmp_path, setting_mapping, own_mapping
):
    """The same att_kl named by `objective=` and by a stage's own objective reads the same teacher
    layers: the init's, the stage objective's own mapping, or the setting's over both."""
    over = [f"setting.mapping={setting_mapping}"] if setting_mapping else []
    group = plan_of(tiny_glue, tmp_path, "objective=att_kl", *over)
    own = "stages.intermediate.objective"
    mapping = [f"+{own}.mapping={own_mapping}"] if own_mapping else []
    named = plan_of(
        tiny_glue,
        tmp_path,
        "objective=vanilla_kd",
        f"+{own}.terms=[{{loss: att_kl, feature: attention_scores}}]",
        *mapping,
        *over,
    )
    [by_group], [by_stage] = group.stages["intermediate"].terms, named.stages["intermediate"].terms
    expected = [(2, 4)] if "last" in (setting_mapping, own_mapping) else [(1, 2), (2, 4)]
    assert by_stage.pairs == expected
    assert by_group.pairs == (expected if own_mapping is None else [(1, 2), (2, 4)])


def test_a_task_agnostic_stage_objective_is_refused_since_the_objective_group_sets_its_terms(
    tmp_path,
):
    own = "+stages.distillation.objective.terms=[{loss: mlm_kd, feature: logits}]"
    cfg = compose_config([*setting_overrides("task_agnostic", None, tmp_path), own])
    with pytest.raises(ConfigError, match=r"^stages.distillation.objective is not read: a task-ag"):
        make_plan(cfg)


def test_a_task_takes_its_own_warmup_where_the_stage_names_it(tiny_glue, tmp_path):
    at = "+stages.intermediate.optimizer.warmup_ratio_per_task"
    plan = plan_of(tiny_glue, tmp_path, f"{at}.sst2=0.25", f"{at}.rte=0.1")
    assert plan.stages["intermediate"].optimizer.warmup_ratio == 0.25
    assert plan.stages["prediction"].optimizer.warmup_ratio == 0.06


def test_a_stage_table_gives_its_task_its_own_epochs_and_evaluations(tiny_glue, tmp_path):
    from kdbench.teacher.cache import cache_path

    tables = ["+stages.teacher.epochs_per_task.sst2=3", "+stages.teacher.eval_every_per_task.rte=5"]
    plain, own = plan_of(tiny_glue, tmp_path), plan_of(tiny_glue, tmp_path, *tables)
    teacher = own.stages["teacher"]
    assert (teacher.epochs, teacher.eval_every) == (3, 0)  # sst2's epochs; rte's entry not sst2's
    assert plain.stages["teacher"].epochs == 1
    # the planned stage holds the task's values only: a table naming other tasks keeps the teacher
    rte_only = plan_of(tiny_glue, tmp_path, "+stages.teacher.epochs_per_task.rte=3")
    assert cache_path(rte_only) == cache_path(plain) != cache_path(own)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "trainer.stage1_epochs=3",
            "trainer.stage1_epochs is now stages.intermediate.epochs: "
            "write stages.intermediate.epochs=...",
        ),
        ("trainer.lr=1e-4", "trainer.lr is now stages.<stage>.optimizer.lr for each stage ("),
        (
            "prediction_kd.alpha=0.3",
            "prediction_kd.alpha is now stages.prediction.objective.terms.0.params.alpha",
        ),
    ],
)
def test_a_flat_key_the_stages_replace_is_refused_naming_its_stage_key(override, message):
    with pytest.raises(ConfigError) as refused:
        compose_check([override])
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)


@pytest.mark.parametrize("key", ["+trainer.stage2_lr=1e-4", "+prediction_kd.temperature=3"])
def test_a_flat_key_set_in_a_config_is_refused_when_planned(tiny_glue, tmp_path, key):
    name = key.lstrip("+").partition("=")[0]
    with pytest.raises(ConfigError, match=rf"^{name} is now {RENAMED[name]}"):
        plan_of(tiny_glue, tmp_path, key)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["+stages.intermediat.epochs=1"], r"^stages has no stage intermediat; the stages are "),
        (["stages.prediction.steps=5"], r"^stages.prediction needs exactly one of epochs and st"),
        (["stages.prediction.optimizer.lr=-1"], r"^stages.prediction.optimizer.lr=-1 must be a "),
        (["stages.teacher.optimizer.betas=[0.9]"], r"^stages.teacher.optimizer.betas=\[0.9\] mu"),
        (["+stages.teacher.optimizer.momentum=0.9"], r"^stages.teacher.optimizer has no key mom"),
        (["stages.teacher.objective={terms: []}"], r"^stages.teacher.objective must be null: "),
        (["+stages.teacher.padding=tinybert"], r"^stages.teacher.padding=tinybert averages dis"),
        (
            ["stages.intermediate.padding=zeros"],
            r"^stages.intermediate.padding='zeros' must be one ",
        ),
        (
            ["objective=att_kl", "stages.intermediate.padding=tinybert"],
            r"^stages.intermediate.padding=tinybert is TinyBERT's average over padding, which "
            r"only att_mse, hid_mse have; the term att_kl is att_kl on attention_scores: set ",
        ),
    ],
)
def test_a_bad_stage_setting_is_refused_in_one_line(tiny_glue, tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message) as refused:
        plan_of(tiny_glue, tmp_path, *overrides)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("setting", "stage"),
    [("task_specific", "teacher"), ("task_specific", "prediction"), ("finetune", "finetune")],
)
def test_device_batch_size_is_refused_outside_the_distillation_stage(
    tiny_glue, tmp_path, setting, stage
):
    """Only the task-agnostic distillation stage splits its batch: elsewhere the key would be
    ignored."""
    overrides = [
        *setting_overrides(setting, tiny_glue, tmp_path),
        f"data.glue_dir={tiny_glue}",
        f"stages.{stage}.device_batch_size=4",
    ]
    message = (
        rf"^stages.{stage}.device_batch_size=4: micro-batches apply to the task-agnostic "
        rf"distillation stage only \(stages.distillation\): set stages.{stage}.device_batch_size="
        rf"null and lower stages.{stage}.batch_size to fit the device$"
    )
    with pytest.raises(ConfigError, match=message):
        make_plan(compose_config(overrides))


def test_a_device_batch_that_divides_each_process_s_share_plans_on_several_processes(
    tmp_path, monkeypatch
):
    """6 sequences over 2 processes are 3 each, one micro-batch under device_batch_size=4; the
    held-out sample keeps one process's micro-batch of 4, though 4 does not divide 6."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    overrides = [
        *setting_overrides("task_agnostic", None, tmp_path),
        "stages.distillation.batch_size=6",
        "stages.distillation.device_batch_size=4",
    ]
    batches = make_plan(compose_config(overrides)).batches
    assert (batches.per_process, batches.accumulation, batches.heldout_batch) == (3, 1, 4)


def test_padding_is_each_stage_s_own(tiny_glue, tmp_path):
    plan = plan_of(
        tiny_glue, tmp_path, "objective=tinybert", "stages.intermediate.padding=tinybert"
    )
    padding = {name: stage.padding for name, stage in plan.stages.items()}
    assert padding == {"teacher": "masked", "intermediate": "tinybert", "prediction": "masked"}
    assert plan.config["stages"]["intermediate"]["padding"] == "tinybert"  # as the record keeps it
    assert plan.stages["intermediate"].pad_to(64) == 64
    assert plan.stages["prediction"].pad_to(64) is None
    logits_only = plan_of(tiny_glue, tmp_path, "stages.prediction.padding=tinybert")
    assert logits_only.stages["prediction"].padding == "tinybert"  # kd reads no padded position


def test_the_stage_ranges_come_from_the_declarations():
    lr = OptimizerSpec.__dataclass_fields__["lr"].metadata["rule"]
    assert rule_for("stages.prediction.optimizer.lr") is lr
    assert (
        rule_for("stages.teacher.epochs")
        is StageSpec.__dataclass_fields__["epochs"].metadata["rule"]
    )


@pytest.mark.parametrize("setting", ["task_specific", "task_agnostic"])
@pytest.mark.parametrize(("compile_flag", "backend"), [("true", "inductor"), ("false", None)])
def test_trainer_compile_compiles_the_losses_chains_in_each_setting(
    tiny_glue, tmp_path, setting, compile_flag, backend
):
    overrides = setting_overrides(setting, tiny_glue, tmp_path)
    plan = make_plan(compose_config([*overrides, f"trainer.compile={compile_flag}"]))
    if setting == "task_agnostic":
        _, _, objective = distillation_models(plan)
    else:
        objective = stage_objective(plan, plan.stages["intermediate"], torch.zeros(48).long())
    assert objective.compile_backend == backend


HID = "{loss: hid_mse, feature: hidden}"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            [f"stages.intermediate.objective={{mapping: [1, 9], terms: [{HID}]}}"],
            r"^stages.intermediate.objective.mapping=\[1, 9\]: layer 9 does not exist",
        ),
        (
            [f"stages.intermediate.objective={{mapping: [1, 2, 3], terms: [{HID}]}}"],
            r"^stages.intermediate.objective.mapping=\[1, 2, 3\] has 3 entries but the student",
        ),
        (
            [
                "stages.prediction.objective.terms=[{loss: kd, feature: logits}, "
                "{loss: hid_mse, feature: hidden, mapping: [7, 8]}]"
            ],
            r"^stages.prediction.objective.terms.1.mapping=\[7, 8\]: layer 7 does not exist",
        ),
        (
            ["objective=hid_seq", "init=random", "student.num_layers=3"],
            r"^objective.mapping=init maps every k-th teacher layer into a random student, and "
            r"the teacher's 4 layers are not a multiple of the student's 3: give one teacher "
            r"layer per student layer \(objective.mapping=\[\.\.\.\]\)$",
        ),
    ],
)
def test_a_layer_mapping_the_models_lack_is_refused_naming_the_key_that_gave_it(
    tiny_glue, tmp_path, overrides, message
):
    with pytest.raises(ConfigError, match=message):
        plan_of(tiny_glue, tmp_path, *overrides)


@pytest.mark.parametrize("stage", ["intermediate", "prediction"])
def test_a_stage_that_runs_with_an_empty_term_list_is_refused(tiny_glue, tmp_path, stage):
    message = (
        rf"^stages.{stage}.objective.terms is empty, so the stage would not train: give it "
        rf"terms, or skip it with stages.{stage}.epochs=0 stages.{stage}.steps=null$"
    )
    with pytest.raises(ConfigError, match=message):
        plan_of(tiny_glue, tmp_path, "objective=att_kl", f"stages.{stage}.objective={{terms: []}}")
    skipped = plan_of(
        tiny_glue, tmp_path, f"stages.{stage}.objective={{terms: []}}", f"stages.{stage}.epochs=0"
    )
    assert not skipped.stages[stage].runs
