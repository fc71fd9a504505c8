"""Tests for kdbench.objectives.losses (pure distillation losses and the registry naming them)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import kdbench
from kdbench.objectives import losses as Fn
from kdbench.objectives.losses import (
    LOSSES,
    att_kl,
    att_mse,
    cosine,
    hid_mse,
    kd,
    relation_kl,
    val_kl,
)

ATOL = 1e-6


# --------------------------------------------------------------------------- #
# helpers
# --------------------------------------------------------------------------- #
def lengths_mask(lengths: list[int], max_len: int | None = None) -> torch.Tensor:
    max_len = max(lengths) if max_len is None else max_len
    return (torch.arange(max_len)[None, :] < torch.tensor(lengths)[:, None]).long()


def pad_tokens(x: torch.Tensor, dims: tuple[int, ...], extra: int, value: float) -> torch.Tensor:
    """Append ``extra`` positions filled with ``value`` along every token dim."""
    for d in dims:
        shape = list(x.shape)
        shape[d] = extra
        x = torch.cat([x, torch.full(shape, value, dtype=x.dtype)], dim=d)
    return x


def slice_tokens(x: torch.Tensor, b: int, dims: tuple[int, ...], n: int) -> torch.Tensor:
    x = x[b : b + 1]
    for d in dims:
        x = x.narrow(d, 0, n)
    return x


def close(a: torch.Tensor | float, b: torch.Tensor | float, atol: float = ATOL) -> bool:
    a = a.detach() if isinstance(a, torch.Tensor) else a
    b = b.detach() if isinstance(b, torch.Tensor) else b
    return abs(float(a) - float(b)) <= atol + 1e-5 * abs(float(b))


def naive_att_kl(s: torch.Tensor, t: torch.Tensor, lengths: list[int]) -> float:
    """Loop-based reference: mean KL over heads and valid rows, softmax over valid keys."""
    total, count = 0.0, 0
    for b, n in enumerate(lengths):
        for h in range(s.shape[1]):
            for i in range(n):
                p = torch.softmax(t[b, h, i, :n].double(), -1)
                q = torch.softmax(s[b, h, i, :n].double(), -1)
                total += float((p * (p.log() - q.log())).sum())
                count += 1
    return total / count


# --------------------------------------------------------------------------- #
# a uniform description of the masked losses, for the generic tests
# --------------------------------------------------------------------------- #
@dataclass
class Case:
    name: str
    fn: Callable[..., torch.Tensor]
    make: Callable[[int, int, torch.Generator], tuple[torch.Tensor, torch.Tensor]]
    token_dims: tuple[int, ...]
    weight: Callable[[int], float]  # per-example normaliser given n_b


H = 2


def _scores(b: int, n: int, g: torch.Generator):
    return torch.randn(b, H, n, n, generator=g) * 2, torch.randn(b, H, n, n, generator=g) * 2


CASES = [
    Case("att_mse", att_mse, _scores, (2, 3), lambda n: H * n * n),
    Case("att_kl", att_kl, _scores, (2, 3), lambda n: H * n),
    Case(
        "val_kl",
        val_kl,
        lambda b, n, g: (
            torch.randn(b, H, n, 4, generator=g),
            torch.randn(b, H, n, 8, generator=g),
        ),
        (2,),
        lambda n: H * n,
    ),
    Case(
        "relation_kl",
        lambda s, t, m=None: relation_kl(s, t, 3, m),
        lambda b, n, g: (torch.randn(b, n, 6, generator=g), torch.randn(b, n, 12, generator=g)),
        (1,),
        lambda n: 3 * n,
    ),
    Case(
        "hid_mse",
        hid_mse,
        lambda b, n, g: (torch.randn(b, n, 5, generator=g), torch.randn(b, n, 5, generator=g)),
        (1,),
        lambda n: 5 * n,
    ),
    Case(
        "cosine",
        cosine,
        lambda b, n, g: (torch.randn(b, n, 5, generator=g), torch.randn(b, n, 5, generator=g)),
        (1,),
        lambda n: n,
    ),
]
CASE_IDS = [c.name for c in CASES]


def make_padded(case: Case, lengths: list[int], seed: int = 0, fill: float = 0.0):
    """Random batch of max(lengths) tokens; positions past each length set to ``fill``."""
    g = torch.Generator().manual_seed(seed)
    s, t = case.make(len(lengths), max(lengths), g)
    mask = lengths_mask(lengths)
    for b, n in enumerate(lengths):
        for x in (s, t):
            for d in case.token_dims:
                x[b].narrow(d - 1, n, x.shape[d] - n).fill_(fill)
    return s, t, mask


# --------------------------------------------------------------------------- #
# generic properties of every masked loss
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_positive_when_different(case: Case):
    s, t, mask = make_padded(case, [4, 2], seed=1)
    assert float(case.fn(s, t, mask)) > 1e-4
    assert float(case.fn(s, t)) > 1e-4


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_zero_when_equal(case: Case):
    # val_kl / relation_kl need equal widths here; see the *_zero_when_relations_equal tests
    s, t, mask = make_padded(case, [4, 2], seed=2, fill=1e30)
    if s.shape != t.shape:
        s = s[..., :1].expand(t.shape).contiguous()
    assert float(case.fn(s, s.clone(), mask)) == pytest.approx(0.0, abs=ATOL)
    assert float(case.fn(s, s.clone(), mask.bool())) == pytest.approx(0.0, abs=ATOL)
    s_full, _, _ = make_padded(case, [4, 4], seed=2)
    assert float(case.fn(s_full, s_full.clone())) == pytest.approx(0.0, abs=ATOL)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("fill", [1e30, -1e30, 12345.0, float("inf"), float("nan")])
def test_padding_invariance(case: Case, fill: float):
    s, t, mask = make_padded(case, [5, 3, 1], seed=3)
    ref = case.fn(s, t, mask)
    s_pad = pad_tokens(s, case.token_dims, 3, fill).requires_grad_(True)
    t_pad = pad_tokens(t, case.token_dims, 3, -fill if math.isfinite(fill) else fill)
    mask_pad = torch.cat([mask, torch.zeros(3, 3, dtype=mask.dtype)], dim=1)
    out = case.fn(s_pad, t_pad, mask_pad)
    assert close(out, ref)
    out.backward()
    assert torch.isfinite(s_pad.grad).all()


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_equals_manual_from_unpadded_pieces(case: Case):
    lengths = [5, 2]
    s, t, mask = make_padded(case, lengths, seed=4, fill=777.0)
    out = case.fn(s, t, mask)
    num = sum(
        float(
            case.fn(slice_tokens(s, b, case.token_dims, n), slice_tokens(t, b, case.token_dims, n))
        )
        * case.weight(n)
        for b, n in enumerate(lengths)
    )
    den = sum(case.weight(n) for n in lengths)
    assert close(out, num / den)
    # and the masked value differs from the naive unmasked one (the mask matters)
    assert not close(out, case.fn(s, t))


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_fully_padded_example_is_ignored(case: Case):
    s, t, mask = make_padded(case, [4, 3], seed=5, fill=1e30)
    mask[1] = 0
    out = case.fn(s, t, mask)
    alone = case.fn(slice_tokens(s, 0, case.token_dims, 4), slice_tokens(t, 0, case.token_dims, 4))
    assert torch.isfinite(out)
    assert close(out, alone)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize(
    "mask_dtype", [torch.bool, torch.int32, torch.int64, torch.float32, torch.bfloat16]
)
def test_mask_dtypes(case: Case, mask_dtype: torch.dtype):
    s, t, mask = make_padded(case, [4, 2], seed=6, fill=3.0)
    assert close(case.fn(s, t, mask.to(mask_dtype)), case.fn(s, t, mask))


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_gradients_reach_student_only(case: Case):
    s, t, mask = make_padded(case, [4, 2], seed=7, fill=1e4)
    s.requires_grad_(True)
    t.requires_grad_(True)
    loss = case.fn(s, t, mask)
    assert loss.dtype == torch.float32 and loss.dim() == 0
    loss.backward()
    assert torch.isfinite(s.grad).all()
    assert s.grad.abs().sum() > 0
    assert t.grad is None
    # no gradient into padded student positions
    for d in case.token_dims:
        assert s.grad[1].narrow(d - 1, 2, s.shape[d] - 2).abs().sum() == 0


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_teacher_without_grad_is_fine(case: Case):
    s, t, mask = make_padded(case, [3, 3], seed=8)
    s.requires_grad_(True)
    with torch.no_grad():
        t = t * 1.0
    case.fn(s, t, mask).backward()
    assert torch.isfinite(s.grad).all()


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_bfloat16_inputs(case: Case):
    s, t, mask = make_padded(case, [5, 2], seed=9, fill=1e30)
    s16 = s.to(torch.bfloat16).requires_grad_(True)
    t16 = t.to(torch.bfloat16)
    loss = case.fn(s16, t16, mask)
    assert loss.dtype == torch.float32
    assert torch.isfinite(loss)
    # computed in float32 from the bf16 values
    assert close(loss, case.fn(s16.detach().float(), t16.float(), mask), atol=1e-5)
    loss.backward()
    assert s16.grad.dtype == torch.bfloat16
    assert torch.isfinite(s16.grad.float()).all()
    assert s16.grad.float().abs().sum() > 0


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_mask_shape_mismatch_raises(case: Case):
    s, t, _ = make_padded(case, [4, 4], seed=10)
    with pytest.raises(ValueError, match="mask"):
        case.fn(s, t, torch.ones(2, 3))
    with pytest.raises(ValueError, match="mask"):
        case.fn(s, t, torch.ones(3, 4))


@pytest.mark.parametrize(
    "fn, s, t",
    [
        (att_mse, torch.zeros(1, 2, 3, 3), torch.zeros(1, 2, 4, 4)),
        (att_kl, torch.zeros(1, 2, 3, 3), torch.zeros(1, 1, 3, 3)),
        (att_kl, torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4)),
        (att_kl, torch.zeros(2, 3, 3), torch.zeros(2, 3, 3)),
        (val_kl, torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 5, 4)),
        (val_kl, torch.zeros(2, 3, 4), torch.zeros(2, 3, 4)),
        (hid_mse, torch.zeros(1, 3, 4), torch.zeros(1, 3, 5)),
        (hid_mse, torch.zeros(4), torch.zeros(4)),
        (cosine, torch.zeros(2, 3, 4), torch.zeros(2, 4, 4)),
    ],
)
def test_shape_mismatch_raises(fn, s, t):
    with pytest.raises(ValueError):
        fn(s, t)


# --------------------------------------------------------------------------- #
# hand-computed values
# --------------------------------------------------------------------------- #
def _kl_by_hand(p_logits: list[float], q_logits: list[float]) -> float:
    zp = sum(math.exp(v) for v in p_logits)
    zq = sum(math.exp(v) for v in q_logits)
    return sum(
        math.exp(a) / zp * (math.log(math.exp(a) / zp) - math.log(math.exp(b) / zq))
        for a, b in zip(p_logits, q_logits, strict=True)
    )


def test_att_kl_hand_computed_2x2():
    s = torch.tensor([[[[0.0, 1.0], [2.0, 0.0]]]])
    t = torch.tensor([[[[1.0, 0.0], [0.0, 0.0]]]])
    expected = (_kl_by_hand([1.0, 0.0], [0.0, 1.0]) + _kl_by_hand([0.0, 0.0], [2.0, 0.0])) / 2
    assert close(att_kl(s, t), expected)
    # a padded third token with huge values changes nothing
    s3 = torch.full((1, 1, 3, 3), 1e30)
    t3 = torch.full((1, 1, 3, 3), -1e30)
    s3[..., :2, :2] = s
    t3[..., :2, :2] = t
    assert close(att_kl(s3, t3, torch.tensor([[1, 1, 0]])), expected)
    # equal scores -> zero, even if the distributions are arbitrary
    assert float(att_kl(s, s.clone())) == 0.0


def test_att_kl_matches_naive_reference():
    g = torch.Generator().manual_seed(11)
    lengths = [4, 1, 3]
    s = torch.randn(3, 2, 4, 4, generator=g) * 3
    t = torch.randn(3, 2, 4, 4, generator=g) * 3
    assert close(att_kl(s, t, lengths_mask(lengths)), naive_att_kl(s, t, lengths))


def test_att_mse_hand_computed_and_normalisation():
    # H = 2, lengths (3, 2): denominator H * (3^2 + 2^2) = 26
    g = torch.Generator().manual_seed(12)
    s = torch.randn(2, 2, 3, 3, generator=g)
    t = torch.randn(2, 2, 3, 3, generator=g)
    lengths = [3, 2]
    total = 0.0
    for b, n in enumerate(lengths):
        for h in range(2):
            for i in range(n):
                for j in range(n):
                    total += (float(s[b, h, i, j]) - float(t[b, h, i, j])) ** 2
    assert close(att_mse(s, t, lengths_mask(lengths)), total / 26)
    # tiny example: single head, single token pair
    assert close(att_mse(torch.tensor([[[[3.0]]]]), torch.tensor([[[[1.0]]]])), 4.0)
    # without mask it is the plain mean
    assert close(att_mse(s, t), (s - t).pow(2).mean())


def test_hid_mse_hand_computed():
    s = torch.tensor([[1.0, 2.0]])
    t = torch.tensor([[0.0, 0.0]])
    assert close(hid_mse(s, t), 2.5)
    # [B, L, D]: tokens (1,2)->(0,0) and (0,1)->(0,0) valid, third padded
    s3 = torch.tensor([[[1.0, 2.0], [0.0, 1.0], [100.0, 100.0]]])
    t3 = torch.zeros(1, 3, 2)
    assert close(hid_mse(s3, t3, torch.tensor([[1, 1, 0]])), (1 + 4 + 0 + 1) / (2 * 2))


def test_cosine_hand_computed():
    s = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    t = torch.tensor([[0.0, 1.0], [1.0, 1.0]])
    expected = ((1 - 0.0) + (1 - 1 / math.sqrt(2))) / 2
    assert close(cosine(s, t), expected)
    s3 = torch.tensor([[[1.0, 0.0], [1.0, 0.0], [5.0, -3.0]]])
    t3 = torch.tensor([[[0.0, 1.0], [1.0, 1.0], [-5.0, 3.0]]])
    assert close(cosine(s3, t3, torch.tensor([[1, 1, 0]])), expected)
    # scale invariance and antiparallel vectors
    assert close(cosine(s * 7.0, t * 0.1), expected)
    assert close(cosine(torch.tensor([[1.0, 2.0]]), torch.tensor([[-2.0, -4.0]])), 2.0)


def test_2d_inputs_reject_mask():
    with pytest.raises(ValueError, match="mask"):
        hid_mse(torch.zeros(2, 4), torch.zeros(2, 4), torch.ones(2, 4))
    with pytest.raises(ValueError, match="mask"):
        cosine(torch.zeros(2, 4), torch.zeros(2, 4), torch.ones(2, 4))


# --------------------------------------------------------------------------- #
# val_kl / relation_kl
# --------------------------------------------------------------------------- #
def test_val_kl_different_head_sizes():
    g = torch.Generator().manual_seed(13)
    vs = torch.randn(2, 3, 5, 4, generator=g, requires_grad=True)
    vt = torch.randn(2, 3, 5, 8, generator=g)
    mask = lengths_mask([5, 3])
    loss = val_kl(vs, vt, mask)
    assert torch.isfinite(loss) and float(loss.detach()) > 0
    loss.backward()
    assert torch.isfinite(vs.grad).all() and vs.grad.abs().sum() > 0
    # explicit reference: V V^T / sqrt(d) per side, then the att_kl reduction
    rs = vs.detach() @ vs.detach().transpose(-1, -2) / 2.0
    rt = vt @ vt.transpose(-1, -2) / math.sqrt(8)
    assert close(loss, naive_att_kl(rs, rt, [5, 3]))


def test_val_kl_zero_when_relations_equal():
    # teacher = 2^(-1/4) [v, v] gives V_t V_t^T / sqrt(8) == V_s V_s^T / sqrt(4)
    g = torch.Generator().manual_seed(14)
    vs = torch.randn(2, 2, 4, 4, generator=g)
    vt = 2 ** (-0.25) * torch.cat([vs, vs], dim=-1)
    assert float(val_kl(vs, vt, lengths_mask([4, 2]))) == pytest.approx(0.0, abs=ATOL)
    assert float(val_kl(vs, vs.clone())) == pytest.approx(0.0, abs=ATOL)


def test_val_kl_head_count_mismatch_raises():
    with pytest.raises(ValueError, match="heads"):
        val_kl(torch.zeros(1, 2, 3, 4), torch.zeros(1, 4, 3, 4))


def test_relation_kl_different_widths():
    g = torch.Generator().manual_seed(15)
    xs = torch.randn(2, 5, 6, generator=g, requires_grad=True)
    xt = torch.randn(2, 5, 12, generator=g)
    mask = lengths_mask([5, 2])
    loss = relation_kl(xs, xt, 3, mask)
    assert torch.isfinite(loss) and float(loss.detach()) > 0
    loss.backward()
    assert torch.isfinite(xs.grad).all() and xs.grad.abs().sum() > 0
    # reference: split into 3 relation heads (sizes 2 and 4), scaled dot products
    hs = xs.detach().view(2, 5, 3, 2).permute(0, 2, 1, 3)
    ht = xt.view(2, 5, 3, 4).permute(0, 2, 1, 3)
    rs = hs @ hs.transpose(-1, -2) / math.sqrt(2)
    rt = ht @ ht.transpose(-1, -2) / math.sqrt(4)
    assert close(loss, naive_att_kl(rs, rt, [5, 2]))


def test_relation_kl_zero_when_relations_equal():
    g = torch.Generator().manual_seed(16)
    xs = torch.randn(2, 4, 6, generator=g)
    heads = xs.view(2, 4, 3, 2)
    xt = (2 ** (-0.25) * torch.cat([heads, heads], dim=-1)).reshape(2, 4, 12)
    assert float(relation_kl(xs, xt, 3, lengths_mask([4, 1]))) == pytest.approx(0.0, abs=ATOL)
    assert float(relation_kl(xs, xs.clone(), 2)) == pytest.approx(0.0, abs=ATOL)


def released_minilm_v2_relation(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """The study's task-agnostic MiniLMv2 term (ta/methods/feature_distill.py:139-142) on per-head
    [B, H, L, d] vectors: per head, KL(softmax(t t^T / sqrt(d_t)) || softmax(s s^T / sqrt(d_s)))
    summed, divided by B * H * L."""
    b, h, length, dt = teacher.shape
    ds = student.shape[-1]
    s = student.reshape(-1, length, ds)
    t = teacher.reshape(-1, length, dt)
    log_s = torch.log_softmax(torch.bmm(s, s.transpose(1, 2)) / math.sqrt(ds), dim=-1)
    p_t = torch.softmax(torch.bmm(t, t.transpose(1, 2)) / math.sqrt(dt), dim=-1)
    return torch.nn.functional.kl_div(log_s, p_t, reduction="sum") / (b * h * length)


def test_relation_kl_is_the_studys_released_minilm_v2_relation():
    g = torch.Generator().manual_seed(18)
    b, heads, length, ds, dt = 3, 4, 7, 5, 8
    student = torch.randn(b, heads, length, ds, generator=g)
    teacher = torch.randn(b, heads, length, dt, generator=g)

    def concatenated(x: torch.Tensor) -> torch.Tensor:  # [B, H, L, d] -> [B, L, H * d]
        return x.transpose(1, 2).reshape(b, length, -1)

    ours = relation_kl(concatenated(student), concatenated(teacher), heads)
    assert float(ours) == pytest.approx(float(released_minilm_v2_relation(student, teacher)), 1e-6)


def test_relation_kl_on_values_equals_val_kl():
    g = torch.Generator().manual_seed(17)
    b, length, heads, ds, dt = 2, 5, 4, 3, 6
    vs = torch.randn(b, length, heads * ds, generator=g)
    vt = torch.randn(b, length, heads * dt, generator=g)
    mask = lengths_mask([5, 3])

    def to_heads(x: torch.Tensor, d: int) -> torch.Tensor:
        return x.view(b, length, heads, d).transpose(1, 2)

    assert close(relation_kl(vs, vt, heads, mask), val_kl(to_heads(vs, ds), to_heads(vt, dt), mask))


def test_relation_kl_indivisible_raises():
    with pytest.raises(ValueError, match="divisible"):
        relation_kl(torch.zeros(1, 3, 6), torch.zeros(1, 3, 10), 4)
    with pytest.raises(ValueError):
        relation_kl(torch.zeros(1, 3, 6), torch.zeros(1, 4, 6), 3)


# --------------------------------------------------------------------------- #
# kd
# --------------------------------------------------------------------------- #
def _kd_by_hand(
    s: list[list[float]], t: list[list[float]], labels: list[int] | None, T: float, alpha: float
):
    kls, ces = [], []
    for srow, trow, i in zip(s, t, labels or [None] * len(s), strict=True):
        kls.append(_kl_by_hand([v / T for v in trow], [v / T for v in srow]))
        if i is not None:
            z = sum(math.exp(v) for v in srow)
            ces.append(-math.log(math.exp(srow[i]) / z))
    soft = T * T * sum(kls) / len(kls)
    if labels is None:
        return soft
    return alpha * soft + (1 - alpha) * sum(ces) / len(ces)


def test_kd_hand_computed_with_labels():
    s = [[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]]
    t = [[0.0, 1.0, 3.0], [2.0, 2.0, -1.0]]
    labels = [2, 0]
    out = kd(torch.tensor(s), torch.tensor(t), torch.tensor(labels), temperature=2.0, alpha=0.3)
    assert close(out, _kd_by_hand(s, t, labels, 2.0, 0.3))
    # defaults are T = 2, alpha = 0.5
    out = kd(torch.tensor(s), torch.tensor(t), torch.tensor(labels))
    assert close(out, _kd_by_hand(s, t, labels, 2.0, 0.5))


def test_kd_no_labels():
    s = [[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]]
    t = [[0.0, 1.0, 3.0], [2.0, 2.0, -1.0]]
    out = kd(torch.tensor(s), torch.tensor(t), temperature=4.0, alpha=0.1)
    assert close(out, _kd_by_hand(s, t, None, 4.0, 0.1))
    assert float(kd(torch.tensor(s), torch.tensor(s))) == pytest.approx(0.0, abs=ATOL)


def test_kd_equal_logits_leaves_hard_term():
    s = torch.tensor([[1.0, 2.0, 0.5]])
    labels = torch.tensor([1])
    ce = -math.log(math.exp(2.0) / (math.exp(1.0) + math.exp(2.0) + math.exp(0.5)))
    assert close(kd(s, s.clone(), labels, alpha=0.25), 0.75 * ce)


def test_kd_regression_branch():
    s = torch.tensor([[1.0], [2.0]])
    t = torch.tensor([[0.5], [2.5]])
    labels = torch.tensor([1.5, 1.0])
    soft = (0.25 + 0.25) / 2
    hard = (0.25 + 1.0) / 2
    assert close(kd(s, t, labels, alpha=0.5), 0.5 * soft + 0.5 * hard)
    assert close(kd(s, t, labels, alpha=0.2, temperature=7.0), 0.2 * soft + 0.8 * hard)
    assert close(kd(s, t, temperature=7.0), soft)
    assert float(kd(s, s.clone())) == 0.0


def test_kd_gradients_and_bfloat16():
    g = torch.Generator().manual_seed(18)
    s = torch.randn(4, 3, generator=g).to(torch.bfloat16).requires_grad_(True)
    t = torch.randn(4, 3, generator=g).to(torch.bfloat16).requires_grad_(True)
    loss = kd(s, t, torch.tensor([0, 1, 2, 1]))
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    loss.backward()
    assert torch.isfinite(s.grad.float()).all() and s.grad.float().abs().sum() > 0
    assert t.grad is None
    sr = torch.randn(4, 1, generator=g).to(torch.bfloat16).requires_grad_(True)
    loss = kd(sr, torch.randn(4, 1, generator=g), torch.randn(4, generator=g))
    loss.backward()
    assert torch.isfinite(sr.grad.float()).all() and sr.grad.float().abs().sum() > 0


def test_kd_bad_shapes_raise():
    with pytest.raises(ValueError):
        kd(torch.zeros(2, 3), torch.zeros(2, 4))
    with pytest.raises(ValueError):
        kd(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError):
        kd(torch.zeros(2, 3, 1), torch.zeros(2, 3, 1))


def test_public_names():
    assert set(Fn.__all__) == {
        "kd",
        "att_mse",
        "att_kl",
        "val_kl",
        "relation_kl",
        "hid_mse",
        "cosine",
        "mlm_kd",
        "mlm",
    }


OBJECTIVE_CONFIGS = sorted((Path(kdbench.__file__).parent / "conf" / "objective").glob("*.yaml"))


@pytest.mark.parametrize("path", OBJECTIVE_CONFIGS, ids=lambda path: path.stem)
def test_objective_configs_name_only_registered_losses(path: Path):
    config = yaml.safe_load(path.read_text())
    for spec in [*(config.get("terms") or []), *(config.get("terms_task_agnostic") or [])]:
        assert spec["loss"] in LOSSES, f"{path.name}: loss {spec['loss']!r} is not in LOSSES"
        assert (
            spec.get("feature", LOSSES[spec["loss"]].features[0]) in LOSSES[spec["loss"]].features
        )


def test_every_registered_loss_is_computed_by_a_function_of_its_name():
    """One vocabulary: a config's `loss: X` is the function (or module factory) `X`."""
    assert OBJECTIVE_CONFIGS
    for name, entry in LOSSES.items():
        assert callable(entry.fn) and entry.fn.__name__ == name


