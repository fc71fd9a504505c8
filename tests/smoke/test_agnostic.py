"""The task-agnostic setting on a tiny teacher and a made-up corpus: objectives, resume, torchrun,
saving."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from kdbench import job
from kdbench.errors import ConfigError, DataError
from kdbench.job import run
from kdbench.models.pretrained import teacher_tokenizer
from kdbench.objectives.terms import Objective
from kdbench.planning.plan import make_plan
from kdbench.recipes.task_agnostic import input_masking
from kdbench.records.predictions import read_predictions
from kdbench.records.steplog import StepLog
from kdbench.training.checkpoint import Checkpoints
from tests.helpers import agnostic_overrides, compose_config, write_tiny_corpus

OBJECTIVES = [
    "att_mse",
    "att_kl",
    "att_kl+val_kl",
    "hid_seq",
    "hid_cls",
    "att_mse+hid_seq",
    "att_kl+hid_seq",
    "minilm_v2",
    "vanilla_kd",
    "distilbert",
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_tiny_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_every_objective_distils_and_records_heldout_losses(corpus, tmp_path, objective):
    record = run(compose_config(agnostic_overrides(corpus, tmp_path, f"objective={objective}")))
    assert record["status"] == "completed" and record["setting"] == "task_agnostic"
    metrics = record["metrics"]
    assert "heldout_loss" in metrics and len(metrics) >= 2
    assert metrics["heldout_loss"] == pytest.approx(
        sum(v for k, v in metrics.items() if k != "heldout_loss"), rel=1e-5
    )
    assert record["batch"] == {"global": 8, "per_device": 4, "accumulation": 2}
    steps = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps if s["stage"] == "heldout"] == [0, 3, 6]
    assert max(s["step"] for s in steps if s["stage"] == "distillation") == 6


def test_heldout_attention_loss_goes_down(corpus, tmp_path):
    record = run(
        compose_config(
            agnostic_overrides(
                corpus,
                tmp_path,
                "objective=att_mse",
                "stages.distillation.steps=30",
                "stages.distillation.optimizer.lr=2e-3",
            )
        )
    )
    assert record["metrics"]["att_mse"] < 0.8 * record["initial_heldout"]["att_mse"]


def test_saved_student_loads_with_automodel(corpus, tmp_path):
    from transformers import AutoModel, AutoTokenizer

    overrides = agnostic_overrides(
        corpus, tmp_path, "objective=att_kl", "trainer.student_dropout=0"
    )
    record = run(compose_config(overrides))
    model = AutoModel.from_pretrained(record["student_path"])
    tokenizer = AutoTokenizer.from_pretrained(record["student_path"])
    assert model.config.num_hidden_layers == 2
    dropout = (model.config.hidden_dropout_prob, model.config.attention_probs_dropout_prob)
    assert dropout == (0.1, 0.1)  # the family's, for fine-tuning: the distillation's 0 was its own
    assert model(**tokenizer("a good movie", return_tensors="pt")).last_hidden_state.shape[-1] == 32


def test_resume_mid_run_gives_the_same_final_weights(corpus, tmp_path, monkeypatch):
    from kdbench.training import loop

    extra = ("objective=att_kl+val_kl", "trainer.checkpoint_every=2", "stages.distillation.steps=8")
    run(compose_config(agnostic_overrides(corpus, tmp_path / "ref", *extra)))
    calls = {"n": 0}
    real = loop.to_device

    def crash_on_twelfth_batch(batch, device):
        calls["n"] += 1
        if calls["n"] == 12:  # 5 steps of 2 micro-batches, then the first micro-batch of step 6
            raise RuntimeError("killed")
        return real(batch, device)

    monkeypatch.setattr(loop, "to_device", crash_on_twelfth_batch)
    cfg = compose_config(agnostic_overrides(corpus, tmp_path / "run", *extra))
    with pytest.raises(RuntimeError, match="killed"):
        run(cfg)
    monkeypatch.undo()
    assert (tmp_path / "run" / "checkpoints").is_dir()
    run(cfg)
    ref = load_file(tmp_path / "ref" / "student" / "model.safetensors")
    got = load_file(tmp_path / "run" / "student" / "model.safetensors")
    assert ref.keys() == got.keys() and all(torch.equal(ref[k], got[k]) for k in ref)


def test_a_run_stopped_after_its_last_step_saves_its_student_when_resumed(
    corpus, tmp_path, monkeypatch
):
    """The held-out losses at the end and the student's save follow the stage's done checkpoint: a
    run stopped between them finishes from that checkpoint, with an uninterrupted run's student."""
    from kdbench.recipes import task_agnostic

    extra = ("objective=att_kl", "trainer.keep_checkpoints=true")
    run(compose_config(agnostic_overrides(corpus, tmp_path / "ref", *extra)))
    trained = {"done": False}
    real_train, real_measure = task_agnostic.train_stage, task_agnostic.HeldoutLosses.measure

    def train_stage(*args, **kwargs):
        stats = real_train(*args, **kwargs)
        trained["done"] = True
        return stats

    def measure(self):
        if trained["done"]:
            raise RuntimeError("killed")
        return real_measure(self)

    monkeypatch.setattr(task_agnostic, "train_stage", train_stage)
    monkeypatch.setattr(task_agnostic.HeldoutLosses, "measure", measure)
    cfg = compose_config(agnostic_overrides(corpus, tmp_path / "run", *extra))
    with pytest.raises(RuntimeError, match="killed"):
        run(cfg)
    monkeypatch.undo()
    assert not (tmp_path / "run" / "student").exists()
    record = run(cfg)
    assert record["status"] == "completed"
    assert "distillation_examples_per_s" not in record.get("throughput", {})
    ref = load_file(tmp_path / "ref" / "student" / "model.safetensors")
    got = load_file(tmp_path / "run" / "student" / "model.safetensors")
    assert ref.keys() == got.keys() and all(torch.equal(ref[k], got[k]) for k in ref)
    fingerprint = make_plan(cfg).fingerprint
    checkpoints = Checkpoints(tmp_path / "run" / "checkpoints", meta={"fingerprint": fingerprint})
    with pytest.raises(ConfigError, match="already holds a finished distillation"):
        task_agnostic.unfinished(tmp_path / "run", checkpoints, StepLog(None), fingerprint)


