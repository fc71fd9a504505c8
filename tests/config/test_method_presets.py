"""The original methods' presets (TinyBERT's two stages, MiniLM's teacher assistant, DistilBERT) and
their CPU replicas: they follow their papers, chain in the study, and every first stage plans."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from transformers import BertConfig

from kdbench import study
from kdbench.models.student import build_student
from kdbench.objectives.terms import Objective
from kdbench.planning import study_config
from kdbench.planning.groups import shape_spec
from kdbench.planning.plan import make_plan
from kdbench.planning.stage_specs import SETTING_STAGES
from tests.config.test_agnostic_presets import known_architectures, preset  # noqa: F401 (a fixture)


def test_distilbert_recipe_is_its_paper():
    cfg = preset("distilbert_recipe")
    assert (
        cfg.setting.name,
        cfg.teacher.name,
        cfg.student.name,
        cfg.init.name,
        cfg.objective.name,
    ) == ("task_agnostic", "bert_base_uncased", "6x768", "layers", "distilbert")
    weights = {t.name: t.weight for t in cfg.objective.terms_task_agnostic}
    assert weights == {"mlm_kd": 5.0, "mlm": 2.0, "cos": 1.0}
    assert cfg.objective.terms_task_agnostic[0].positions == "attended"  # restrict_ce_to_mask=False
    assert cfg.trainer.mlm_smoothing == 0.7
    assert preset("table2_agnostic").trainer.mlm_smoothing is None
    assert cfg.objective.terms_task_agnostic[0].params.temperature == 2.0


def test_distilbert_recipe_copies_the_released_extractions_layers(known_architectures):  # noqa: F811
    plan = make_plan(preset("distilbert_recipe", hydra=False))
    assert plan.init.layers == (1, 3, 5, 8, 10, 12)  # extract_distilbert.py's 0-based 0,2,4,7,9,11
    paper = make_plan(preset("distilbert_recipe", "init=every_kth", hydra=False))
    assert paper.init.layers == (2, 4, 6, 8, 10, 12)


def test_distilbert_recipe_cosine_compares_raw_hidden_states(known_architectures):  # noqa: F811
    plan = make_plan(preset("distilbert_recipe", hydra=False))
    cos = next(term for term in plan.terms if term.name == "cos")
    assert not cos.projected and cos.pairs == [(6, 12)]
    objective = Objective(plan.terms, plan.student_conf, plan.teacher_conf)
    assert "cos" not in objective.projections
    assert not list(objective.parameters())  # no trainable parameters
    learnt = "objective.terms_task_agnostic.2.projection=null"
    projected = make_plan(preset("distilbert_recipe", learnt, hydra=False))
    objective = Objective(projected.terms, projected.student_conf, projected.teacher_conf)
    assert objective.projections["cos"]


def test_tinybert_recipe_is_general_then_task_specific_distillation(known_architectures):  # noqa: F811
    general = preset("tinybert_recipe")
    assert (general.student.name, general.objective.name, general.setting.mapping) == (
        "4x312",
        "tinybert",
        None,
    )
    stage = general.stages.distillation
    assert (stage.batch_size, stage.optimizer.lr, stage.optimizer.warmup_ratio) == (256, 5e-5, 0.1)
    plan = make_plan(preset("tinybert_recipe", hydra=False))
    pairs = {(t.name, tuple(t.pairs)) for t in plan.terms}
    assert ("hid_mse", ((1, 3), (2, 6), (3, 9), (4, 12))) in pairs and (
        "emb_mse",
        ((0, 0),),
    ) in pairs
    task = preset("tinybert_recipe_task")
    intermediate, prediction = task.stages.intermediate, task.stages.prediction
    stages = (intermediate.epochs, intermediate.optimizer.lr, prediction.epochs)
    assert stages + (prediction.optimizer.lr,) == (10, 5e-5, 3, 3e-5)
    assert (
        task.init.name,
        task.augment.name,
        task.augment.n_per_example,
        task.augment.p_replace,
    ) == ("pretrained", "tinybert", 20, 0.4)
    assert task.augment.mlm_model == "bert-base-uncased"


@pytest.mark.parametrize(
    "name", ["tinybert_recipe", "tinybert_recipe_task", "mini_tinybert", "mini_tinybert_task"]
)
def test_tinybert_optimiser_is_the_released_bert_adam(name):
    stages = preset(name).stages
    setting = "task_specific" if name.endswith("_task") else "task_agnostic"
    for stage in SETTING_STAGES[setting]:
        optimizer = stages[stage].optimizer
        optimiser = (
            optimizer.weight_decay,
            list(optimizer.betas),
            optimizer.max_grad_norm,
            optimizer.warmup_ratio,
        )
        assert optimiser == (0.01, [0.9, 0.999], 1.0, 0.1), stage


@pytest.mark.parametrize("name", ["tinybert_recipe_task", "mini_tinybert_task"])
def test_tinybert_task_stage_is_as_released(name):
    cfg = preset(name)
    (kd,) = cfg.stages.prediction.objective.terms  # soft CE on the teacher's logits only
    assert kd.loss == "kd" and (kd.params.temperature, kd.params.alpha) == (1.0, 1.0)
    schedule = cfg.stages.intermediate.optimizer.schedule
    assert schedule == "constant" and cfg.init.carry_projections is True
    study = preset("table1_objectives").stages
    assert study.intermediate.optimizer.schedule == "linear"  # the study's
    assert study.prediction.objective.terms[0].params.temperature == 2.0


@pytest.mark.parametrize(
    "name", ["tinybert_recipe", "tinybert_recipe_task", "mini_tinybert", "mini_tinybert_task"]
)
def test_tinybert_presets_pad_and_sample_as_released(name):
    """task_distill.py pads every example to max_seq_length (128: the per-task lengths it sets go to
    args.max_seq_len, which nothing reads), samples at random and averages its MSE losses over
    every position; general_distill.py averages the same way. The study's presets keep the masked
    mean over real tokens."""
    stages = preset(name).stages
    setting = "task_specific" if name.endswith("_task") else "task_agnostic"
    for stage in SETTING_STAGES[setting]:
        if stage != "teacher":
            assert (stages[stage].padding, stages[stage].group_by_length) == ("tinybert", False)
    if name == "tinybert_recipe_task":
        assert preset(name).trainer.max_length == 128
    study = preset("table1_objectives").stages
    assert study.intermediate.padding == study.prediction.padding == "masked"


def test_the_tinybert_preset_plans_its_padding(known_architectures):  # noqa: F811
    plan = make_plan(preset("tinybert_recipe", hydra=False))
    assert plan.stages["distillation"].padding == "tinybert"
    assert {term.loss for term in plan.stages["distillation"].terms} == {"att_mse", "hid_mse"}


@pytest.mark.parametrize(
    ("name", "eval_every"),
    [
        ("tinybert_recipe_task", 100),
        ("mini_tinybert_task", 50),
        ("tinybert_recipe", None),
        ("mini_tinybert", None),
    ],
)
def test_tinybert_teacher_has_dropout_and_the_task_stage_scores_its_best_checkpoint(
    name, eval_every
):
    """As released: the teacher never in eval mode (general_distill.py, task_distill.py), the
    prediction stage's best dev evaluation every --eval_step steps (README: 100; default 50)."""
    cfg = preset(name)
    assert cfg.trainer.teacher_dropout is True
    if eval_every is not None:
        assert cfg.trainer.student_best_checkpoint is True
        assert cfg.stages.prediction.eval_every == eval_every
    study = preset("table1_objectives").trainer
    assert (study.teacher_dropout, study.student_best_checkpoint) == (False, False)


