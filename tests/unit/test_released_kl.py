"""The score-map KLs' padding modes (`att_kl` / `val_kl` `params.padding`) against hand values and
independent re-implementations of the study's released formulas (mainlp/How-to-distill-your-BERT,
task_specific_distillation/methods/method_comparison.py), through the reference functions, the
fused forms and an objective's terms."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as TF

from kdbench.errors import ConfigError
from kdbench.objectives import fused
from kdbench.objectives import losses as F
from kdbench.objectives.features import attention_scores
from kdbench.objectives.tensors import split_heads
from kdbench.objectives.terms import Objective
from tests.unit.test_terms import _pair, _records, terms_of

B, H, L = 3, 2, 6


def _mask():
    mask = torch.ones(B, L, dtype=torch.long)
    mask[1, 4:] = 0
    mask[2, 2:] = 0
    return mask


def _fairseq_layout(scores, mask):
    """[B, H, L, L] scores as the released encoder hands them to the loss: [B*H, L, L], -inf at the
    padded keys (fairseq/modules/multihead_attention.py:328-338), padded query rows as computed."""
    padded_keys = (mask == 0)[:, None, None, :]
    return scores.masked_fill(padded_keys, float("-inf")).reshape(-1, L, L)


def released_att_kl_learn(student, teacher, mask):
    """`att_kl_learn`'s attention term (method_comparison.py:231-236)."""
    s, t = _fairseq_layout(student, mask), _fairseq_layout(teacher, mask)
    s_log = torch.clamp(TF.softmax(s, dim=-1), 1e-7, 1).log()
    return TF.kl_div(s_log, TF.softmax(t, dim=-1), reduction="sum") / (s.shape[0] * s.shape[1])


def released_att_kl_hiden_mse_learn(student, teacher, mask):
    """`att_kl_hiden_mse_learn`'s attention term (method_comparison.py:290-293), F.kl_div as the
    torch of its time computed it: target * (log target - input) where target > 0, else 0."""
    s, t = _fairseq_layout(student, mask), _fairseq_layout(teacher, mask)
    s_log, p_t = TF.log_softmax(s, dim=-1), TF.softmax(t, dim=-1)
    pointwise = torch.where(p_t > 0, p_t * (p_t.log() - s_log), torch.zeros(()))
    return pointwise.sum() / (s.shape[0] * s.shape[1])


def released_value_relation(student_values, teacher_values):
    """`minilm_feature_learn`'s value relation (method_comparison.py:376-381): [B*H, L, d] values,
    no padding mask, both sides over sqrt of the student's head size."""
    s = student_values.reshape(-1, L, student_values.shape[-1])
    t = teacher_values.reshape(-1, L, teacher_values.shape[-1])
    root = math.sqrt(s.shape[-1])
    vr_s = TF.log_softmax(s @ s.transpose(1, 2) / root, dim=-1)
    vr_t = TF.softmax(t @ t.transpose(1, 2) / root, dim=-1)
    return TF.kl_div(vr_s, vr_t, reduction="sum") / (s.shape[0] * s.shape[1])


def _scores(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, H, L, L, generator=g), torch.randn(B, H, L, L, generator=g)


def test_att_kl_padding_by_hand():
    """One head, three tokens, the third padded; the student uniform on the two real keys, the
    teacher (3/4, 1/4), (1/2, 1/2) and, at the padded query row, (1/4, 3/4)."""
    student = torch.zeros(1, 1, 3, 3)
    teacher = torch.tensor([[math.log(3), 0, 9], [0, 0, 5], [0, math.log(3), -2]])[None, None]
    mask = torch.tensor([[1, 1, 0]])
    row = 0.75 * math.log(1.5) + 0.25 * math.log(0.5)
    masked = F.att_kl(student, teacher, mask)
    rows = F.att_kl(student, teacher, mask, padding="rows")
    assert masked.item() == pytest.approx(row / 2, rel=1e-6)  # two real rows
    assert rows.item() == pytest.approx(2 * row / 3, rel=1e-6)  # every row of B * H * L = 3
    assert F.att_kl(student, teacher, mask, padding="none") == F.att_kl(student, teacher)


@pytest.mark.parametrize("released", [released_att_kl_learn, released_att_kl_hiden_mse_learn])
@pytest.mark.parametrize("seed", [0, 1])
def test_att_kl_padding_rows_is_the_studys_released_attention_kl(released, seed):
    student, teacher = _scores(seed)
    mask = _mask()
    ours = F.att_kl(student, teacher, mask, padding="rows")
    assert ours.item() == pytest.approx(released(student, teacher, mask).item(), rel=1e-5)
    assert not torch.isclose(ours, F.att_kl(student, teacher, mask))  # padding changes it
    unpadded = torch.ones(B, L)
    assert torch.allclose(released(student, teacher, unpadded), F.att_kl(student, teacher))


