"""The cost comparison times teacher and student alike."""

from __future__ import annotations

import torch

from kdbench.measure import cost
from tests.helpers import bert_classifier


def test_a_bf16_runs_cost_times_teacher_and_student_in_one_form(monkeypatch):
    """The frozen teacher runs with bf16 weights in a bf16 run; the student, trained with float32
    weights under autocast, is timed as a bf16 copy, so neither pays casts the other does not."""
    timed = []

    def seconds(model, inputs, device, precision):
        timed.append(next(model.parameters()).dtype)
        return 0.01

    monkeypatch.setattr(cost, "seconds_per_pass", seconds)
    teacher, student = bert_classifier(4).to(torch.bfloat16), bert_classifier(2)
    result = cost.compare_costs(teacher, student, [8, 8], torch.device("cpu"), "bf16")
    assert timed == [torch.bfloat16] * 4  # latency and throughput of each
    assert next(student.parameters()).dtype == torch.float32  # the trained student as it was
    assert result["params_fraction"] < 1
