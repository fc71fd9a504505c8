"""The score-map losses (gradient formed in the forward pass) against the reference functions
through autograd."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from kdbench.objectives import fused
from kdbench.objectives import losses as F
from kdbench.objectives.features import FEATURES
from kdbench.objectives.fused import score_map_loss
from kdbench.objectives.losses import LOSSES
from kdbench.objectives.tensors import split_heads

B, L, H = 3, 7, 4


def _mask():
    mask = torch.ones(B, L, dtype=torch.long)
    mask[1, 4:] = 0  # padded example
    mask[2, 1:] = 0  # only [CLS]
    return mask


def _scores(a, b, heads):
    a, b = split_heads(a, heads), split_heads(b, heads)
    return a @ b.transpose(-1, -2) / math.sqrt(a.shape[-1])


# name -> (kind, the reference on (student A, B), (teacher A, B), heads, mask; student/teacher
# widths, self-relation)
CASES = {
    "att_kl": (
        "kl",
        lambda s, t, h, m: F.att_kl(_scores(*s, h), _scores(*t, h), m),
        (32, 32),
        False,
    ),
    "att_mse": (
        "mse",
        lambda s, t, h, m: F.att_mse(_scores(*s, h), _scores(*t, h), m),
        (32, 32),
        False,
    ),
    "val_kl": (
        "kl",
        lambda s, t, h, m: F.val_kl(split_heads(s[0], h), split_heads(t[0], h), m),
        (16, 32),
        True,
    ),
    "relation_kl": ("kl", lambda s, t, h, m: F.relation_kl(s[0], t[0], h, m), (24, 40), True),
}


def _inputs(widths, self_relation, seed=0):
    g = torch.Generator().manual_seed(seed)
    student_a = torch.randn(B, L, widths[0], generator=g, requires_grad=True)
    student_b = (
        student_a
        if self_relation
        else torch.randn(B, L, widths[0], generator=g, requires_grad=True)
    )
    teacher_a = torch.randn(B, L, widths[1], generator=g)
    teacher_b = teacher_a if self_relation else torch.randn(B, L, widths[1], generator=g)
    return (student_a, student_b), (teacher_a, teacher_b)


def _value_and_grads(loss, student):
    leaves = list(dict.fromkeys(student))  # a self-relation has one leaf
    grads = torch.autograd.grad(loss, leaves)
    return loss.detach(), grads


@pytest.mark.parametrize("one_head_at_a_time", [False, True])
@pytest.mark.parametrize("mask_kind", ["padded", "none"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_same_loss_and_gradients_as_the_reference(name, mask_kind, one_head_at_a_time, monkeypatch):
    if one_head_at_a_time:
        monkeypatch.setattr(fused, "CHUNK_BYTES", 1)
    kind, reference, widths, self_relation = CASES[name]
    student, teacher = _inputs(widths, self_relation)
    mask = _mask() if mask_kind == "padded" else None
    expected, expected_grads = _value_and_grads(reference(student, teacher, H, mask), student)
    value, grads = _value_and_grads(score_map_loss(kind, student, teacher, H, mask), student)
    assert value.dtype == torch.float32
    torch.testing.assert_close(value, expected, rtol=1e-5, atol=1e-7)
    for grad, expected_grad in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(grad, expected_grad, rtol=1e-4, atol=1e-6)
    assert any(g.abs().sum() > 0 for g in grads)


def test_a_hand_computed_value():
    """One head, one example of two tokens: KL between two 2x2 row softmaxes and their MSE, by
    hand."""
    s = torch.tensor([[[1.0], [0.0]]])  # A = B = x: scores x x^T = [[1, 0], [0, 0]]
    t = torch.tensor([[[0.0], [2.0]]])  # scores [[0, 0], [0, 4]]
    ps = torch.softmax(torch.tensor([[1.0, 0.0], [0.0, 0.0]]), -1)
    pt = torch.softmax(torch.tensor([[0.0, 0.0], [0.0, 4.0]]), -1)
    kl = (pt * (pt.log() - ps.log())).sum() / 2  # mean over the 2 query rows of 1 head
    assert score_map_loss("kl", (s, s), (t, t), 1).item() == pytest.approx(kl.item(), rel=1e-6)
    mse = (
        (torch.tensor([[1.0, 0.0], [0.0, 0.0]]) - torch.tensor([[0.0, 0.0], [0.0, 4.0]])) ** 2
    ).sum() / 4
    assert score_map_loss("mse", (s, s), (t, t), 1).item() == pytest.approx(mse.item(), rel=1e-6)


def test_padded_positions_change_nothing_even_when_non_finite():
    student, teacher = _inputs((32, 32), False)
    mask = _mask()
    value, grads = _value_and_grads(score_map_loss("kl", student, teacher, H, mask), student)
    padded = mask == 0
    dirty_student = [
        x.detach().clone().masked_fill(padded[:, :, None], float("nan")).requires_grad_()
        for x in student
    ]
    dirty_teacher = [x.masked_fill(padded[:, :, None], float("inf")) for x in teacher]
    dirty_value, dirty_grads = _value_and_grads(
        score_map_loss("kl", dirty_student, dirty_teacher, H, mask), dirty_student
    )
    assert torch.equal(value, dirty_value)
    for grad, dirty in zip(grads, dirty_grads, strict=True):
        assert torch.equal(grad, dirty) and not grad[padded].any()


def test_teacher_gets_no_gradient_and_no_grad_mode_gives_the_value():
    student, (ta, tb) = _inputs((32, 32), False)
    ta.requires_grad_(True)
    loss = score_map_loss("kl", student, (ta, tb), H)
    loss.backward()
    assert ta.grad is None and student[0].grad is not None
    with torch.no_grad():
        assert torch.equal(score_map_loss("kl", student, (ta, tb), H), loss.detach())


def test_bf16_projections_give_a_float32_loss_and_bf16_gradients():
    student, teacher = _inputs((32, 32), False)
    student = tuple(x.detach().bfloat16().requires_grad_() for x in student)
    loss = score_map_loss("kl", student, tuple(x.bfloat16() for x in teacher), H, _mask())
    loss.backward()
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert all(x.grad.dtype == torch.bfloat16 and torch.isfinite(x.grad).all() for x in student)


def test_bad_shapes_and_kinds_fail_with_a_clear_message():
    student, teacher = _inputs((30, 32), False)
    with pytest.raises(ValueError, match=r"heads\*d"):
        score_map_loss("kl", student, teacher, H)
    with pytest.raises(ValueError, match="valid: kl, mse"):
        score_map_loss("cosine", *_inputs((32, 32), False), H)


@pytest.mark.parametrize(
    "name", sorted(name for name, entry in LOSSES.items() if entry.fused is not None)
)
def test_each_registered_fused_form_equals_its_loss_on_the_derived_features(name):
    """The registry's `fused` of a loss, on a feature's raw projections, is its `fn` on the feature
    derived from them."""
    entry = LOSSES[name]
    for feature in entry.features:
        raw = FEATURES[feature].raw
        a, b = raw if len(raw) == 2 else raw * 2
        student, teacher = _inputs((32, 32), self_relation=a == b)
        mask = _mask()
        params = {"num_heads": 2} if entry.takes_num_heads else {}
        heads = params.get("num_heads", H)
        derived = [
            FEATURES[feature].derive(dict(zip((a, b), side)), H) for side in (student, teacher)
        ]
        expected, expected_grads = _value_and_grads(
            entry.fn(*derived, mask=mask, **params), student
        )
        value, grads = _value_and_grads(entry.fused(student, teacher, heads, mask), student)
        torch.testing.assert_close(value, expected, rtol=1e-5, atol=1e-7)
        for grad, expected_grad in zip(grads, expected_grads, strict=True):
            torch.testing.assert_close(grad, expected_grad, rtol=1e-4, atol=1e-6)


class MapPasses(TorchDispatchMode):
    """The ops that read or write a float32 map of `size` elements while active, views aside."""

    VIEWS = {"view", "_unsafe_view", "expand", "transpose", "t", "as_strided"}

    def __init__(self, size: int):
        super().__init__()
        self.size, self.ops = size, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tensors = tree_flatten((args, kwargs, out))[0]
        touches = any(
            isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.numel() == self.size
            for t in tensors
        )
        if touches and func.overloadpacket.__name__ not in self.VIEWS:
            self.ops.append(func.overloadpacket.__name__)
        return out


def test_the_fused_kl_passes_over_a_map_as_often_as_docs_speed_counts():
    """docs/speed.md's bytes for the score-map losses count these passes: two products and two
    gradient products, and 14 elementwise or reducing passes (scale, mask, log-softmax per side; the
    teacher's probabilities and their mask; the difference and its dot product; the student's
    probabilities, minus the teacher's, masked, scaled)."""
    student, teacher = _inputs((32, 32), False)
    with MapPasses(B * H * L * L) as passes:
        score_map_loss("kl", student, teacher, H, _mask()).backward()
    matmuls = [op for op in passes.ops if op in ("bmm", "mm", "matmul")]
    assert len(matmuls) == 4 and len(passes.ops) - len(matmuls) == 14, passes.ops


# A one-chunk att_kl forward and backward: the padding mask and its counted pairs, four float32
# factor views, two products, the KL chain and its gradient, two gradient products, the division.
KERNELS_PER_ONE_CHUNK_LOSS = 63


def test_a_loss_of_one_chunk_of_heads_launches_no_gradient_buffer_or_copy():
    """GLUE-length maps fit one chunk: its gradients are the whole gradients, taken as they are
    (no buffers written column by column), and float32 factors are read without a cast."""
    from kdbench.measure.timing import OpCounts

    torch.manual_seed(0)
    q, k = (torch.randn(2, 8, 64, requires_grad=True) for _ in range(2))
    mask = torch.tensor([[1.0] * 8, [1.0] * 5 + [0.0] * 3])
    with OpCounts() as ops:
        fused.att_kl((q, k), (torch.randn(2, 8, 64), torch.randn(2, 8, 64)), 4, mask).backward()
    assert ops.counts["kernels"] <= KERNELS_PER_ONE_CHUNK_LOSS
