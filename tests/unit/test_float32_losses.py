"""Every loss computes in float32 under a bf16 autocast region: its matmuls (forward and backward)
run in float32, and its value and gradient are those of the float32 computation on the same
features."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kdbench.objectives import fused
from kdbench.objectives import losses as F
from kdbench.objectives.features import attention_scores
from kdbench.objectives.tensors import split_heads

B, L, H, D = 2, 6, 2, 8
MATMULS = {
    torch.ops.aten.mm.default,
    torch.ops.aten.bmm.default,
    torch.ops.aten.addmm.default,
    torch.ops.aten.baddbmm.default,
    torch.ops.aten.mv.default,
    torch.ops.aten.dot.default,
}


class MatmulDtypes(TorchDispatchMode):
    """Records the dtype of every matmul dispatched while active."""

    def __init__(self):
        super().__init__()
        self.dtypes: list[torch.dtype] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in MATMULS:
            self.dtypes.append(args[0].dtype)
        return func(*args, **(kwargs or {}))


def _mask():
    mask = torch.ones(B, L, dtype=torch.long)
    mask[1, 4:] = 0
    return mask


def _scores(x):
    """The attention scores (the feature a reference-path term reads) of queries and keys, the two
    halves of one [B, L, D] tensor."""
    query, key = _halves(x)
    return attention_scores({"query": query, "key": key}, H)


def _halves(x):
    """Queries and keys: the two halves of one [B, L, D] tensor."""
    return x[..., : D // 2], x[..., D // 2 :]


# name -> (the loss of (student features, teacher features), the features' shape, whether it
# multiplies matrices)
CASES = {
    "kd": (lambda s, t: F.kd(s, t, torch.tensor([0, 1]), temperature=2.0), (B, 3), False),
    "mlm_kd": (lambda s, t: F.mlm_kd(s, t, temperature=2.0), (5, 11), True),  # a dot product
    "mlm": (lambda s, t: F.mlm(s, t, torch.tensor([1, 2, 3, 4, 5])), (5, 11), False),
    "att_mse": (lambda s, t: F.att_mse(s, t, _mask()), (B, H, L, L), False),
    "att_kl": (lambda s, t: F.att_kl(s, t, _mask()), (B, H, L, L), False),
    "att_kl of recorded projections": (
        lambda s, t: F.att_kl(_scores(s), _scores(t), _mask()),
        (B, L, D),
        True,
    ),
    "val_kl": (
        lambda s, t: F.val_kl(split_heads(s, H), split_heads(t, H), _mask()),
        (B, L, D),
        True,
    ),
    "relation_kl": (lambda s, t: F.relation_kl(s, t, H, _mask()), (B, L, D), True),
    "hid_mse": (lambda s, t: F.hid_mse(s, t, _mask()), (B, L, D), False),
    "cosine": (lambda s, t: F.cosine(s, t, _mask()), (B, L, D), False),
    "fused.att_kl": (
        lambda s, t: fused.att_kl(_halves(s), _halves(t), H, _mask()),
        (B, L, D),
        True,
    ),
    "fused.att_mse": (
        lambda s, t: fused.att_mse(_halves(s), _halves(t), H, _mask()),
        (B, L, D),
        True,
    ),
    "fused.val_kl": (lambda s, t: fused.att_kl((s, s), (t, t), H, _mask()), (B, L, D), True),
}


def _features(shape):
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(shape, generator=g).to(torch.bfloat16) for _ in range(2))


@pytest.mark.parametrize("name", sorted(CASES))
def test_under_bf16_autocast_a_loss_multiplies_in_float32_and_equals_its_float32_computation(name):
    loss_fn, shape, multiplies = CASES[name]
    student, teacher = _features(shape)
    reference_input = student.float().requires_grad_()
    reference = loss_fn(reference_input, teacher.float())
    reference.backward()
    autocast_input = student.clone().requires_grad_()
    with MatmulDtypes() as recorded:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = loss_fn(autocast_input, teacher)
        loss.backward()  # outside the region, as the training loop calls it
    assert loss.dtype == torch.float32 and torch.equal(loss.detach(), reference.detach())
    assert torch.equal(autocast_input.grad, reference_input.grad.to(torch.bfloat16))
    assert set(recorded.dtypes) <= {torch.float32}
    assert bool(recorded.dtypes) == multiplies
