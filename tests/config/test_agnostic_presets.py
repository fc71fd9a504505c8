"""The task-agnostic study presets (Tables 2 and 4, the CPU replica mini_table2) and their
fine-tuning grids: they compose, follow the paper's recipe, and every point of their sweeps plans
(architectures, no weights)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
import torch
from transformers import BertConfig

from kdbench.planning.hydra_config import compose
from kdbench.planning.plan import make_plan

PAPER_TASKS = {
    "qnli",
    "sst2",
    "mnli",
    "mrpc",
    "qqp",
    "rte",
    "cola",
}  # the seven columns of Tables 2 and 4
TABLE2_OBJECTIVES = [
    "vanilla_kd",
    "hid_cls",
    "hid_seq",
    "att_mse",
    "att_mse+hid_seq",
    "att_kl",
    "att_kl+hid_seq",
    "att_kl+val_kl",
]
GIB = 2**30
# The teachers' architectures (config.json values), so that plans need neither the Hub nor local
# weights.
ARCHITECTURES = {
    "bert_base_uncased": BertConfig(),  # 12 x 768, 12 heads, FFN 3072, vocabulary 30522
    "minilm_l6": BertConfig(
        num_hidden_layers=6, hidden_size=384, num_attention_heads=12, intermediate_size=1536
    ),
}


def sweep_points(cfg) -> list[list[str]]:
    """Every job of a composed preset's sweep, as overrides (Hydra's own parser expands the
    values)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(
        [f"{k}={v}" for k, v in cfg.hydra.sweeper.params.items()]
    )
    axes = [
        [f"{o.key_or_group}={v}" for v in o.sweep_string_iterator()]
        if o.is_sweep_override()
        else [f"{o.key_or_group}={o.value()}"]
        for o in parsed
    ]
    return [list(point) for point in itertools.product(*axes)]


def preset(name: str, *overrides: str, hydra: bool = True):
    """The composed preset; with its `hydra` node (the sweep) unless it is for a plan, which reads
    the job's config."""
    return compose([f"+experiment={name}", *overrides], hydra_config=hydra)


@pytest.fixture
def known_architectures(monkeypatch):
    from kdbench.planning import plan

    monkeypatch.setattr(plan, "teacher_config", lambda teacher: ARCHITECTURES[teacher.name])


def test_table2_is_the_paper_design():
    cfg = preset("table2_agnostic")
    assert (cfg.setting.name, cfg.teacher.name, cfg.student.name, cfg.init.name) == (
        "task_agnostic",
        "bert_base_uncased",
        "6x768",
        "random",
    )
    assert (cfg.corpus.name, cfg.corpus.seq_len, cfg.setting.mapping) == (
        "wiki_bookcorpus",
        128,
        "last",
    )
    assert cfg.hydra.sweeper.params.objective.split(",") == TABLE2_OBJECTIVES
    assert cfg.paper_analogue is None and cfg.hydra.sweep.dir == "multirun/table2_agnostic"


def test_table4_compares_random_and_first_six_layers_for_its_four_objectives():
    cfg = preset("table4_agnostic_init")
    params = cfg.hydra.sweeper.params
    assert params.objective.split(",") == ["vanilla_kd", "hid_cls", "hid_seq", "att_mse"]
    assert params.init.split(",") == ["random", "bottom"]
    assert (cfg.teacher.name, cfg.student.name, cfg.paper_analogue) == (
        "bert_base_uncased",
        "6x768",
        None,
    )


@pytest.mark.parametrize("name", ["table2_agnostic", "table4_agnostic_init"])
def test_distillation_follows_table5(name):
    stage = preset(name).stages.distillation
    optimizer = stage.optimizer
    assert (stage.steps, stage.batch_size, optimizer.lr, optimizer.warmup_ratio) == (
        100000,
        1024,
        5e-4,
        0.06,
    )
    assert (list(optimizer.betas), optimizer.eps, optimizer.weight_decay) == (
        [0.9, 0.99],
        1e-6,
        0.01,
    )
    assert optimizer.max_grad_norm is None  # Table 5: gradient clipping 0.0


@pytest.mark.parametrize("name", ["table2_agnostic_finetune", "table4_agnostic_init_finetune"])
def test_finetune_grid_is_table6_on_the_seven_tasks(name):
    cfg = preset(name)
    params = cfg.hydra.sweeper.params
    assert set(params.task.split(",")) == PAPER_TASKS
    lrs = params["stages.finetune.optimizer.lr"]
    assert [float(x) for x in lrs.split(",")] == [1e-5, 3e-5, 5e-5, 8e-5]
    assert [int(x) for x in str(params["stages.finetune.batch_size"]).split(",")] == [16, 32]
    assert (cfg.setting.name, cfg.stages.finetune.epochs, cfg.paper_analogue) == (
        "finetune",
        10,
        None,
    )