@pytest.mark.parametrize(
    ("task", "epochs", "batch"),
    [
        ("cola", 50, 32),
        ("mnli", 5, 256),
        ("qqp", 5, 256),
        ("qnli", 5, 256),
        ("sst2", 10, 32),
        ("rte", 10, 32),
        ("stsb", 10, 32),
    ],
)
def test_tinybert_task_stage_epochs_and_batch_are_the_papers_per_task(task, epochs, batch):
    """Appendix B: the per-task epochs and batch are the intermediate stage's; the prediction
    stage runs at batch 32 for every task (README: --pred_distill ... --train_batch_size 32)."""
    stages = preset("tinybert_recipe_task", f"task={task}").stages
    got = (stages.intermediate.epochs, stages.intermediate.batch_size, stages.prediction.epochs)
    assert got == (epochs, batch, 3)
    assert stages.teacher.batch_size == stages.prediction.batch_size == 32


def test_tinybert_task_stage_sweeps_the_tasks_of_its_papers_table2():
    """TinyBERT's Table 2: MNLI, QQP, QNLI, SST-2, CoLA, STS-B, MRPC and RTE."""
    tasks = preset("tinybert_recipe_task").hydra.sweeper.params.task.split(",")
    assert sorted(tasks) == ["cola", "mnli", "mrpc", "qnli", "qqp", "rte", "sst2", "stsb"]


