"""The original methods' parts on the tiny models: a student started from a distilled student
(TinyBERT's two stages), a distilled student as the next teacher (MiniLM's assistant), a run on
augmented data, and the records naming the chain."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from transformers import AutoModelForSequenceClassification

from kdbench.errors import ConfigError
from kdbench.job import run
from kdbench.models.hub import load
from kdbench.objectives.terms import Objective, carry_projections
from kdbench.planning.plan import make_plan
from kdbench.records.record import CHAIN_FILE, PROJECTIONS_FILE
from kdbench.runtime.storage import MANIFEST
from tests.helpers import (
    TINY_MLM_SHAPE,
    agnostic_overrides,
    compose_config,
    tiny_overrides,
    write_tiny_corpus,
    write_tiny_mlm_tokenizer,
)


@pytest.fixture(scope="module")
def general_student(tmp_path_factory):
    """A tiny task-agnostic distillation's saved student (TinyBERT's general distillation, the
    assistant)."""
    run_dir = tmp_path_factory.mktemp("general")
    corpus = write_tiny_corpus(tmp_path_factory.mktemp("corpus"))
    record = run(
        compose_config(
            agnostic_overrides(corpus, run_dir, "objective=tinybert", "setting.mapping=null")
        )
    )
    assert record["chain"] == "tiny -> tiny (tinybert, task_agnostic)"
    return run_dir / "student", corpus


def test_init_pretrained_starts_from_the_saved_weights_and_names_them(
    general_student, tiny_glue, tmp_path
):
    student, _ = general_student
    overrides = tiny_overrides(
        tiny_glue,
        tmp_path,
        "init=pretrained",
        f"init.path={student}",
        "objective=tinybert",
        "stages.intermediate.epochs=0",
        "stages.prediction.epochs=0",
        "save_student=true",
    )
    record = run(compose_config(overrides))
    assert record["init"] == "pretrained" and record["init_name"] == "pretrained"
    assert record["chain"] == (
        "tiny -> tiny (tinybert, task_specific) from [tiny -> tiny (tinybert, task_agnostic)]"
    )
    saved = load(
        AutoModelForSequenceClassification, student, saved_as="x", num_labels=2
    ).state_dict()
    trained = load(
        AutoModelForSequenceClassification, tmp_path / "student", saved_as="x"
    ).state_dict()
    encoder = [k for k in saved if ".encoder." in k or ".embeddings." in k]
    assert encoder and all(
        torch.equal(saved[k], trained[k]) for k in encoder
    )  # no training: the same weights


def test_init_pretrained_refuses_another_shape_or_a_missing_folder(
    general_student, tiny_glue, tmp_path
):
    student, _ = general_student
    with pytest.raises(
        ConfigError, match=r"holds a model of another shape than student=3x384 \(num_layers 2 vs 3"
    ):
        make_plan(
            compose_config(
                tiny_overrides(
                    tiny_glue, tmp_path, "init=pretrained", f"init.path={student}", "student=3x384"
                )
            )
        )
    with pytest.raises(
        ConfigError, match="init=pretrained needs init.path, a folder written by save_pretrained"
    ):
        make_plan(
            compose_config(
                tiny_overrides(tiny_glue, tmp_path, "init=pretrained", f"init.path={tmp_path}")
            )
        )


def test_a_distilled_student_teaches_the_next_and_the_record_names_the_chain(
    general_student, tmp_path
):
    student, corpus = general_student
    assert json.loads((student / CHAIN_FILE).read_text())["chain"] == [
        "tiny",
        "tiny (tinybert, task_agnostic)",
    ]
    record = run(
        compose_config(
            agnostic_overrides(
                corpus,
                tmp_path,
                "teacher=distilled",
                f"teacher.name_or_path={student}",
                "objective=att_kl+val_kl",
            )
        )
    )
    assert record["status"] == "completed" and record["teacher"] == "distilled"
    assert (
        record["chain"]
        == "tiny -> tiny (tinybert, task_agnostic) -> tiny (att_kl+val_kl, task_agnostic)"
    )


def test_a_run_on_augmented_data_trains_on_the_copies_and_records_them(
    tiny_glue, tmp_path, monkeypatch
):

    tokenizer_dir = write_tiny_mlm_tokenizer(tmp_path / "mlm")
    augment = [
        "augment=tinybert",
        f"augment.mlm_model={tokenizer_dir}",
        "augment.n_per_example=3",
        TINY_MLM_SHAPE,
        "augment.p_replace=1.0",
        "augment.top_k=2",
    ]
    record = run(compose_config(tiny_overrides(tiny_glue, tmp_path / "run", *augment)))
    augmented = record["augmented"]
    assert augmented["originals"] == 48 and 48 < augmented["examples"] <= 48 * 4
    assert record["status"] == "completed"
    steps = [
        json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()
    ]
    stage1_steps = max(s["step"] for s in steps if s["stage"] == "intermediate")
    assert stage1_steps == -(
        -augmented["examples"] // 8
    )  # one epoch of batches of 8 over originals and copies
    again = run(compose_config(tiny_overrides(tiny_glue, tmp_path / "again", *augment)))
    assert again["augmented"]["entry"] == augmented["entry"]  # built once, reused


def test_the_augment_command_builds_the_set_alone_and_says_where(tiny_glue, tmp_path, capsys):
    from kdbench.augment import main

    tokenizer_dir = write_tiny_mlm_tokenizer(tmp_path / "mlm")
    main(
        [
            "task=sst2",
            f"data.glue_dir={tiny_glue}",
            "augment=tinybert",
            f"augment.mlm_model={tokenizer_dir}",
            TINY_MLM_SHAPE,
            "augment.n_per_example=2",
            f"paths.cache_dir={tmp_path / 'cache'}",
            "trainer.device=cpu",
        ]
    )
    line = capsys.readouterr().out.strip()
    assert (
        line.startswith("augmented sst2: 48 originals -> ")
        and str(tmp_path / "cache" / "augmented") in line
    )
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "task=sst2",
                f"data.glue_dir={tiny_glue}",
                "augment=tinybert",
                "augment.word_vectors=/no/glove.txt",
            ]
        )
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip() == (
        "kdbench: error: augment.word_vectors=/no/glove.txt does not exist: "
        "give a GloVe text file (e.g. glove.42B.300d.txt from "
        "nlp.stanford.edu/projects/glove), or null to keep multi-piece words"
    )


def carrying(student) -> list[str]:
    return [
        "init=pretrained",
        f"init.path={student}",
        "objective=tinybert",
        "init.carry_projections=true",
    ]


def test_carried_projections_start_the_task_stage_from_the_general_stage(
    general_student, tiny_glue, tmp_path
):
    student, _ = general_student
    saved = torch.load(student / PROJECTIONS_FILE, weights_only=True)
    plan = make_plan(compose_config(tiny_overrides(tiny_glue, tmp_path, *carrying(student))))
    assert plan.init.carry_projections
    objective = Objective(plan.terms, plan.student_conf, plan.teacher_conf)
    fresh = {k: v.clone() for k, v in objective.projections.state_dict().items()}
    carry_projections(objective, plan.init.path)
    carried = objective.projections.state_dict()
    names = {f"{term}.{p}" for term in ("emb_mse", "hid_mse") for p in ("weight", "bias")}
    assert set(carried) == set(saved) == names
    assert all(torch.equal(carried[k], saved[k]) for k in saved)
    assert not all(torch.equal(carried[k], fresh[k]) for k in saved)  # the general stage moved them
    record = run(compose_config(tiny_overrides(tiny_glue, tmp_path / "run", *carrying(student))))
    assert record["status"] == "completed"


def test_carried_projections_need_a_student_saved_with_them(general_student, tiny_glue, tmp_path):
    student, _ = general_student
    bare = tmp_path / "bare"
    shutil.copytree(student, bare)
    (bare / PROJECTIONS_FILE).unlink()
    (bare / MANIFEST).unlink()  # a save_pretrained folder of another origin
    plan = make_plan(compose_config(tiny_overrides(tiny_glue, tmp_path, *carrying(bare))))
    objective = Objective(plan.terms, plan.student_conf, plan.teacher_conf)
    with pytest.raises(ConfigError, match="carry_projections=true but .* has no projections.pt"):
        carry_projections(objective, plan.init.path)


@pytest.mark.parametrize("dropout", [False, True])
def test_the_teacher_teaches_with_dropout_on_request(tiny_glue, tmp_path, monkeypatch, dropout):
    from kdbench.recipes import task_specific

    modes = []
    real = task_specific.teacher_records_now

    def watched(recorder, *args):
        modes.append(recorder.model.training)
        return real(recorder, *args)

    monkeypatch.setattr(task_specific, "teacher_records_now", watched)
    record = run(
        compose_config(
            tiny_overrides(
                tiny_glue,
                tmp_path,
                "objective=att_kl",
                f"trainer.teacher_dropout={str(dropout).lower()}",
            )
        )
    )
    assert record["status"] == "completed"
    # without dropout, both stages read the teacher's caches (its features, its logits)
    assert modes == ([True, True] if dropout else [])
