"""Every forward kdbench runs is in `kdbench.runtime.precision.computing`'s region: SDPA without
cuDNN's attention (it plans anew for every batch shape), and autocast only for a model whose weights
are float32 (a bf16 run's frozen teacher, in bf16 weights, runs without it)."""

from __future__ import annotations

from collections import defaultdict

import pytest
import torch
from torch import nn

from kdbench.job import run
from kdbench.runtime.precision import computing
from kdbench.training.signals import current_phase
from tests.helpers import compose_config, tiny_overrides

CPU = torch.device("cpu")
TEACHER_ONLY_PHASES = ("teacher_features", "teacher_logits")


def attention_calls(monkeypatch) -> dict[str, list[tuple[bool, bool]]]:
    """(cuDNN attention enabled, autocast enabled) at every SDPA call, by the run's phase."""
    calls: dict[str, list[tuple[bool, bool]]] = defaultdict(list)
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        state = torch.backends.cuda.cudnn_sdp_enabled(), torch.is_autocast_enabled("cpu")
        calls[current_phase()].append(state)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    return calls


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_no_forward_of_a_run_may_choose_cudnn_attention(
    tiny_glue, tmp_path, monkeypatch, precision
):
    assert torch.backends.cuda.cudnn_sdp_enabled()  # torch's default, which kdbench overrides
    calls = attention_calls(monkeypatch)
    fresh = f"paths.cache_dir={tmp_path / 'cache'}"  # the teacher and its tables computed here
    overrides = tiny_overrides(
        tiny_glue, tmp_path / "run", f"trainer.precision={precision}", "measure_cost=true", fresh
    )
    assert run(compose_config(overrides))["status"] == "completed"
    phases = {"teacher", "intermediate", "prediction", "evaluation", *TEACHER_ONLY_PHASES}
    assert phases <= set(calls)
    assert not {name for name, states in calls.items() if any(cudnn for cudnn, _ in states)}
    assert torch.backends.cuda.cudnn_sdp_enabled()  # restored after every forward
    if precision == "bf16":
        assert not any(autocast for name in TEACHER_ONLY_PHASES for _, autocast in calls[name])
        assert all(autocast for _, autocast in calls["prediction"])  # the student's forwards


def test_autocast_is_for_float32_weights_only():
    student, teacher = nn.Linear(4, 4), nn.Linear(4, 4).to(torch.bfloat16)
    for model, expected in ((student, True), (teacher, False), (None, True)):
        with computing(CPU, "bf16", model):
            assert torch.is_autocast_enabled("cpu") is expected
            assert not torch.backends.cuda.cudnn_sdp_enabled()
        with computing(CPU, "fp32", model):
            assert not torch.is_autocast_enabled("cpu")