def _logged_steps(run_dir) -> list[dict]:
    lines = (run_dir / "train_log.jsonl").read_text().splitlines()
    return [row for row in map(json.loads, lines) if row["stage"] == "distillation"]


@pytest.mark.parametrize("objective", ["vanilla_kd", "distilbert"])
def test_accumulated_micro_batches_give_the_step_of_one_batch(corpus, tmp_path, objective):
    """The MLM terms are means over the masked positions, whose count varies between
    micro-batches: four micro-batches of 2 sequences take the step one of 8 takes (distilbert:
    its soft targets at every attended token too)."""
    extra = [
        f"objective={objective}",
        "trainer.student_dropout=0.0",
        "stages.distillation.steps=2",
        "stages.distillation.eval_every=0",
        "stages.distillation.optimizer.lr=1e-4",
    ]
    for micro in (8, 2):
        device_batch = f"stages.distillation.device_batch_size={micro}"
        record = run(
            compose_config(agnostic_overrides(corpus, tmp_path / str(micro), *extra, device_batch))
        )
        assert record["batch"]["accumulation"] == 8 // micro
    whole, accumulated = _logged_steps(tmp_path / "8"), _logged_steps(tmp_path / "2")
    for one, four in zip(whole, accumulated, strict=True):
        for term in set(one) - {"stage", "step", "epoch", "lr"}:
            assert four[term] == pytest.approx(one[term], rel=1e-6), term
    ref = load_file(tmp_path / "8" / "student" / "model.safetensors")
    got = load_file(tmp_path / "2" / "student" / "model.safetensors")
    assert all(torch.allclose(ref[k], got[k], atol=1e-6) for k in ref)


