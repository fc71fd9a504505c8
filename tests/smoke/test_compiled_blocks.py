"""`trainer.compile` (`compile_blocks` and the losses' chains, what `python -m kdbench.bench
--compile` runs) on every task-agnostic objective's step: its compiled regions trace without a graph
break, the chains of its chunked losses run compiled, and the step gives the eager step's losses and
gradients.

Graph breaks are read from dynamo's own counters (`torch._dynamo.utils.counters["graph_break"]`, one
entry per break reason): the compiled regions are called from eager code, several per step, so a
single-function `torch._dynamo.explain` would not see them, and `fullgraph=True` would turn a break
into an error in the runs themselves. `counters["stats"]["unique_graphs"]` shows that something was
compiled at all. The tracing backend is aot_eager (inductor's C++ compiles would take minutes on a
small CPU); one inductor step checks the numbers of the backend the runs use.
"""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from kdbench.measure import synthetic
from kdbench.objectives import fused, vocabulary
from kdbench.objectives.losses import LOSSES
from tests.helpers import agnostic_objectives, objective_terms, small_shapes

CHAINS = (fused._chunk, vocabulary._soft_rows, vocabulary._hard_rows)

CPU = torch.device("cpu")


def losses_and_gradients(objective: str, compile_backend: str | None) -> tuple[dict, dict]:
    """One micro-step of the objective's task-agnostic distillation at small shapes, without
    dropout (so that the eager and compiled steps see the same numbers)."""
    shapes = small_shapes()
    with synthetic.distillation(
        objective, shapes, CPU, "fp32", 1, dropout=0.0, compile_backend=compile_backend
    ) as stage:
        losses = stage.step(next(iter(stage.loader)))
        losses["total"].backward()
        grads = {
            f"{i}.{name}": p.grad
            for i, module in enumerate(stage.modules)
            for name, p in module.named_parameters()
            if p.grad is not None
        }
    return {name: loss.detach() for name, loss in losses.items()}, grads


def chains_of(objective: str) -> set[str]:
    """The chains the objective's chunked losses run: the score maps' for a loss with a fused
    form, the vocabulary's soft and hard rows for mlm_kd and mlm."""
    chains = set()
    for term in objective_terms(objective):
        if LOSSES[term["loss"]].fused is not None:
            chains.add("_chunk")
        chains |= {"mlm_kd": {"_soft_rows"}, "mlm": {"_hard_rows"}}.get(term["loss"], set())
    return chains


def assert_equal_to_eager(objective: str, compiled: tuple[dict, dict]) -> None:
    for expected, got in zip(losses_and_gradients(objective, None), compiled, strict=True):
        assert expected.keys() == got.keys()
        for name in expected:
            torch.testing.assert_close(got[name], expected[name], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("objective", agnostic_objectives())
def test_the_compiled_blocks_trace_without_a_graph_break_and_equal_eager(objective):
    torch._dynamo.reset()
    counters.clear()
    for run in CHAINS:
        run.compiled_forms.clear()
    compiled = losses_and_gradients(objective, "aot_eager")
    assert dict(counters["graph_break"]) == {}
    assert counters["stats"]["unique_graphs"] > 0
    assert {run.__name__ for run in CHAINS if run.compiled_forms} == chains_of(objective)
    assert_equal_to_eager(objective, compiled)


@pytest.mark.slow
def test_the_inductor_compiled_blocks_equal_eager():
    torch._dynamo.reset()
    assert_equal_to_eager("att_kl+hid_seq", losses_and_gradients("att_kl+hid_seq", "inductor"))
