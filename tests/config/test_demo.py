"""`make demo`: the preset it runs composes and plans the distillation the README describes."""

from __future__ import annotations

import re
from pathlib import Path

from transformers import BertConfig

from kdbench.planning import plan as plan_module
from kdbench.planning.plan import make_plan
from tests.helpers import compose_config

ROOT = Path(__file__).resolve().parents[2]
# variables a docs example may read without setting: the shell's, the data paths the docs say to
# set, and the folder a GPU machine gives back
ALWAYS_SET = {"HOME", "PWD", "USER", "OUT"}
ALWAYS_SET |= {"KDBENCH_GLUE_DIR", "KDBENCH_MODELS_DIR", "KDBENCH_CACHE"}
# all-MiniLM-L6-v2's architecture (its config.json), so that the plan needs neither the Hub nor
# local weights
MINILM_L6 = BertConfig(
    num_hidden_layers=6, hidden_size=384, num_attention_heads=12, intermediate_size=1536
)


def test_make_demo_runs_the_demo_preset():
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    assert "-m kdbench.run +experiment=demo" in recipe


def test_the_demo_distils_minilm_into_half_its_depth_from_its_own_layers(monkeypatch):
    monkeypatch.setattr(plan_module, "teacher_config", lambda teacher: MINILM_L6)
    plan = make_plan(compose_config(["+experiment=demo"]))
    assert (plan.setting, plan.task.name, plan.teacher.name, plan.objective) == (
        "task_specific",
        "sst2",
        "minilm_l6",
        "att_kl+val_kl",
    )
    assert (plan.student.num_layers, plan.student.hidden_size) == (3, 384)
    assert plan.init.layers == (2, 4, 6) and not plan.init.copy_head  # the task head starts fresh
    assert plan.data.train_limit == 1000 and plan.trainer.max_length == 64
    assert plan.measure_cost  # its closing lines show both models' cost
    # a fresh task head needs more than the paper's 1e-5 in a budget of a few epochs on 1000
    # examples
    stages = plan.stages
    assert stages["intermediate"].optimizer.lr == stages["prediction"].optimizer.lr == 1e-4
    assert (
        stages["teacher"].epochs,
        stages["intermediate"].epochs,
        stages["prediction"].epochs,
    ) == (3, 2, 3)


def shell_blocks(markdown: str) -> list[str]:
    return [block.split("\n", 1)[1] for block in markdown.split("```bash")[1:]]


def test_the_readme_offline_setup_sets_every_variable_an_offline_run_reads():
    ci = (ROOT / ".ci" / "run").read_text()
    needed = {"KDBENCH_GLUE_DIR", "KDBENCH_MODELS_DIR", "KDBENCH_CACHE"}
    needed |= {"HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "WANDB_MODE"}
    assert all(f"{name}=" in ci for name in needed)  # CI's offline run sets the same
    readme = (ROOT / "README.md").read_text()
    offline = next(block for block in shell_blocks(readme) if "HF_HUB_OFFLINE" in block)
    assert {name for name in needed if f"{name}=" in offline} == needed


def test_the_docs_shell_examples_use_no_variable_they_do_not_define():
    for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        for block in shell_blocks(doc.read_text()):
            code = block.split("```", 1)[0]
            used = set(re.findall(r"\$\{?([A-Z][A-Z0-9_]*)", code))
            defined = set(re.findall(r"(?:^|\s|export\s)([A-Z][A-Z0-9_]*)=", code, re.M))
            assert used <= defined | ALWAYS_SET, (doc.name, used - defined - ALWAYS_SET)