def test_minilm_ta_distils_an_assistant_of_the_teachers_depth_then_the_student():
    first, second = preset("minilm_ta"), preset("minilm_ta_student")
    assert (first.teacher.name, first.student.name, first.objective.name) == (
        "bert_base_uncased",
        "12x384",
        "att_kl+val_kl",
    )
    assert (second.teacher.name, second.student.name, second.objective.name) == (
        "distilled",
        "3x384",
        "att_kl+val_kl",
    )


@pytest.mark.parametrize("name", ["minilm_ta", "minilm_ta_student"])
def test_minilm_presets_use_its_supplements_recipe(name):
    cfg = preset(name)
    stage = cfg.stages.distillation
    warmup_steps = stage.optimizer.warmup_ratio * stage.steps
    recipe = (stage.batch_size, stage.optimizer.lr, stage.steps, warmup_steps)
    assert recipe == (256, 3e-4, 400000, 4000)
    adam = (list(stage.optimizer.betas), stage.optimizer.weight_decay, cfg.corpus.seq_len)
    assert adam == ([0.9, 0.999], 0.01, 512)
    assert cfg.objective.terms[1].params.scale_by == "teacher"


@pytest.mark.parametrize("name", ["mini_minilm_ta", "mini_minilm_ta_student"])
def test_mini_minilm_presets_scale_only_batch_steps_and_length(name):
    cfg = preset(name)
    optimizer = cfg.stages.distillation.optimizer
    recipe = (optimizer.lr, list(optimizer.betas), optimizer.weight_decay)
    assert recipe == (3e-4, [0.9, 0.999], 0.01)
    assert cfg.objective.terms[1].params.scale_by == "teacher"
    study = preset("table2_agnostic", "objective=att_kl+val_kl")
    assert study.objective.terms[1].params.scale_by == "own"


@pytest.mark.parametrize(
    ("name", "shapes", "pair"),
    [
        ("minilm_v2_recipe", ("bert_base_uncased", "6x768", "random"), (6, 12)),
        ("mini_minilm_v2", ("minilm_l6", "3x384", "random"), (3, 6)),
    ],
)
def test_minilm_v2_presets_distil_48_relation_heads_of_the_last_layers(
    name,
    shapes,
    pair,
    known_architectures,  # noqa: F811 (the fixture)
    tmp_path,
):
    cfg = preset(name, hydra=False)
    assert (cfg.setting.name, cfg.teacher.name, cfg.student.name, cfg.init.name) == (
        "task_agnostic",
        *shapes,
    )
    corpus = [f"corpus.path={tmp_path}"] if cfg.corpus.name == "local" else []
    plan = make_plan(preset(name, *corpus, hydra=False))
    # the paper's base-size teacher: its last layer to the student's last, Q-Q, K-K, V-V summed
    assert [(t.name, t.loss, t.feature, t.weight, t.pairs) for t in plan.terms] == [
        (relation, "relation_kl", feature, 1.0, [pair])
        for relation, feature in (("qq_kl", "query"), ("kk_kl", "key"), ("vv_kl", "value"))
    ]
    assert all(term.params["num_heads"] == 48 for term in plan.terms)
    assert preset("mini_minilm_v2_finetune").paper_analogue is None  # no cell of the paper's


