"""Tests for the `crd` loss (kdbench.objectives.contrastive): contrastive [CLS] distillation with
memory banks."""

from __future__ import annotations

import math

import pytest
import torch

from kdbench.errors import ConfigError, KdbenchError
from kdbench.objectives.contrastive import ContrastiveDistillation, crd

TRAIN_LABELS = torch.tensor([0, 1, 2, 0, 1, 2, 0, 0, 1, 2, 2, 0, 1, 0, 2, 1, 0, 2, 1, 0])


def make(
    student_width: int = 12, teacher_width: int = 16, labels: torch.Tensor = TRAIN_LABELS, **kw
) -> ContrastiveDistillation:
    kw = {"feat_dim": 8, "num_negatives": 5, **kw}
    return crd(student_width, teacher_width, labels, **kw)


def batch(idx: list[int], student_width: int = 12, teacher_width: int = 16, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    idx_t = torch.tensor(idx)
    return (
        torch.randn(len(idx), student_width, generator=g),
        torch.randn(len(idx), teacher_width, generator=g),
        idx_t,
    )


def test_crd_shape_and_gradients_reach_both_heads_and_student_only():
    term = make()
    s, t, idx = batch([0, 1, 2, 5])
    s.requires_grad_(True)
    loss = term(s, t, idx, TRAIN_LABELS[idx])
    assert loss.shape == () and loss.dtype == torch.float32 and torch.isfinite(loss)
    loss.backward()
    for head in (term.student_head, term.teacher_head):
        assert head.weight.grad is not None and head.weight.grad.abs().sum() > 0
    assert s.grad is not None and s.grad.abs().sum() > 0
    assert t.grad is None
    assert not term.memory_student.requires_grad and not term.memory_teacher.requires_grad


def test_crd_teacher_may_be_an_inference_tensor_and_bf16_inputs_give_float32():
    term = make()
    s, t, idx = batch([3, 4])
    with torch.inference_mode():
        t_inf = t.clone()
    loss = term(s.bfloat16().requires_grad_(True), t_inf, idx, TRAIN_LABELS[idx])
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    loss.backward()
    assert term.teacher_head.weight.grad is not None


def test_crd_negatives_never_share_the_anchor_class_and_cover_all_other_examples():
    term = make(num_negatives=200)
    labels = TRAIN_LABELS.repeat(3)  # every class appears many times in the batch
    seen: dict[int, set[int]] = {0: set(), 1: set(), 2: set()}
    for _ in range(20):
        neg = term.sample_negatives(labels)
        assert neg.shape == (len(labels), 200) and neg.dtype == torch.long
        assert (TRAIN_LABELS[neg] != labels.unsqueeze(1)).all()
        for c in seen:
            seen[c].update(neg[labels == c].flatten().tolist())
    for c, ids in seen.items():
        assert ids == set(torch.nonzero(TRAIN_LABELS != c).flatten().tolist())


def test_crd_negatives_with_unsorted_sparse_label_values():
    labels = torch.tensor([7, -1, 7, 3, -1, 3, 3])
    term = make(labels=labels, num_negatives=50)
    neg = term.sample_negatives(labels)
    assert (labels[neg] != labels.unsqueeze(1)).all()


def test_crd_memory_update_follows_momentum_formula_and_leaves_other_rows():
    term = make(momentum=0.5)
    before_s, before_t = term.memory_student.clone(), term.memory_teacher.clone()
    s, t, idx = batch([2, 7, 11])
    term.train()
    term(s, t, idx, TRAIN_LABELS[idx])
    with torch.no_grad():
        z_s = torch.nn.functional.normalize(term.student_head(s), dim=-1)
        z_t = torch.nn.functional.normalize(term.teacher_head(t), dim=-1)
    for before, after, z in (
        (before_s, term.memory_student, z_s),
        (before_t, term.memory_teacher, z_t),
    ):
        expected = torch.nn.functional.normalize(0.5 * before[idx] + 0.5 * z, dim=-1)
        torch.testing.assert_close(after[idx], expected)
        others = torch.ones(len(TRAIN_LABELS), dtype=torch.bool)
        others[idx] = False
        assert torch.equal(after[others], before[others])
        torch.testing.assert_close(after.norm(dim=-1), torch.ones(len(after)))


def test_crd_eval_mode_does_not_touch_the_banks():
    term = make().eval()
    before = term.memory_teacher.clone()
    s, t, idx = batch([0, 1])
    term(s, t, idx, TRAIN_LABELS[idx])
    assert torch.equal(term.memory_teacher, before)


def test_crd_aligned_representations_give_lower_loss_than_random():
    torch.manual_seed(0)
    width = 16
    term = make(student_width=width, teacher_width=width, feat_dim=16, num_negatives=10, seed=3)
    term.teacher_head.load_state_dict(term.student_head.state_dict())
    x = torch.randn(len(TRAIN_LABELS), width)
    all_idx = torch.arange(len(TRAIN_LABELS))
    with (
        torch.no_grad()
    ):  # banks hold the (identical) embeddings of every example, as after training
        term.update_memory(
            all_idx, term._embed(term.student_head, x), term._embed(term.teacher_head, x)
        )
        term.update_memory(
            all_idx, term._embed(term.student_head, x), term._embed(term.teacher_head, x)
        )
    term.eval()
    idx = torch.tensor([0, 1, 2, 3, 4, 5])
    aligned = term(x[idx], x[idx], idx, TRAIN_LABELS[idx])
    random = term(x[idx], torch.randn(len(idx), width), idx, TRAIN_LABELS[idx])
    assert aligned < random


def test_crd_deterministic_given_seed():
    s, t, idx = batch([0, 4, 9, 13])
    losses = []
    for _ in range(2):
        torch.manual_seed(123)  # the heads' init uses the global RNG; banks and sampler use `seed`
        term = make(seed=5)
        losses.append([term(s, t, idx, TRAIN_LABELS[idx]) for _ in range(3)])
    for a, b in zip(*losses):
        assert torch.equal(a, b)
    torch.manual_seed(123)
    other = make(seed=6)
    assert not torch.equal(other.memory_teacher, make(seed=5).memory_teacher)


def test_crd_regression_labels_raise():
    with pytest.raises(ValueError, match="STS-B is regression"):
        make(labels=torch.rand(10))


def test_crd_single_class_raises():
    with pytest.raises(ValueError, match="at least two classes") as info:
        make(labels=torch.zeros(10, dtype=torch.long))
    assert isinstance(info.value, ConfigError)


def test_crd_state_dict_holds_the_banks():
    term = make()
    state = term.state_dict()
    assert {"memory_student", "memory_teacher"} <= set(state)
    assert state["memory_student"].shape == (len(TRAIN_LABELS), 8)
    assert "class_order" not in state
    clone = make(seed=99)
    clone.load_state_dict(state)
    assert torch.equal(clone.memory_teacher, term.memory_teacher)


def test_crd_hand_computed_info_nce():
    # Two examples of different classes: with K = 1 the negative of each is the other one.
    labels = torch.tensor([0, 1])
    term = ContrastiveDistillation(2, 2, labels, feat_dim=2, num_negatives=1, temperature=0.5)
    with torch.no_grad():
        for head in (term.student_head, term.teacher_head):
            head.weight.copy_(torch.eye(2))
            head.bias.zero_()
        term.memory_student.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
        term.memory_teacher.copy_(torch.tensor([[0.6, 0.8], [-1.0, 0.0]]))
    student = torch.tensor([[3.0, 4.0], [0.0, -2.0]])  # unit: (0.6, 0.8), (0, -1)
    teacher = torch.tensor([[1.0, 0.0], [1.0, 1.0]])  # unit: (1, 0), (0.7071, 0.7071)
    idx = torch.tensor([0, 1])
    assert term.sample_negatives(labels).tolist() == [[1], [0]]
    loss = term(student, teacher, idx, labels)

    r = 2**-0.5
    z_s = [(0.6, 0.8), (0.0, -1.0)]
    z_t = [(1.0, 0.0), (r, r)]
    bank_s = [(1.0, 0.0), (0.0, 1.0)]
    bank_t = [(0.6, 0.8), (-1.0, 0.0)]
    neg = [1, 0]

    def dot(a, b):
        return a[0] * b[0] + a[1] * b[1]

    def nll_first(logits):
        return -torch.log_softmax(torch.tensor(logits) / 0.5, dim=0)[0]

    expected = (
        sum(
            nll_first([dot(z_s[i], z_t[i]), dot(z_s[i], bank_t[neg[i]])])
            + nll_first([dot(z_t[i], z_s[i]), dot(z_t[i], bank_s[neg[i]])])
            for i in range(2)
        )
        / 2
    )
    torch.testing.assert_close(loss, expected.float())


def test_crd_sampler_state_travels_with_the_state_dict():
    labels = torch.tensor([0, 1, 0, 1, 1, 0, 1, 0])
    a = ContrastiveDistillation(4, 4, labels, feat_dim=4, num_negatives=3, seed=5)
    a.sample_negatives(labels[:2])
    b = ContrastiveDistillation(4, 4, labels, feat_dim=4, num_negatives=3, seed=5)
    b.load_state_dict(a.state_dict())
    assert torch.equal(a.sample_negatives(labels[:4]), b.sample_negatives(labels[:4]))


def test_crd_as_released_is_binary_nce_with_the_first_batchs_constant_z():
    module = ContrastiveDistillation(
        2,
        2,
        torch.tensor([0, 0, 1, 1]),
        feat_dim=2,
        num_negatives=2,
        temperature=0.5,
        momentum=0.5,
        form="nce",
    )
    bound = 1 / (2 / 3) ** 0.5
    assert module.memory_student.abs().max() <= bound
    assert module.normalisers.tolist() == [-1.0, -1.0]
    with torch.no_grad():
        for head in (module.student_head, module.teacher_head):
            head.weight.copy_(torch.eye(2))
            head.bias.zero_()
        module.memory_student.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [-1.0, 0.0]]))
        module.memory_teacher.copy_(torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.8, 0.6], [0.0, -1.0]]))
    banks = (module.memory_student.clone(), module.memory_teacher.clone())
    module.sample_negatives = lambda labels: torch.tensor([[2, 3], [0, 1]])
    student = torch.tensor([[3.0, 4.0], [1.0, 0.0]])
    teacher = torch.tensor([[0.0, 2.0], [-1.0, 0.0]])
    idx = torch.tensor([0, 2])
    loss = module(student, teacher, idx, torch.tensor([0, 1]))

    z = {"s": [[0.6, 0.8], [1.0, 0.0]], "t": [[0.0, 1.0], [-1.0, 0.0]]}
    contrast = [[0, 2, 3], [2, 0, 1]]
    expected = 0.0
    for anchor, bank in (("s", banks[1]), ("t", banks[0])):  # against the other side's bank
        scores = [
            [
                math.exp(sum(a * b for a, b in zip(z[anchor][i], bank[c].tolist())) / 0.5)
                for c in contrast[i]
            ]
            for i in range(2)
        ]
        normaliser = sum(map(sum, scores)) / 6 * 4  # the first batch's mean times N
        q = 2 / 4
        total = 0.0
        for row in scores:
            p = [s / normaliser for s in row]
            total += math.log(p[0] / (p[0] + q + 1e-7))
            total += sum(math.log(q / (pj + q + 1e-7)) for pj in p[1:])
        expected += -total / 2 / 2  # batch mean, then the two directions averaged
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    z_first = module.normalisers.clone()
    module(student, teacher, idx, torch.tensor([0, 1]))
    assert torch.equal(module.normalisers, z_first)  # constant after the first batch


