"""Every option of every config group composes, and options are data of the documented shape."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from kdbench.errors import ConfigError
from kdbench.planning.hydra_config import config_dir, group_options
from tests.helpers import compose_config

GROUPS = sorted(p.name for p in config_dir().iterdir() if p.is_dir() and any(p.glob("*.yaml")))
OPTIONS = [(group, option) for group in GROUPS for option in group_options(group)]


@pytest.mark.parametrize(("group", "option"), OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_every_group_option_composes(group, option):
    if group == "experiment":  # global overrides, composed with + (see test_experiments_compose)
        return
    overrides = [f"{group}={option}"]
    if (group, option) == ("init", "layers"):
        overrides.append("init.layers=[4,8,12]")
    cfg = compose_config(overrides)
    resolved = OmegaConf.to_container(cfg[group], resolve=True)  # every interpolation resolves
    assert resolved["name"] == option


def test_the_groups_users_rely_on_exist():
    assert {
        "setting",
        "task",
        "teacher",
        "student",
        "init",
        "objective",
        "trainer",
        "data",
        "logger",
    } <= set(GROUPS)
    assert {"cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"} <= set(
        group_options("task")
    )
    assert {"roberta_base", "bert_base_uncased", "minilm_l6", "tiny"} <= set(
        group_options("teacher")
    )
    assert {"random", "layers", "every_kth", "bottom"} <= set(group_options("init"))


@pytest.mark.parametrize("option", group_options("student"))
def test_student_shapes_are_named_by_layers_and_width(option):
    student = compose_config([f"student={option}"]).student
    assert set(student) == {"name", "num_layers", "hidden_size", "num_heads", "ffn_size"}
    if option != "tiny":
        assert option == f"{student.num_layers}x{student.hidden_size}"
    assert student.hidden_size % student.num_heads == 0


def test_layer_lists_are_integer_lists():
    cfg = compose_config(["init=layers", "init.layers=[1,8,12]"])
    assert list(cfg.init.layers) == [1, 8, 12]
    assert all(isinstance(x, int) for x in cfg.init.layers)


def test_task_recipe_follows_the_paper():
    sst2 = compose_config(["task=sst2"]).stages
    for stage in ("teacher", "intermediate", "prediction"):  # the task's lr and batch: below
        assert (sst2[stage].epochs, sst2[stage].optimizer.warmup_ratio) == (10, 0.06)


# RoBERTa's GLUE table (fairseq, examples/roberta/README.glue.md): --lr and --max-sentences, the
# "recommended hyperparameters" the paper's task-specific setting follows (its Appendix A).
ROBERTA_GLUE_RECIPE = {
    "mnli": (1e-5, 32),
    "qnli": (1e-5, 32),
    "qqp": (1e-5, 32),
    "rte": (2e-5, 16),
    "sst2": (1e-5, 32),
    "mrpc": (1e-5, 16),
    "cola": (1e-5, 16),
    "stsb": (2e-5, 16),
}


@pytest.mark.parametrize(("task", "recipe"), ROBERTA_GLUE_RECIPE.items())
def test_every_task_s_lr_and_batch_are_robertas_recipe(task, recipe):
    stages = compose_config([f"task={task}", "teacher=roberta_base"]).stages
    for stage in ("teacher", "intermediate", "prediction"):
        assert (stages[stage].optimizer.lr, stages[stage].batch_size) == recipe


def test_objective_with_a_plus_in_its_name_is_selectable():
    names = group_options("objective")
    assert "att_kl" in names and "vanilla_kd" in names
    for name in names:
        if "+" in name:
            assert compose_config([f"objective={name}"]).objective.name == name


@pytest.mark.parametrize("experiment", group_options("experiment"))
def test_experiments_compose_with_their_sweep(experiment):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        cfg = compose("config", overrides=[f"+experiment={experiment}"], return_hydra_config=True)
    assert cfg.hydra.sweeper.params, "an experiment preset declares its sweep"
    OmegaConf.to_container(cfg, resolve=False)
    if experiment.endswith(
        "_finetune"
    ):  # a task-agnostic study's grid: the student's seed is the distillation's
        assert cfg.setting.name == "finetune" and "task" in cfg.hydra.sweeper.params
    elif experiment.startswith(("table", "mini")):
        assert (
            cfg.setting.name in ("task_specific", "task_agnostic")
            and "seed" in cfg.hydra.sweeper.params
        )


def test_paper_presets_follow_the_paper():
    table1 = compose_config(["+experiment=table1_objectives"])
    assert (table1.teacher.name, table1.student.name, list(table1.init.layers)) == (
        "roberta_base",
        "3x768",
        [4, 8, 12],
    )
    mini = compose_config(["+experiment=mini_table1"])
    assert (mini.teacher.name, mini.student.name, list(mini.init.layers)) == (
        "minilm_l6",
        "3x384",
        [2, 4, 6],
    )


def test_sweep_job_folders_end_with_the_seed():
    from kdbench.planning.hydra_config import job_dir_name

    assert job_dir_name("objective=att_kl,task=rte", 3) == "objective=att_kl,task=rte,seed=3"
    assert job_dir_name("", 1) == "seed=1"
    assert job_dir_name("data.glue_dir=/a/b", 1) == "data.glue_dir=_a_b,seed=1"
    many = ",".join(f"trainer.option_{i}={i}" for i in range(30))
    other = many.replace("option_29=29", "option_29=30")
    long_name, other_name = job_dir_name(many, 1), job_dir_name(other, 1)
    assert (
        len(long_name.encode()) <= 255
        and long_name.startswith("trainer.option_0=0,")
        and long_name.endswith(",seed=1")
    )
    assert long_name != other_name and long_name == job_dir_name(many, 1)


def test_slurm_launcher_preset_composes_on_submitit():
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        cfg = compose(
            "config",
            overrides=["hydra/launcher=slurm", "hydra.launcher.partition=gpu"],
            return_hydra_config=True,
        )
    assert (
        cfg.hydra.launcher._target_
        == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    )
    assert (cfg.hydra.launcher.partition, cfg.hydra.launcher.gpus_per_node) == ("gpu", 1)


def test_data_parallel_slurm_preset_runs_a_task_per_gpu():
    from kdbench.planning.hydra_config import compose

    cfg = compose(
        [
            "+experiment=table2_agnostic",
            "hydra/launcher=slurm_ddp",
            "hydra.launcher.nodes=4",
            "hydra.launcher.gpus_per_node=4",
        ],
        hydra_config=True,
    )
    launcher = cfg.hydra.launcher
    assert (
        launcher._target_ == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    )
    assert (launcher.nodes, launcher.gpus_per_node, launcher.tasks_per_node) == (4, 4, 4)
    # the recipe's global batch, whatever the number of tasks
    assert cfg.stages.distillation.batch_size == 1024


def test_settings_of_how_a_run_computes_do_not_change_what_it_resumes():
    """An out-of-memory run re-run with recomputation on resumes its checkpoints; a different recipe
    does not."""
    from kdbench.planning.groups import container
    from kdbench.planning.plan import config_fingerprint
    from kdbench.planning.trainer_specs import COMPUTATION_ONLY

    def fingerprint(overrides):
        return config_fingerprint(container(compose_config(overrides)))

    base = fingerprint([])
    flipped = [f"trainer.{key}={not compose_config([]).trainer[key]}" for key in COMPUTATION_ONLY]
    assert fingerprint(flipped) == base
    assert fingerprint(["stages.intermediate.optimizer.lr=1e-3"]) != base


def test_the_teachers_batches_are_its_own_stages(tiny_glue):
    from kdbench.planning.plan import make_plan
    from kdbench.teacher.cache import cache_path

    base = ["teacher=tiny", "student=tiny", "task=sst2", f"data.glue_dir={tiny_glue}"]
    students = [
        "stages.intermediate.group_by_length=false",
        "stages.prediction.group_by_length=false",
    ]
    grouped, plain, pinned, students_plain = (
        make_plan(compose_config([*base, *extra]))
        for extra in (
            [],
            [*students, "stages.teacher.group_by_length=false"],
            ["stages.teacher.group_by_length=false"],
            students,
        )
    )
    assert (grouped.stages["teacher"].group_by_length, plain.stages["teacher"].group_by_length) == (
        True,
        False,
    )
    assert pinned.stages["intermediate"].group_by_length
    assert not pinned.stages["teacher"].group_by_length
    assert not students_plain.stages["prediction"].group_by_length
    # a teacher on other batches is another; the students' batches leave it as it is
    assert cache_path(plain) == cache_path(pinned) != cache_path(grouped)
    assert cache_path(students_plain) == cache_path(grouped)


def planned_stages(*overrides: str) -> dict:
    """The planned stage blocks (`StageSpec`s) of a composed config, for its task."""
    from kdbench.planning.group_keys import checked_stages
    from kdbench.planning.groups import container
    from kdbench.planning.stage_specs import stage_specs

    cfg = compose_config(list(overrides))
    return stage_specs(checked_stages(container(cfg.stages)), cfg.setting.name, cfg.task.name)


@pytest.mark.parametrize(
    ("task", "epochs", "eval_every"),
    [("cola", 20, 50), ("sst2", 20, 50), ("rte", 20, 50), ("mrpc", 20, 50)]
    + [("mnli", 10, 500), ("qnli", 10, 500), ("qqp", 10, 500), ("stsb", 10, 500)],
)
def test_finetune_released_is_the_released_driver_per_task(task, epochs, eval_every):
    # huggingface_finetune.py:36-42: 20 epochs and --eval_steps 50 for CoLA, SST-2, RTE and MRPC,
    # 10 epochs otherwise (the Trainer's eval_steps then its logging_steps, 500); the Trainer's
    # defaults: no warm-up, no weight decay, gradients clipped at 1.0
    released = planned_stages("setting=finetune", "trainer=finetune_released", f"task={task}")
    stage = released["finetune"]
    assert (stage.epochs, stage.eval_every) == (epochs, eval_every)
    optimizer = stage.optimizer
    assert (optimizer.warmup_ratio, optimizer.weight_decay, optimizer.max_grad_norm) == (
        0.0,
        0.0,
        1.0,
    )
    text = planned_stages("setting=finetune", "trainer=finetune", f"task={task}")["finetune"]
    assert (text.epochs, text.eval_every, text.optimizer.max_grad_norm) == (10, 0, None)


def test_a_tasks_entry_in_a_stage_table_is_its_own_value():
    released = ("setting=finetune", "trainer=finetune_released")
    table = "stages.finetune.epochs_per_task"
    assert planned_stages(*released, "task=rte", f"{table}.rte=3")["finetune"].epochs == 3
    # a task the table does not name takes the block's value; the table is the override
    four = "stages.finetune.epochs=4"
    assert planned_stages(*released, "task=qqp", four)["finetune"].epochs == 4
    assert planned_stages(*released, "task=rte", four)["finetune"].epochs == 20
    every = "+stages.teacher.eval_every_per_task.sst2=7"
    assert planned_stages("task=sst2", every)["teacher"].eval_every == 7
    with pytest.raises(ConfigError, match=r"epochs_per_task\.rte=1\.5 must be a non-negative"):
        planned_stages(*released, "task=rte", f"{table}.rte=1.5")
    with pytest.raises(ConfigError, match="needs exactly one of epochs and steps"):
        planned_stages(*released, "task=rte", "stages.finetune.steps=10")


def test_warmup_ratio_per_task_gives_qqp_the_study_recipes_warm_up():
    def warmup(*overrides):
        stages = planned_stages(*overrides)
        return {name: stage.optimizer.warmup_ratio for name, stage in stages.items()}

    # ts/experiments.py:69,97-98: QQP's 28318 warm-up updates of 113272 in both distillation
    # stages, every other task 6 %; the teacher's fine-tuning (not in the driver) keeps 6 %
    assert warmup("task=qqp") == {"teacher": 0.06, "intermediate": 0.25, "prediction": 0.25}
    assert warmup("task=rte") == {"teacher": 0.06, "intermediate": 0.06, "prediction": 0.06}
    per_task = "stages.finetune.optimizer.warmup_ratio_per_task"
    finetune = ("setting=finetune", "trainer=finetune_released")
    assert warmup(*finetune, "task=qqp") == {"finetune": 0.0}  # the fine-tuning driver has none
    assert warmup("setting=finetune", "task=rte", f"+{per_task}.rte=0.1") == {"finetune": 0.1}
    # the table names QQP's own: a stage-wide warm-up leaves it, the task's entry is the override
    at = "stages.intermediate.optimizer"
    assert warmup("task=qqp", f"{at}.warmup_ratio=0.1")["intermediate"] == 0.25
    assert warmup("task=qqp", f"{at}.warmup_ratio_per_task.qqp=0.1")["intermediate"] == 0.1
    tinybert = warmup("+experiment=tinybert_recipe_task", "task=qqp")  # BertAdam: 10 % for all
    assert tinybert == {"teacher": 0.1, "intermediate": 0.1, "prediction": 0.1}
    with pytest.raises(ConfigError, match=r"warmup_ratio_per_task\.sst2"):
        warmup("task=qqp", f"+{at}.warmup_ratio_per_task.sst2=1.5")