@pytest.mark.parametrize(("objective", "port"), [("att_kl+hid_seq", 29517), ("vanilla_kd", 29518)])
def test_two_processes_with_gloo_equal_one_process_with_accumulation(
    corpus, tmp_path, objective, port
):
    """att_kl+hid_seq leaves the MLM head unused (DDP looks for unused parameters); vanilla_kd uses
    every one. The held-out losses cover the same three batches (two in rank 0, one in rank 1)."""
    extra = [
        f"objective={objective}",
        "trainer.student_dropout=0.0",
        "stages.distillation.steps=4",
        "stages.distillation.eval_every=0",
        "trainer.heldout_batches=3",
    ]
    single = run(compose_config(agnostic_overrides(corpus, tmp_path / "single", *extra)))
    assert single["batch"]["accumulation"] == 2
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        f"--master_port={port}",
        "-m",
        "kdbench.run",
        *agnostic_overrides(corpus, tmp_path / "ddp", *extra),
    ]
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads((tmp_path / "ddp" / "result.json").read_text())
    assert record["world_size"] == 2 and record["batch"] == {
        "global": 8,
        "per_device": 4,
        "accumulation": 1,
    }
    for name, value in single["metrics"].items():
        assert record["metrics"][name] == pytest.approx(value, rel=1e-4, abs=1e-6), name
    ref = load_file(tmp_path / "single" / "student" / "model.safetensors")
    got = load_file(tmp_path / "ddp" / "student" / "model.safetensors")
    assert all(torch.allclose(ref[k], got[k], atol=1e-5) for k in ref)


@pytest.mark.slow
def test_a_two_task_submitit_job_is_one_data_parallel_group(corpus, tmp_path):
    """hydra/launcher=submitit_local with two tasks: the tasks join one group from their job's
    environment (no torchrun) and match a single process with the same global batch; only rank 0
    writes."""
    extra = [
        "objective=att_kl+hid_seq",
        "trainer.student_dropout=0.0",
        "stages.distillation.steps=4",
        "stages.distillation.eval_every=0",
    ]
    single = run(compose_config(agnostic_overrides(corpus, tmp_path / "single", *extra)))
    launcher = [
        "hydra/launcher=submitit_local",
        "hydra.launcher.tasks_per_node=2",
        "hydra.launcher.timeout_min=20",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    ]
    command = [
        sys.executable,
        "-m",
        "kdbench.run",
        "-m",
        *launcher,
        *agnostic_overrides(corpus, tmp_path / "job", *extra),
    ]
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=900,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads((tmp_path / "job" / "result.json").read_text())
    assert record["world_size"] == 2 and record["batch"] == {
        "global": 8,
        "per_device": 4,
        "accumulation": 1,
    }
    for name, value in single["metrics"].items():
        assert record["metrics"][name] == pytest.approx(value, rel=1e-4, abs=1e-6), name
    ref = load_file(tmp_path / "single" / "student" / "model.safetensors")
    got = load_file(tmp_path / "job" / "student" / "model.safetensors")
    assert all(torch.allclose(ref[k], got[k], atol=1e-5) for k in ref)
    assert sorted(p.parent.name for p in tmp_path.rglob("result.json")) == [
        "job",
        "single",
    ]  # rank 1 wrote none


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["objective=vanilla_kd", "teacher.has_mlm_head=false"], "has no MLM head"),
        (["objective=hid_cls_contrast"], "raw text does not have"),
        (
            ["stages.distillation.batch_size=6"],
            "not a multiple of stages.distillation.device_batch_size=4",
        ),
        (["stages.distillation.steps=0"], "steps=0 must be a positive integer"),
    ],
)
def test_bad_task_agnostic_configs_are_refused(corpus, tmp_path, overrides, message):
    from kdbench.planning.plan import make_plan

    cfg = compose_config(agnostic_overrides(corpus, tmp_path, *overrides))
    with pytest.raises(ConfigError, match=message):
        make_plan(cfg)


def test_corpus_without_text_is_refused(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "wiki_00").write_text("\n\n")
    with pytest.raises(DataError, match=str(empty)):
        run(compose_config(agnostic_overrides(empty, tmp_path / "run")))


