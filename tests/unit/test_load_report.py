"""Loading a checkpoint into the model kdbench chose: a head the checkpoint lacks is one kdbench
line (transformers' load report held back); any other missing or unexpected weight keeps the
report."""

from __future__ import annotations

import logging

import pytest
from transformers import AutoModel, AutoModelForSequenceClassification
from transformers.utils import logging as transformers_logging

from kdbench.models.hub import load_model
from kdbench.models.tiny import tiny_config
from kdbench.planning.specs import ShapeSpec

SHAPE = ShapeSpec(name="tiny", num_layers=2, hidden_size=32, num_heads=2, ffn_size=64)


class Collected(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def transformers_log():
    """What transformers logs (its handler keeps the stream it found at import, out of capfd's
    reach)."""
    collected = Collected()
    transformers_logging.add_handler(collected)
    yield collected.messages
    transformers_logging.remove_handler(collected)


def encoder_checkpoint(folder, layers: int = 2) -> str:
    config = tiny_config(SHAPE, 2)
    config.num_hidden_layers = layers
    AutoModel.from_config(config).save_pretrained(str(folder))
    return str(folder)


def test_a_fresh_classifier_head_is_one_kdbench_line(tmp_path, capfd, transformers_log):
    checkpoint = encoder_checkpoint(tmp_path / "encoder")
    load_model(AutoModelForSequenceClassification, checkpoint, owner="the teacher", num_labels=3)
    assert not [message for message in transformers_log if "LOAD REPORT" in message]
    expected = "kdbench: the teacher's classifier head (3 labels) starts fresh: encoder has none"
    assert expected in capfd.readouterr().err.splitlines()


def test_weights_missing_outside_the_heads_keep_transformers_report(
    tmp_path, capfd, transformers_log
):
    checkpoint = encoder_checkpoint(tmp_path / "encoder", layers=1)
    two_layers = tiny_config(SHAPE, 2)
    load_model(
        AutoModelForSequenceClassification, checkpoint, owner="the teacher", config=two_layers
    )
    [report] = [message for message in transformers_log if "LOAD REPORT" in message]
    assert "encoder.layer.1." in report and "classifier.weight" in report
    assert "kdbench:" not in capfd.readouterr().err
