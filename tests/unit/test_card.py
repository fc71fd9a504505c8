"""The model card: its Hub metadata names Hub datasets only, it publishes speed only from a
machine no other work competed for, saying where and under what load it was timed, and it names
the init once, with the teacher layers it copied, each objective term with the parameters its
loss reads, and a best dev checkpoint as such."""

from __future__ import annotations

import pytest
import yaml
from transformers import BertConfig

from kdbench.planning.plan import make_plan
from kdbench.records.card import model_card
from tests.helpers import compose_config, custom_overrides, tiny_overrides


def cost(load: float, cpus: int = 2) -> dict:
    model = {"params": 1000, "flops_per_example": 2e6, "latency_ms": 4.0, "throughput_per_s": 800}
    return {
        "length": 12,
        "device": "cpu",
        "load_1min": load,
        "cpu_count": cpus,
        "teacher": model,
        "student": {key: value / 4 for key, value in model.items()},
        "speedup_latency": 4.0,
        "speedup_throughput": 0.25,
        "params_fraction": 0.25,
        "flops_fraction": 0.25,
    }


def card(plan, measured: dict | None = None) -> str:
    outcome = {"metrics": {"accuracy": 81.25}, "teacher_metrics": {"accuracy": 90.0}}
    return model_card(plan, outcome | {"cost": measured})


def header(text: str) -> dict:
    return yaml.safe_load(text.split("---")[1])


@pytest.fixture
def glue_plan(tiny_glue, tmp_path):
    return make_plan(compose_config(tiny_overrides(tiny_glue, tmp_path)))


def test_speed_measured_under_contention_is_left_out(glue_plan):
    text = card(glue_plan, cost(load=4.5, cpus=2))
    assert "latency" in text and "| latency, batch 1 (ms) |" not in text
    assert "throughput, batch 32" not in text and "as fast as" not in text
    assert "Measured on cpu (1-minute load average 4.50 on 2 CPUs)" in text
    assert "other work competed for the cores" in text and "| parameters |" in text


def test_speed_on_a_quiet_machine_is_published_with_its_load(glue_plan):
    text = card(glue_plan, cost(load=1.5, cpus=2))
    assert "| latency, batch 1 (ms) | 4.00 | 1.00 |" in text
    assert "Measured on cpu (1-minute load average 1.50 on 2 CPUs)" in text
    assert "the student is 4.00x as fast as its teacher at batch 1" in text


def test_glue_data_is_named_by_its_hub_id(glue_plan):
    meta = header(card(glue_plan))
    assert meta["datasets"] == ["nyu-mll/glue"]
    assert meta["model-index"][0]["results"][0]["dataset"]["type"] == "nyu-mll/glue"


def test_local_files_are_named_in_the_text_not_the_hub_metadata(user_data, tmp_path):
    overrides = custom_overrides(
        tmp_path,
        f"task.train_file={user_data['csv']}",
        "task.text_columns=[review]",
        "task.label_column=sentiment",
    )
    text = card(make_plan(compose_config(overrides)))
    assert "datasets" not in header(text) and "model-index" not in header(text)
    assert f"**Data**: {user_data['csv'].name} (local files)" in text


@pytest.mark.parametrize(
    ("init", "line"),
    [
        ("init=pretrained", "- **Init**: pretrained\n"),
        ("init=random", "- **Init**: random\n"),
        ("init=every_kth", "- **Init**: every_kth (2,4)\n"),
    ],
)
def test_the_init_is_named_once_with_the_teacher_layers_it_copied(tiny_glue, tmp_path, init, line):
    saved = tmp_path / "student"
    BertConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64
    ).save_pretrained(saved)
    path = [f"init.path={saved}"] if init == "init=pretrained" else []
    overrides = tiny_overrides(tiny_glue, tmp_path / "run", init, *path)
    assert line in card(make_plan(compose_config(overrides)))


@pytest.mark.parametrize(
    ("task", "line"),
    [
        ("task=sst2", "- **Objective**: prediction: kd (alpha=0.5, temperature=2.0)\n"),
        ("task=stsb", "- **Objective**: prediction: kd (alpha=0.5)\n"),
    ],
)
def test_the_objective_names_the_parameters_its_loss_reads_on_the_task(
    tiny_glue, tmp_path, task, line
):
    """A regression's `kd` is MSE to the teacher's output: it reads no temperature."""
    overrides = tiny_overrides(tiny_glue, tmp_path, task, "objective=vanilla_kd")
    assert line in card(make_plan(compose_config(overrides)))


def test_a_best_dev_checkpoint_is_named_as_one(glue_plan):
    best = {"checkpoint": "best", "stage": "prediction", "step": 3, "eval_every": 1}
    best["selected_by"] = "accuracy on the dev set(s) the metrics report"
    outcome = {"metrics": {"accuracy": 81.25}, "teacher_metrics": {"accuracy": 90.0}, "cost": None}
    text = model_card(glue_plan, outcome | {"scored": best})
    assert "its prediction stage's best checkpoint (step 3 of dev evaluations every 1" in text
    assert "so they lean high" in text
    last = {"checkpoint": "last", "stage": "prediction", "step": 6}
    assert "best checkpoint" not in model_card(glue_plan, outcome | {"scored": last})