@pytest.mark.parametrize(
    ("name", "next_preset", "key"),
    [
        ("minilm_ta", "minilm_ta_student", "teacher.name_or_path"),
        ("mini_minilm_ta", "mini_minilm_ta_student", "teacher.name_or_path"),
        ("tinybert_recipe", "tinybert_recipe_task", "init.path"),
        ("mini_tinybert", "mini_tinybert_task", "init.path"),
        ("distilbert_recipe", "table2_agnostic_finetune", "setting.student_path"),
        ("minilm_v2_recipe", "table2_agnostic_finetune", "setting.student_path"),
        ("mini_minilm_v2", "mini_minilm_v2_finetune", "setting.student_path"),
    ],
)
def test_the_study_hands_each_student_to_the_next_preset(name, next_preset, key, tmp_path):
    got = study_config.make_study(name, [f"hydra.sweep.dir={tmp_path}"], [])
    assert (got.next, got.finetunes) == (next_preset, True)
    student = tmp_path / "seed=1" / "student"
    step = "finetune" if key == "setting.student_path" else next_preset
    assert study.finetune_command(got, student, 2) == [
        sys.executable,
        "-m",
        "kdbench.run",
        "-m",
        f"+experiment={next_preset}",
        f"hydra.sweep.dir='{tmp_path / step / 'seed=1'}'",
        f"{key}='{student.resolve()}'",
        *([] if step == "finetune" else ["seed=2"]),  # a chained distillation: its student's
    ]


def test_a_bad_chain_is_one_line(tmp_path, monkeypatch):
    from omegaconf import OmegaConf

    from kdbench.errors import ConfigError

    cfg = OmegaConf.create(
        {"chain": {"next": "nope", "student_as": "teacher"}, "setting": {"name": "task_agnostic"}}
    )
    with pytest.raises(ConfigError, match="chain needs next .* and student_as"):
        study_config.next_step("x", cfg)


def test_the_mini_chains_plan_with_their_students(
    tmp_path,
    tiny_glue,
    known_architectures,  # noqa: F811 (the fixture)
    monkeypatch,
):
    student = shape_spec(preset("mini_tinybert_task", hydra=False).student, "student")
    teacher = BertConfig(
        num_hidden_layers=6, hidden_size=384, num_attention_heads=12, intermediate_size=1536
    )
    build_student(teacher, student, 2, 0, mlm=True).save_pretrained(tmp_path / "general")
    plan = make_plan(
        preset(
            "mini_tinybert_task",
            f"init.path={tmp_path / 'general'}",
            f"data.glue_dir={tiny_glue}",
            hydra=False,
        )
    )
    assert plan.init.path == tmp_path / "general" and plan.augment.n_per_example == 4
    assert plan.augment.mlm_shape.num_layers == 2 and plan.stages["prediction"].optimizer.lr == 1e-4
    assistant = shape_spec(preset("mini_minilm_ta", hydra=False).student, "assistant")
    assert (assistant.num_layers, assistant.hidden_size, assistant.num_heads) == (6, 192, 12)
    build_student(teacher, assistant, 2, 0, mlm=True).save_pretrained(tmp_path / "assistant")
    monkeypatch.undo()  # the distilled teacher's architecture is read from its folder
    plan = make_plan(
        preset(
            "mini_minilm_ta_student",
            f"teacher.name_or_path={tmp_path / 'assistant'}",
            f"corpus.path={tmp_path}",
            hydra=False,
        )
    )
    assert (plan.teacher_conf.num_hidden_layers, plan.teacher_conf.hidden_size) == (6, 192)
    assert (plan.student_conf.num_hidden_layers, plan.student_conf.hidden_size) == (3, 192)
    assert Path(plan.teacher.name_or_path) == tmp_path / "assistant"


def test_job_folders_never_name_the_student_a_chained_step_takes():
    excluded = set(preset("mini_tinybert").hydra.job.config.override_dirname.exclude_keys)
    assert (
        set(study_config.STUDENT_AS.values()) <= excluded
    )  # a path would pass the file system's 255-byte names


def test_a_chain_ending_in_a_distillation_ends_with_its_students_not_a_report(
    tmp_path, monkeypatch, capsys
):
    from tests.unit.test_study import FakeSteps, write_record

    assert study_config.make_study("mini_tinybert", [], []).reports  # its last step scores SST-2
    got = study_config.make_study("mini_minilm_ta", [f"hydra.sweep.dir={tmp_path}"], [])
    assert not got.reports
    student = write_record(tmp_path / "seed=1")
    fake = FakeSteps()
    monkeypatch.setattr(study, "run_child", fake)
    study.run_study(got)
    assert fake.commands == [study.distill_command(got), study.finetune_command(got, student, 1)]
    assert "its students are the student/ folders under" in capsys.readouterr().out