def test_distilled_student_fine_tunes_on_glue_and_names_its_distillation(
    corpus, tiny_glue, tmp_path
):
    distilled = run(
        compose_config(
            agnostic_overrides(corpus, tmp_path / "distill", "objective=att_kl", "seed=7")
        )
    )
    assert distilled["task"] is None
    record = run(
        compose_config(
            [
                "setting=finetune",
                f"setting.student_path={distilled['student_path']}",
                "task=rte",
                f"data.glue_dir={tiny_glue}",
                "stages.finetune.epochs=1",
                "stages.finetune.batch_size=16",
                "stages.finetune.optimizer.lr=5e-5",
                "trainer.progress_bar=false",
                f"paths.run_dir={tmp_path / 'ft'}",
            ]
        )
    )
    assert record["status"] == "completed" and {
        "accuracy",
        "predicted_class_0",
        "dev_class_1",
    } <= set(record["metrics"])
    assert record["grid"] == {"lr": 5e-5, "batch_size": 16}
    assert (record["objective"], record["seed"], record["teacher"], record["init"]) == (
        "att_kl",
        7,
        "tiny",
        "random",
    )
    assert (record["setting"], record["stage"]) == ("task_agnostic", "finetune")
    assert record["distilled_from"] == str((tmp_path / "distill" / "result.json").resolve())


def test_a_fine_tuning_names_its_distilled_student_while_running_and_when_failed(
    corpus, tiny_glue, tmp_path, monkeypatch
):
    distilled = run(
        compose_config(
            agnostic_overrides(corpus, tmp_path / "distill", "objective=hid_seq", "seed=7")
        )
    )
    named = ("setting", "teacher", "student", "objective", "init", "seed", "stage")
    seen = {}

    def lost(plan, run_dir, log):
        seen["running"] = json.loads((run_dir / "result.json").read_text())
        raise RuntimeError("node lost")

    monkeypatch.setitem(job.RECIPES, "finetune", lost)
    overrides = [
        "setting=finetune",
        f"setting.student_path={distilled['student_path']}",
        "task=rte",
        f"data.glue_dir={tiny_glue}",
        f"paths.run_dir={tmp_path / 'ft'}",
    ]
    with pytest.raises(RuntimeError):
        run(compose_config(overrides))
    failed = json.loads((tmp_path / "ft" / "result.json").read_text())
    expected = ("task_agnostic", "tiny", "tiny", "hid_seq", "random", 7, "finetune")
    for record, status in ((seen["running"], "running"), (failed, "failed")):
        assert record["status"] == status
        assert tuple(record.get(field) for field in named) == expected


@pytest.mark.parametrize(
    ("objective", "mask_inputs", "masked"),
    [
        ("att_kl", "objective", False),
        ("att_kl", "always", True),
        ("distilbert", "objective", True),
    ],
)
def test_every_objective_sees_masked_input_on_request(
    corpus, tmp_path, objective, mask_inputs, masked
):
    overrides = [f"objective={objective}", f"trainer.mask_inputs={mask_inputs}"]
    plan = make_plan(compose_config(agnostic_overrides(corpus, tmp_path, *overrides)))
    objective_module = Objective(plan.terms, plan.student_conf, plan.teacher_conf)
    tokenizer = teacher_tokenizer(plan.teacher, plan.cache_dir)
    masking = input_masking(objective_module, plan.trainer, tokenizer, None)
    assert (masking is not None) == masked
    if masked:
        assert masking.mask_token_id == tokenizer.mask_token_id
    if mask_inputs == "always":  # an objective without MLM logits runs on the masked batches
        record = run(compose_config(agnostic_overrides(corpus, tmp_path / "run", *overrides)))
        assert record["status"] == "completed"


def test_frequency_smoothed_masking_runs_on_the_corpus(corpus, tmp_path):
    record = run(
        compose_config(
            agnostic_overrides(
                corpus, tmp_path, "objective=distilbert", "trainer.mlm_smoothing=0.7"
            )
        )
    )
    assert record["status"] == "completed" and record["config"]["trainer"]["mlm_smoothing"] == 0.7


