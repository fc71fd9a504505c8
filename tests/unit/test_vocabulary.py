"""The MLM logits' losses a chunk of rows at a time (`objectives.vocabulary`, what `mlm_kd` and
`mlm` run) equal their autograd definitions, and keep no float32 [M, V] tensor for the
backward."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as TF

from kdbench.objectives import losses as F
from kdbench.objectives import vocabulary

M, V = 37, 101


def reference_mlm_kd(student, teacher, temperature):
    """DistilBERT's soft cross-entropy through autograd, as `mlm_kd` defines it."""
    target = TF.softmax(teacher.float().detach() / temperature, dim=-1)
    log_student = TF.log_softmax(student.float() / temperature, dim=-1)
    return -(target * log_student).sum(-1).mean() * temperature**2


def reference_mlm(student, labels):
    return TF.cross_entropy(student.float(), labels.long())


def logits(seed: int, dtype=torch.float32, scale: float = 3.0):
    generator = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(M, V, generator=generator)).to(dtype)


def labels_with_ignored():
    labels = torch.randint(0, V, (M,), generator=torch.Generator().manual_seed(2))
    labels[[3, 20]] = vocabulary.IGNORE_INDEX
    return labels


def value_and_grad(loss_fn, student):
    student = student.clone().requires_grad_()
    value = loss_fn(student)
    value.backward()
    return value.detach(), student.grad


CASES = {
    "mlm_kd T=1": (
        lambda s: F.mlm_kd(s, logits(1), temperature=1.0),
        lambda s: reference_mlm_kd(s, logits(1), 1.0),
    ),
    "mlm_kd T=2": (
        lambda s: F.mlm_kd(s, logits(1), temperature=2.0),
        lambda s: reference_mlm_kd(s, logits(1), 2.0),
    ),
    "mlm": (
        lambda s: F.mlm(s, None, labels_with_ignored()),
        lambda s: reference_mlm(s, labels_with_ignored()),
    ),
}


@pytest.mark.parametrize("rows_per_chunk", [1, 5, M])
@pytest.mark.parametrize("name", sorted(CASES))
def test_same_loss_and_gradient_as_the_autograd_definition(name, rows_per_chunk, monkeypatch):
    monkeypatch.setattr(vocabulary, "CHUNK_BYTES", 4 * V * rows_per_chunk)
    chunked, reference = CASES[name]
    value, grad = value_and_grad(chunked, logits(0))
    expected_value, expected_grad = value_and_grad(reference, logits(0))
    assert value.dtype == torch.float32
    torch.testing.assert_close(value, expected_value, rtol=1e-6, atol=0)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("name", sorted(CASES))
def test_bf16_logits_give_the_float32_value_and_the_float32_gradient_in_bf16(name):
    chunked, reference = CASES[name]
    student = logits(0, torch.bfloat16)
    value, grad = value_and_grad(chunked, student)
    expected_value, expected_grad = value_and_grad(reference, student.float())
    assert grad.dtype == torch.bfloat16
    torch.testing.assert_close(value, expected_value, rtol=1e-6, atol=0)
    # float32 rounding may tip an element to the neighbouring bf16 value: one bf16 step at most
    torch.testing.assert_close(grad.float(), expected_grad, rtol=2**-8, atol=1e-7)


def bytes_kept_for_backward(loss_fn, student) -> int:
    kept = {}

    def keep(tensor):
        kept[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    student = student.clone().requires_grad_()
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        loss_fn(student)
    return sum(kept.values())


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_backward_keeps_one_gradient_in_the_logits_dtype(name):
    chunked, reference = CASES[name]
    student = logits(0, torch.bfloat16)
    assert bytes_kept_for_backward(chunked, student) == M * V * 2
    assert bytes_kept_for_backward(reference, student) >= M * V * 4  # a float32 log-softmax


def test_the_callers_float32_logits_are_left_as_they_were():
    student, teacher = logits(0), logits(1)
    before = (student.clone(), teacher.clone())
    F.mlm_kd(student.requires_grad_(), teacher, temperature=2.0).backward()
    assert torch.equal(student.detach(), before[0]) and torch.equal(teacher, before[1])


def test_no_grad_mode_gives_the_value_and_keeps_nothing():
    with torch.no_grad():
        value = F.mlm_kd(logits(0), logits(1), temperature=2.0)
    assert value.grad_fn is None
    expected = reference_mlm_kd(logits(0), logits(1), 2.0)
    torch.testing.assert_close(value, expected, rtol=1e-6, atol=0)
