"""DataLoader workers change nothing a run computes: the same student with 0 and 2 workers."""

from __future__ import annotations

import torch
from safetensors.torch import load_file

from kdbench.job import run
from tests.helpers import agnostic_overrides, compose_config, write_tiny_corpus


def test_a_masked_distillation_gives_the_same_student_with_workers(tmp_path):
    corpus = write_tiny_corpus(tmp_path / "corpus")
    students = []
    for workers in (0, 2):
        overrides = agnostic_overrides(
            corpus,
            tmp_path / f"w{workers}",
            "objective=distilbert",
            "stages.distillation.steps=4",
            f"trainer.num_workers={workers}",
        )
        record = run(compose_config(overrides))
        assert record["status"] == "completed"
        students.append(load_file(tmp_path / f"w{workers}" / "student" / "model.safetensors"))
    assert students[0].keys() == students[1].keys()
    assert all(torch.equal(students[0][k], students[1][k]) for k in students[0])