def test_the_released_fine_tuning_grid_reports_the_best_evaluated_step(
    corpus, tiny_glue, tmp_path, monkeypatch
):
    from kdbench.recipes import finetune

    scores, clipped = [], []
    real, clip = finetune.evaluate, torch.nn.utils.clip_grad_norm_

    def watched(*args, **kwargs):
        metrics = real(*args, **kwargs)
        scores.append(metrics["accuracy"])
        return metrics

    def clipping(parameters, max_norm, *args, **kwargs):
        clipped.append(max_norm)
        return clip(parameters, max_norm, *args, **kwargs)

    monkeypatch.setattr(finetune, "evaluate", watched)
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clipping)
    distilled = run(compose_config(agnostic_overrides(corpus, tmp_path / "d", "objective=att_kl")))
    record = run(
        compose_config(
            [
                "setting=finetune",
                "trainer=finetune_released",
                "task=rte",
                f"data.glue_dir={tiny_glue}",
                f"setting.student_path={distilled['student_path']}",
                "stages.finetune.epochs_per_task.rte=2",  # RTE's own: 2 epochs, each step
                "stages.finetune.batch_size=16",  # evaluated (3 steps an epoch)
                "stages.finetune.eval_every_per_task.rte=1",
                "trainer.progress_bar=false",
                f"paths.run_dir={tmp_path / 'ft'}",
            ]
        )
    )
    optimizer = record["config"]["stages"]["finetune"]["optimizer"]
    assert (optimizer["weight_decay"], optimizer["warmup_ratio"]) == (0.0, 0.0)
    assert clipped == [1.0] * 6  # every step's gradients clipped at 1.0, as the Trainer does
    assert len(scores) >= 6 and record["metrics"]["accuracy"] == max(scores)
    assert record["scored"] == {
        "checkpoint": "best",
        "stage": "finetune",
        "step": 1 + scores.index(max(scores)),  # the first step with the best
        "eval_every": 1,
        "selected_by": "accuracy on the dev set(s) the metrics report",
    }
    kept = read_predictions(tmp_path / "ft" / record["predictions"])[""]
    assert 100 * (kept["predicted"] == kept["gold"]).mean() == pytest.approx(max(scores))
    assert sorted(p.name for p in (tmp_path / "ft").glob("*.npz")) == ["predictions.npz"]


def test_a_student_without_its_record_is_named_by_its_shape_and_chain_when_fine_tuned(
    corpus, tiny_glue, tmp_path
):
    """Moved away from its distillation's result.json, a student is not named after the config's
    default groups (roberta_base, 3x768, att_kl), which a fine-tuning does not read."""
    distilled = run(compose_config(agnostic_overrides(corpus, tmp_path / "distill")))
    moved = tmp_path / "shipped" / "student"
    shutil.copytree(distilled["student_path"], moved)
    finetune = [
        "setting=finetune",
        "task=rte",
        f"data.glue_dir={tiny_glue}",
        "stages.finetune.epochs=1",
        "trainer.progress_bar=false",
        "measure_cost=false",
    ]
    record = run(
        compose_config([*finetune, f"setting.student_path={moved}", f"paths.run_dir={tmp_path}/a"])
    )
    named = ("setting", "teacher", "student", "objective", "init")
    assert tuple(record[key] for key in named) == (
        "finetune",
        "tiny",
        "2x32",
        "unknown",
        "pretrained",
    )
    for kdbench_file in ("kdbench_chain.json", "kdbench_manifest.json"):
        (moved / kdbench_file).unlink()  # a model kdbench did not distil
    record = run(
        compose_config([*finetune, f"setting.student_path={moved}", f"paths.run_dir={tmp_path}/b"])
    )
    assert (record["teacher"], record["student"], record["objective"]) == ("none", "2x32", "none")


@pytest.mark.parametrize(
    ("objective", "tag"), [("vanilla_kd", "fill-mask"), ("att_kl", "feature-extraction")]
)
def test_the_saved_student_has_a_card_saying_how_it_loads(corpus, tmp_path, objective, tag):
    """fill-mask where the objective trains the MLM head, AutoModel where it leaves it as
    initialised; the card's held-out losses are the record's."""
    import yaml
    from transformers import pipeline

    record = run(compose_config(agnostic_overrides(corpus, tmp_path, f"objective={objective}")))
    card = (Path(record["student_path"]) / "README.md").read_text()
    assert yaml.safe_load(card.split("---")[1])["pipeline_tag"] == tag
    for name, value in record["metrics"].items():
        assert f"| {name} | {value:.4g} |" in card
    if tag == "fill-mask":
        assert pipeline(tag, model=record["student_path"])("a good [MASK]")
    else:
        assert "AutoModel.from_pretrained" in card and "MLM head is untrained" in card
