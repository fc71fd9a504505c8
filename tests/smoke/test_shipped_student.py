"""The saved student as its users meet it: `pipeline("text-classification")` answers with label
names for a classifier and the raw score for a regression."""

from __future__ import annotations

import pytest
import torch

from kdbench.job import run
from tests.helpers import compose_config, tiny_overrides


def saved_student(tiny_glue, run_dir, task: str, *extra: str):
    run(
        compose_config(
            tiny_overrides(
                tiny_glue,
                run_dir,
                f"task={task}",
                "save_student=true",
                "measure_cost=false",
                "objective=vanilla_kd",
                *extra,
            )
        )
    )
    return str(run_dir / "student")


def test_a_regression_student_answers_its_raw_score(tiny_glue, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

    folder = saved_student(tiny_glue, tmp_path, "stsb")
    pair = {"text": "a man plays a guitar", "text_pair": "a man plays music"}
    [answer] = pipeline("text-classification", model=folder)([pair])
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    with torch.inference_mode():
        score = model(**tokenizer(pair["text"], pair["text_pair"], return_tensors="pt")).logits
    assert answer["score"] == pytest.approx(score.item(), abs=1e-5)  # no sigmoid on it
    assert model.config.problem_type == "regression"
    card = (tmp_path / "student" / "README.md").read_text()
    assert "It answers the predicted score itself" in card


def test_a_classifier_student_answers_label_names(tiny_glue, tmp_path):
    from transformers import AutoConfig, pipeline

    folder = saved_student(tiny_glue, tmp_path, "sst2")
    answers = pipeline("text-classification", model=folder)(["a fine film", "a dull film"])
    assert {answer["label"] for answer in answers} <= {"negative", "positive"}
    assert AutoConfig.from_pretrained(folder).problem_type == "single_label_classification"


def test_a_student_distilled_without_dropout_ships_with_its_family_s(tiny_glue, tmp_path):
    from transformers import AutoConfig

    folder = saved_student(tiny_glue, tmp_path, "sst2", "+trainer.student_dropout=0")
    config = AutoConfig.from_pretrained(folder)
    assert (config.hidden_dropout_prob, config.attention_probs_dropout_prob) == (0.1, 0.1)


def test_a_truncating_pipeline_reads_what_the_student_was_trained_on(tiny_glue, tmp_path):
    """The saved tokenizer stops at trainer.max_length: a long text through `pipeline` with
    truncation=True (the card's usage) gets the student's answer on its first max_length tokens."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

    folder = saved_student(tiny_glue, tmp_path, "sst2", "trainer.max_length=16")
    text = " ".join(["a fine film"] * 20)
    [answer] = pipeline("text-classification", model=folder, top_k=None)(text, truncation=True)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer.model_max_length == 16
    inputs = tokenizer(text, truncation=True, max_length=16, return_tensors="pt")
    with torch.inference_mode():
        probabilities = model(**inputs).logits.softmax(-1)[0]
    by_label = {row["label"]: row["score"] for row in answer}
    expected = {model.config.id2label[i]: p.item() for i, p in enumerate(probabilities)}
    assert by_label == pytest.approx(expected, abs=1e-6)
    assert "truncation=True" in (tmp_path / "student" / "README.md").read_text()
