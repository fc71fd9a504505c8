"""The chunked losses' chains (`objectives.chains`) run compiled inside `compiled_chains` only;
compiled, they give the eager losses and gradients, trace without a graph break, and batches of new
sizes compile nothing once dynamo's few specialised graphs exist.

Tracing uses dynamo's `eager` and `aot_eager` backends (seconds); one slow test compiles the
score-map KL's chain and the vocabulary chains by inductor, the backend `trainer.compile` runs, and
reads in the generated code that each chain's mask, softmaxes, dot product and gradient are one
kernel.
"""

from __future__ import annotations

import re

import pytest
import torch
from torch._dynamo.utils import counters
from torch._inductor.utils import run_and_get_code

from kdbench.objectives import fused, vocabulary
from kdbench.objectives import losses as F
from kdbench.objectives.chains import chain, compiled_chains
from kdbench.objectives.fused import score_map_loss

B, L, H, WIDTH = 3, 9, 4, 32
V = 101


@chain
def doubled(x):
    return x * 2


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def test_a_chain_runs_compiled_only_inside_compiled_chains():
    x = torch.arange(4.0)
    assert torch.equal(doubled(x), x * 2) and counters["stats"]["unique_graphs"] == 0
    with compiled_chains("eager"):
        assert torch.equal(doubled(x), x * 2)
        assert counters["stats"]["unique_graphs"] == 1
        with compiled_chains(None):  # eager: integers would need a graph of their own
            assert torch.equal(doubled(torch.arange(4)), torch.arange(4) * 2)
        assert counters["stats"]["unique_graphs"] == 1
        assert set(doubled.compiled_forms) == {"eager"}
    doubled(x)
    assert counters["stats"]["unique_graphs"] == 1  # nothing compiled outside the block


def test_the_backend_is_restored_when_the_block_raises():
    with pytest.raises(RuntimeError), compiled_chains("eager"):
        raise RuntimeError("a failing step")
    doubled(torch.ones(2))
    assert counters["stats"]["unique_graphs"] == 0


def projections(seed: int, length: int, width: int = WIDTH) -> tuple[tuple, tuple, torch.Tensor]:
    """Student and teacher (A, B) projections [B, length, width] and a mask with one padded
    example."""
    g = torch.Generator().manual_seed(seed)
    student = tuple(torch.randn(B, length, width, generator=g).requires_grad_() for _ in "ab")
    teacher = tuple(torch.randn(B, length, width, generator=g) for _ in "ab")
    mask = torch.ones(B, length, dtype=torch.long)
    mask[1, length // 2 :] = 0
    return student, teacher, mask


def score_map_case(kind: str):
    def loss(seed: int, length: int):
        student, teacher, mask = projections(seed, length)
        return score_map_loss(kind, student, teacher, H, mask), student

    return loss


def vocabulary_case(name: str):
    def loss(seed: int, rows: int):
        g = torch.Generator().manual_seed(seed)
        student = (3 * torch.randn(rows, V, generator=g)).requires_grad_()
        if name == "mlm":
            labels = torch.randint(0, V, (rows,), generator=g)
            labels[0] = vocabulary.IGNORE_INDEX
            return F.mlm(student, None, labels), (student,)
        temperature = 2.0 if name == "mlm_kd T=2" else 1.0
        return F.mlm_kd(student, 3 * torch.randn(rows, V, generator=g), temperature=temperature), (
            student,
        )

    return loss


CASES = {
    **{f"score maps {kind}": score_map_case(kind) for kind in fused.KINDS},
    **{name: vocabulary_case(name) for name in ("mlm_kd T=1", "mlm_kd T=2", "mlm")},
}


def value_and_grads(case, seed: int, size: int, backend: str | None):
    with compiled_chains(backend):
        value, leaves = case(seed, size)
    return value.detach(), torch.autograd.grad(value, leaves)


def assert_equal(got, expected) -> None:
    torch.testing.assert_close(got[0], expected[0], rtol=1e-5, atol=1e-7)
    for grad, expected_grad in zip(got[1], expected[1], strict=True):
        torch.testing.assert_close(grad, expected_grad, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_compiled_chain_equals_eager_without_a_graph_break_and_new_shapes_compile_nothing(
    name, monkeypatch
):
    """Heads in chunks of 3 and 1, rows in chunks of 10 and the rest. Dynamo specialises a graph
    for sizes 0 and 1 (a chunk of one row at 21 rows) and for sizes equal at the first call (a chunk
    as long as its tensor, as many heads as examples): a few graphs, after which batches of new
    sizes compile nothing."""
    monkeypatch.setattr(fused, "CHUNK_BYTES", 4 * B * L * L * 3)
    monkeypatch.setattr(vocabulary, "CHUNK_BYTES", 4 * V * 10)
    case = CASES[name]
    graphs = []
    for seed, size in enumerate((L, L + 4, L + 7, L + 12, L + 15, L + 18)):
        eager = value_and_grads(case, seed, size, None)
        assert_equal(value_and_grads(case, seed, size, "aot_eager"), eager)
        graphs.append(counters["stats"]["unique_graphs"])
    assert dict(counters["graph_break"]) == {}
    assert graphs[-1] == graphs[3] <= 3, graphs


def fused_kernels(code: str, op: str) -> list[str]:
    """The generated kernels a compiled graph's `call` launches whose fused ops include `op`."""
    return re.findall(rf"^\s+(\w*fused\w*{op}\w*)\(", code, re.M)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["score maps kl", "mlm_kd T=2", "mlm"])
def test_inductor_computes_each_softmax_chain_in_one_kernel_and_equals_eager(name):
    case = CASES[name]
    expected = value_and_grads(case, 0, L, None)
    got, code = run_and_get_code(value_and_grads, case, 0, L, "inductor")
    assert_equal(got, expected)
    assert len(fused_kernels("\n".join(code), "_log_softmax")) == 1, code