def test_mlm_kd_by_hand_and_its_kl_gradient():
    s = torch.tensor([[1.0, 0.0, -1.0], [0.5, 0.5, 2.0]], requires_grad=True)
    t = torch.tensor([[0.0, 1.0, 0.0], [2.0, 0.0, 0.0]])
    temperature = 2.0
    expected = 0.0
    for row_s, row_t in zip(s.tolist(), t.tolist()):
        p = [math.exp(v / temperature) for v in row_t]
        p = [v / sum(p) for v in p]
        q = [math.exp(v / temperature) for v in row_s]
        log_q = [math.log(v / sum(q)) for v in q]
        expected += -sum(pi * lq for pi, lq in zip(p, log_q))
    expected = expected / 2 * temperature**2
    loss = Fn.mlm_kd(s, t, temperature=temperature)
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    loss.backward()
    kl_grad = torch.autograd.grad(Fn.kd(s, t, temperature=temperature), s)[0]
    assert torch.allclose(s.grad, kl_grad, atol=1e-6)  # differs from T^2 KL by a constant only
    assert Fn.mlm_kd(s[:0], t[:0]).item() == 0.0


def test_mlm_is_cross_entropy_on_the_masked_positions():
    s = torch.tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 3.0]])
    labels = torch.tensor([0, 1])
    expected = -(math.log(math.exp(2) / (math.exp(2) + 2)) + math.log(1 / (2 + math.exp(3)))) / 2
    assert Fn.mlm(s, None, labels=labels).item() == pytest.approx(expected, rel=1e-6)
    with pytest.raises(ValueError, match="needs labels"):
        Fn.mlm(s, None)