def sampler_state(module: ContrastiveDistillation) -> torch.Tensor:
    return module.get_extra_state()["cpu"]


def test_crd_draws_on_the_cpu_whatever_the_device_and_a_move_keeps_the_draws():
    """A module moved to another device (meta stands for a GPU here) goes on with the same stream
    of draws: the same seed gives the same negatives on every device."""
    on_cpu, moved = make(seed=5), make(seed=5)
    on_cpu.sample_negatives(TRAIN_LABELS[:4])
    moved.sample_negatives(TRAIN_LABELS[:4])
    moved.to("meta")
    assert moved.sampler.device == torch.device("cpu")
    assert torch.equal(sampler_state(moved), sampler_state(on_cpu))
    drawn = moved.sample_negatives(TRAIN_LABELS[:4].to("meta"))  # meta: no value is read back
    on_cpu.sample_negatives(TRAIN_LABELS[:4])
    assert drawn.device.type == "meta" and drawn.shape == (4, 5)
    assert torch.equal(sampler_state(moved), sampler_state(on_cpu))


def test_crd_sends_its_draws_to_the_device_without_making_the_host_wait(monkeypatch):
    module = make().to("meta")
    labels = TRAIN_LABELS[:4].to("meta")
    real_to, copies = torch.Tensor.to, []

    def spy(tensor, *args, **kwargs):
        if tensor.device.type == "cpu":
            copies.append(kwargs.get("non_blocking", False))
        return real_to(tensor, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", spy)
    module.sample_negatives(labels)
    assert copies == [True]


@pytest.mark.filterwarnings("ignore:for .* copying from a non-meta parameter")
def test_crd_a_sampler_state_saved_on_one_device_resumes_on_another():
    saved = make(seed=5)
    saved.sample_negatives(TRAIN_LABELS[:4])
    resumed = make(seed=9).to("meta")
    resumed.load_state_dict(saved.state_dict())
    assert torch.equal(sampler_state(resumed), sampler_state(saved))
    back_on_cpu = make(seed=9)
    back_on_cpu.set_extra_state(resumed.get_extra_state())
    assert torch.equal(
        back_on_cpu.sample_negatives(TRAIN_LABELS[:6]), saved.sample_negatives(TRAIN_LABELS[:6])
    )


@pytest.mark.parametrize(
    "state",
    [{"cuda:0": torch.zeros(16, dtype=torch.uint8)}, {"cpu": torch.zeros(16, dtype=torch.uint8)}],
)
def test_crd_refuses_a_sampler_state_it_cannot_continue(state):
    module = make()
    before = sampler_state(module).clone()
    with pytest.raises(KdbenchError, match="not a CPU generator's") as info:
        module.set_extra_state(state)
    assert "\n" not in str(info.value) and torch.equal(sampler_state(module), before)