def test_mini_table2_is_a_scaled_table2_without_mlm_objectives():
    cfg = preset("mini_table2")
    assert (
        cfg.setting.name,
        cfg.teacher.name,
        cfg.student.name,
        cfg.init.name,
        cfg.corpus.name,
    ) == ("task_agnostic", "minilm_l6", "3x384", "random", "local")
    objectives = cfg.hydra.sweeper.params.objective.split(",")
    assert objectives == [o for o in TABLE2_OBJECTIVES if o != "vanilla_kd"]
    assert cfg.hydra.sweeper.params.seed.split(",") == ["1", "2"]
    assert cfg.paper_analogue.table == 2 and dict(cfg.paper_analogue.inits) == {"random": "random"}
    finetune = preset("mini_table2_finetune")
    assert (
        finetune.paper_analogue == cfg.paper_analogue
    )  # the fine-tuning records carry it to the report
    assert set(finetune.hydra.sweeper.params.task.split(",")) == {"sst2", "mrpc", "rte", "cola"}
    assert (finetune.stages.finetune.epochs, finetune.data.train_limit) == (1, 1000)


@pytest.mark.parametrize("name", ["table2_agnostic", "table4_agnostic_init", "mini_table2"])
def test_every_distillation_of_the_sweep_plans(name, known_architectures, tmp_path):
    corpus = [f"corpus.path={tmp_path}"] if preset(name).corpus.name == "local" else []
    points = sweep_points(preset(name))
    for point in points:
        plan = make_plan(preset(name, *point, *corpus, hydra=False))
        assert plan.setting == "task_agnostic" and plan.terms, point
        assert plan.batches.global_batch == plan.stages["distillation"].batch_size
    assert len(points) == {"table2_agnostic": 8, "table4_agnostic_init": 8, "mini_table2": 14}[name]


def test_table4_first_six_copies_teacher_layers_1_to_6(known_architectures):
    plan = make_plan(
        preset("table4_agnostic_init", "init=bottom", "objective=att_mse", hydra=False)
    )
    assert plan.init.layers == (1, 2, 3, 4, 5, 6)


def test_vanilla_kd_is_refused_under_the_minilm_teacher(known_architectures, tmp_path):
    from kdbench.errors import ConfigError

    with pytest.raises(ConfigError, match="MLM head"):
        make_plan(
            preset("mini_table2", "objective=vanilla_kd", f"corpus.path={tmp_path}", hydra=False)
        )


@pytest.mark.parametrize("name", ["table2_agnostic_finetune", "mini_table2_finetune"])
def test_every_task_of_the_finetune_grid_plans(name, tmp_path, tiny_glue, monkeypatch):
    monkeypatch.delenv(
        "KDBENCH_GLUE_DIR", raising=False
    )  # the seven tasks from the Hub: no files are checked
    BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4).save_pretrained(tmp_path)
    data = (
        [f"data.glue_dir={tiny_glue}"] if name.startswith("mini") else []
    )  # the tiny SST-2, MRPC, RTE, CoLA
    cfg = preset(name)
    for task in cfg.hydra.sweeper.params.task.split(","):
        plan = make_plan(
            preset(name, f"task={task}", f"setting.student_path={tmp_path}", *data, hydra=False)
        )
        assert (plan.setting, plan.task.name, plan.student_path) == ("finetune", task, tmp_path)


@pytest.mark.parametrize("objective", ["att_kl", "vanilla_kd"])
def test_auto_micro_batches_fit_the_gpu_by_the_paper_shapes_bound(
    objective, known_architectures, monkeypatch
):
    from kdbench.measure import memory, synthetic
    from kdbench.planning import plan
    from kdbench.planning.specs import LoadingSpec

    gpu = {"device": torch.device("cuda", 0), "precision": "bf16", "tf32": True}
    gpu |= {"precision_reason": "auto: a student 768 wide", "loading": LoadingSpec(4)}
    monkeypatch.setattr(plan, "compute_on", lambda trainer, student_width: gpu)
    seen, fitting = [], memory.fitting_micro_batch

    def fit(per_process, bound, device_bytes):
        seen.append(bound)
        return fitting(per_process, bound, device_bytes)

    monkeypatch.setattr(memory, "fitting_micro_batch", fit)
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda device: SimpleNamespace(total_memory=80 * GIB)
    )
    planned = make_plan(preset("table2_agnostic", f"objective={objective}", hydra=False))
    assert planned.stages["distillation"].device_batch_size == "auto"
    assert seen == [synthetic.step_memory(objective, synthetic.Shapes(), "bf16")]
    micro = fitting(1024, seen[0], 80 * GIB)
    assert (planned.batches.per_process, planned.batches.accumulation) == (micro, 1024 // micro)
    assert planned.batches.heldout_batch == 64  # the held-out sample is the CPU's on every device