# --------------------------------------------------------------------------- #
# property test: att_kl padding invariance with random lengths
# --------------------------------------------------------------------------- #
@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(min_value=0, max_value=6), min_size=1, max_size=3).filter(
        lambda xs: sum(xs) > 0
    ),
    extra=st.integers(min_value=0, max_value=3),
    heads=st.integers(min_value=1, max_value=3),
    fill=st.sampled_from([0.0, 1e30, -1e30, 5e3, float("inf")]),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_att_kl_padding_invariance_property(lengths, extra, heads, fill, seed):
    g = torch.Generator().manual_seed(seed)
    max_len = max(lengths) + extra
    s = torch.full((len(lengths), heads, max_len, max_len), fill)
    t = torch.full((len(lengths), heads, max_len, max_len), -fill)
    for b, n in enumerate(lengths):
        s[b, :, :n, :n] = torch.randn(heads, n, n, generator=g) * 3
        t[b, :, :n, :n] = torch.randn(heads, n, n, generator=g) * 3
    s.requires_grad_(True)
    mask = lengths_mask(lengths, max_len)
    loss = att_kl(s, t, mask)
    assert close(loss, naive_att_kl(s.detach(), t, lengths))
    # same value from the unpadded examples, weighted by n_b
    pieces = [
        float(att_kl(s.detach()[b : b + 1, :, :n, :n], t[b : b + 1, :, :n, :n])) * n
        for b, n in enumerate(lengths)
        if n > 0
    ]
    assert close(loss, sum(pieces) / sum(lengths))
    loss.backward()
    assert torch.isfinite(s.grad).all()


def test_val_kl_scaled_by_the_teachers_head_size_as_minilm_eq8():
    torch.manual_seed(0)
    student, teacher = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 16)  # head sizes 4 and 16
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    by_teacher = Fn.val_kl(student, teacher, mask, scale_by="teacher")
    s_rel, t_rel = student @ student.transpose(-1, -2), teacher @ teacher.transpose(-1, -2)
    expected = Fn.att_kl(s_rel / 4.0, t_rel / 4.0, mask)
    assert torch.allclose(by_teacher, expected)  # sqrt(16) = 4 on both sides
    own = Fn.att_kl(s_rel / 2.0, t_rel / 4.0, mask)
    assert torch.allclose(Fn.val_kl(student, teacher, mask), own)
    assert not torch.allclose(by_teacher, own)
    same = torch.randn(2, 3, 5, 16)
    by_teacher = Fn.val_kl(same, teacher, mask, scale_by="teacher")
    assert torch.allclose(by_teacher, Fn.val_kl(same, teacher, mask))