def test_val_kl_padding_none_is_the_studys_released_value_relation():
    g = torch.Generator().manual_seed(2)
    student, teacher = torch.randn(B, H, L, 8, generator=g), torch.randn(B, H, L, 8, generator=g)
    ours = F.val_kl(student, teacher, _mask(), padding="none")
    assert ours.item() == pytest.approx(released_value_relation(student, teacher).item(), rel=1e-5)
    assert torch.equal(ours, F.val_kl(student, teacher))  # the mask is not read
    rows = F.val_kl(student, teacher, _mask(), padding="rows")
    assert len({ours.item(), rows.item(), F.val_kl(student, teacher, _mask()).item()}) == 3


def _projections(seed, width=8, self_relation=False):
    g = torch.Generator().manual_seed(seed)
    student_a = torch.randn(B, L, width, generator=g, requires_grad=True)
    student_b = student_a if self_relation else torch.randn(B, L, width, generator=g)
    teacher_a = torch.randn(B, L, width, generator=g)
    teacher_b = teacher_a if self_relation else torch.randn(B, L, width, generator=g)
    if not self_relation:
        student_b.requires_grad_(True)
    return (student_a, student_b), (teacher_a, teacher_b)


def _reference(name, student, teacher, padding):
    if name == "val_kl":
        s, t = (split_heads(side[0], H) for side in (student, teacher))
        return F.val_kl(s, t, _mask(), padding=padding)
    s, t = (attention_scores({"query": a, "key": b}, H) for a, b in (student, teacher))
    return F.att_kl(s, t, _mask(), padding=padding)


@pytest.mark.parametrize("padding", ["masked", "rows", "none"])
@pytest.mark.parametrize("name", ["att_kl", "val_kl"])
def test_the_fused_form_agrees_for_every_padding_mode(name, padding):
    student, teacher = _projections(3, self_relation=name == "val_kl")
    leaves = list(dict.fromkeys(student))
    expected = _reference(name, student, teacher, padding)
    expected_grads = torch.autograd.grad(expected, leaves)
    value = fused.att_kl(student, teacher, H, _mask(), padding=padding)
    grads = torch.autograd.grad(value, leaves)
    assert torch.allclose(value, expected, rtol=1e-5, atol=1e-7)
    assert all(torch.allclose(g, e, rtol=1e-4, atol=1e-7) for g, e in zip(grads, expected_grads))


@pytest.mark.parametrize("fused_losses", [True, False])
def test_an_objectives_padding_rows_term_is_the_reference_fused_or_not(fused_losses):
    teacher, student = _pair()
    extra = [f"objective.terms.{i}.params.padding=rows" for i in (0, 1)]
    terms = terms_of("att_kl+val_kl", teacher, student, extra=extra)
    assert [term.params["padding"] for term in terms] == ["rows", "rows"]
    objective = Objective(terms, student.config, teacher.config, fused=fused_losses)
    ids, mask = torch.randint(5, 60, (3, 9), generator=torch.Generator().manual_seed(0)), _mask9()
    s = _records(student, objective.needs("student"), ids, mask)
    with torch.no_grad():
        t = _records(teacher, objective.needs("teacher"), ids, mask)
    losses = objective(s, t, {"attention_mask": mask})
    pairs = [(1, 2), (2, 4)]
    att = sum(
        F.att_kl(attention_scores(s[i], 4), attention_scores(t[j], 4), mask, padding="rows")
        for i, j in pairs
    )
    val = sum(
        F.val_kl(split_heads(s[i]["value"], 4), split_heads(t[j]["value"], 4), mask, padding="rows")
        for i, j in pairs
    )
    assert torch.allclose(losses["att_kl"], att, rtol=1e-5)
    assert torch.allclose(losses["val_kl"], val, rtol=1e-5)


def _mask9():
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[1, 6:] = 0
    mask[2, 3:] = 0
    return mask


def test_a_padding_mode_outside_the_three_is_refused_in_one_line():
    teacher, student = _pair()
    with pytest.raises(ConfigError, match=r"params.padding='keys' must be one of masked, rows"):
        terms_of("att_kl", teacher, student, extra=["objective.terms.0.params.padding=keys"])
