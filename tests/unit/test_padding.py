"""A stage's `padding`: masked (kdbench's mean over real tokens) or tinybert, TinyBERT's released
average over every position of a batch padded to the maximum length, [PAD] included.

The released code (huawei-noah/Pretrained-Language-Model at 0598f02, TinyBERT/: task_distill.py
485-492, 950-961; general_distill.py 83-92, 426-436; transformer/modeling.py 406, 420, 830) pads
every example to max_seq_length, adds -10000 to the scores of padded keys, zeroes every score <=
-1e2 on each side with torch.where and takes torch's MSELoss (a mean over every entry) of the
[B, H, L, L] maps and of the [B, L, D] hidden states. `released_att_loss` and `released_rep_loss`
below write that out again, independently of kdbench's losses.
"""

from __future__ import annotations

import math

import pytest
import torch
from datasets import Dataset
from torch.nn import MSELoss

from kdbench.data.batches import make_loader
from kdbench.models.tiny import tiny_tokenizer
from kdbench.objectives import fused
from kdbench.objectives import losses as F
from kdbench.objectives.features import FeatureRecorder, attention_scores
from kdbench.objectives.losses import LOSSES
from kdbench.objectives.tensors import LOGITS, split_heads
from kdbench.objectives.terms import Objective
from tests.unit.test_terms import _pair, terms_of

B, L, H = 3, 7, 4


def _mask():
    mask = torch.ones(B, L, dtype=torch.long)
    mask[1, 4:] = 0
    mask[2, 1:] = 0  # only [CLS]
    return mask


def released_att_loss(student_q, student_k, teacher_q, teacher_k, input_mask, heads):
    """task_distill.py's att_loss of one layer pair from the projections: modeling.py's scores
    (Q K^T / sqrt(d) plus (1 - mask) * -10000 at padded keys), zeroed at or below -1e2 on each
    side, then MSELoss."""
    extended = (1.0 - input_mask[:, None, None, :].float()) * -10000.0

    def att(q, k):
        q, k = split_heads(q, heads), split_heads(k, heads)
        return torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1]) + extended

    student_att, teacher_att = att(student_q, student_k), att(teacher_q, teacher_k)
    student_att = torch.where(student_att <= -1e2, torch.zeros_like(student_att), student_att)
    teacher_att = torch.where(teacher_att <= -1e2, torch.zeros_like(teacher_att), teacher_att)
    return MSELoss()(student_att, teacher_att)


def released_rep_loss(student_rep, teacher_rep):
    """task_distill.py's rep_loss of one pair: MSELoss of the [B, L, D] states, [PAD] included."""
    return MSELoss()(student_rep, teacher_rep)


def test_att_mse_by_hand():
    """One head, three tokens, the last padded; one real score (-150) below the floor."""
    s = torch.tensor([[1.0, -150.0, 7.0], [2.0, 3.0, 8.0], [4.0, 5.0, 9.0]])[None, None]
    t = torch.tensor([[0.0, 2.0, -1.0], [2.0, 1.0, 6.0], [1.0, 5.0, 3.0]])[None, None]
    mask = torch.tensor([[1, 1, 0]])
    # kept: s' = [[1, 0, 0], [2, 3, 0], [4, 5, 0]], t' = [[0, 2, 0], [2, 1, 0], [1, 5, 0]]
    assert F.att_mse(s, t, mask, padding="tinybert").item() == pytest.approx((1 + 4 + 4 + 9) / 9)
    masked = (1 + 152**2 + 0 + 4) / 4  # the 2 x 2 real pairs, the -150 kept
    assert F.att_mse(s, t, mask).item() == pytest.approx(masked)


def test_hid_mse_by_hand():
    s, t = torch.tensor([[[1.0], [5.0]]]), torch.tensor([[[0.0], [2.0]]])
    mask = torch.tensor([[1, 0]])
    assert F.hid_mse(s, t, mask, padding="tinybert").item() == pytest.approx((1 + 9) / 2)
    assert F.hid_mse(s, t, mask).item() == pytest.approx(1.0)


def _projections(seed=0):
    """Student and teacher (Q, K) [B, L, H*8]; the student's first query row scaled so that some of
    its real scores fall below -1e2."""
    g = torch.Generator().manual_seed(seed)
    student = [torch.randn(B, L, H * 8, generator=g) for _ in range(2)]
    student[0][0, 0] *= 60.0
    student = [x.requires_grad_() for x in student]
    teacher = [torch.randn(B, L, H * 8, generator=g) for _ in range(2)]
    return student, teacher


@pytest.mark.parametrize("one_head_at_a_time", [False, True])
def test_att_mse_is_the_released_formula_in_value_and_gradient(one_head_at_a_time, monkeypatch):
    if one_head_at_a_time:
        monkeypatch.setattr(fused, "CHUNK_BYTES", 1)
    student, teacher = _projections()
    mask = _mask()
    released = released_att_loss(*student, *teacher, mask, H)
    scores = [attention_scores({"query": q, "key": k}, H) for q, k in (student, teacher)]
    assert (scores[0] <= -1e2).any()  # the floor is part of the comparison
    by_function = F.att_mse(*scores, mask, padding="tinybert")
    by_fused = fused.att_mse(tuple(student), tuple(teacher), H, mask, padding="tinybert")
    expected = torch.autograd.grad(released, student)
    for value in (by_function, by_fused):
        torch.testing.assert_close(value, released, rtol=1e-5, atol=1e-6)
        for grad, want in zip(torch.autograd.grad(value, student), expected, strict=True):
            torch.testing.assert_close(grad, want, rtol=1e-4, atol=1e-6)
    assert not torch.isclose(by_function, F.att_mse(*scores, mask))  # padding counts


def test_hid_mse_is_the_released_formula():
    g = torch.Generator().manual_seed(1)
    s, t = torch.randn(B, L, 16, generator=g), torch.randn(B, L, 16, generator=g)
    torch.testing.assert_close(
        F.hid_mse(s, t, _mask(), padding="tinybert"), released_rep_loss(s, t)
    )


def test_an_unknown_padding_is_refused():
    with pytest.raises(ValueError, match="att_mse: padding must be one of masked, tinybert"):
        F.att_mse(torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2, 2), padding="zeros")
    with pytest.raises(ValueError, match="hid_mse: padding must be one of masked, tinybert"):
        F.hid_mse(torch.zeros(1, 2, 2), torch.zeros(1, 2, 2), padding="zeros")


def test_the_stage_gives_the_padding_no_term_sets_it():
    takes = {name for name, entry in LOSSES.items() if entry.takes_padding}
    assert takes == {"att_mse", "hid_mse"}
    assert all("padding" not in LOSSES[name].param_rules for name in takes)
    # the score-map KLs take theirs as a term parameter, never from the stage
    set_by_terms = {name for name, entry in LOSSES.items() if "padding" in entry.param_rules}
    assert set_by_terms == {"att_kl", "val_kl"}


def _records(model, needs, batch):
    with FeatureRecorder(model, needs) as recorder:
        out = recorder.forward(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        return {**recorder.records, LOGITS: out.logits}


def _tinybert_batch():
    torch.manual_seed(0)
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[1, 6:] = 0
    mask[2, 3:] = 0
    return {"input_ids": torch.randint(5, 60, (3, 9)), "attention_mask": mask}


def _objective_run(padding: str, fused_losses: bool):
    """The tinybert objective's losses and student gradients on one padded batch."""
    teacher, student = _pair()
    student.eval()
    batch = _tinybert_batch()
    terms = terms_of("tinybert", teacher, student, init_layers=None)
    objective = Objective(
        terms, student.config, teacher.config, fused=fused_losses, padding=padding
    )
    s = _records(student, objective.needs("student"), batch)
    with torch.no_grad():
        t = _records(teacher, objective.needs("teacher"), batch)
    losses = objective(s, t, batch)
    losses["total"].backward()
    grads = {n: p.grad for n, p in student.named_parameters() if p.grad is not None}
    return losses, grads, (s, t, objective, batch)


def test_the_tinybert_objective_is_the_released_att_and_rep_loss():
    """Objective(padding=tinybert) on a padded batch is task_distill.py's att_loss + rep_loss over
    the same layer pairs (the embeddings' and the mapped layers', the student's through W_h)."""
    losses, _, (s, t, objective, batch) = _objective_run("tinybert", fused_losses=False)
    mask, heads = batch["attention_mask"], objective.student_heads
    with torch.no_grad():
        att = sum(
            released_att_loss(s[i]["query"], s[i]["key"], t[j]["query"], t[j]["key"], mask, heads)
            for i, j in [(1, 2), (2, 4)]
        )
        reps = {
            name: sum(
                released_rep_loss(objective.projections[name](s[i]["hidden"]), t[j]["hidden"])
                for i, j in pairs
            )
            for name, pairs in (("emb_mse", [(0, 0)]), ("hid_mse", [(1, 2), (2, 4)]))
        }
    torch.testing.assert_close(losses["att_mse"], att, rtol=1e-5, atol=1e-7)
    for name, rep in reps.items():
        torch.testing.assert_close(losses[name], rep, rtol=1e-5, atol=1e-7)


def test_fused_losses_give_the_unfused_values_and_gradients_under_tinybert_padding():
    (plain, plain_grads, _), (fast, fast_grads, _) = (
        _objective_run("tinybert", fused_losses=flag) for flag in (False, True)
    )
    for name in plain:
        torch.testing.assert_close(fast[name], plain[name], rtol=1e-5, atol=1e-7)
    assert plain_grads.keys() == fast_grads.keys() and plain_grads
    for name, grad in plain_grads.items():
        torch.testing.assert_close(fast_grads[name], grad, rtol=1e-4, atol=1e-6)
    masked, _, _ = _objective_run("masked", fused_losses=True)
    assert not torch.isclose(masked["total"], plain["total"])


def _encoded(lengths):
    encoded = Dataset.from_dict(
        {
            "input_ids": [list(range(5, 5 + n)) for n in lengths],
            "attention_mask": [[1] * n for n in lengths],
            "length": lengths,
            "labels": [0] * len(lengths),
        }
    )
    encoded.set_format("torch")
    return encoded


def test_batches_are_padded_to_the_maximum_length_only_when_asked(tmp_path):
    encoded, tokenizer = _encoded([3, 5, 9, 4, 6, 2, 7, 8]), tiny_tokenizer(tmp_path)
    padded = list(make_loader(encoded, tokenizer, 4, shuffle=True, pad_to=16))
    dynamic = list(make_loader(encoded, tokenizer, 4, shuffle=True))
    assert [tuple(b["input_ids"].shape) for b in padded] == [(4, 16), (4, 16)]
    assert [tuple(b["input_ids"].shape) for b in dynamic] == [
        (4, int(b["length"].max())) for b in dynamic
    ]
    for full, short in zip(padded, dynamic, strict=True):  # the same examples, more padding
        assert torch.equal(
            full["attention_mask"][:, : short["input_ids"].shape[1]], short["attention_mask"]
        )
        assert not full["attention_mask"][:, short["input_ids"].shape[1] :].any()


@pytest.mark.parametrize(
    "objective, padding, extra, reads",
    [
        ("tinybert", "masked", (), False),
        ("tinybert", "tinybert", (), True),  # att_mse, hid_mse take the stage's padding
        ("hid_cls", "tinybert", (), False),  # [CLS] states: no padded position read
        ("att_kl", "masked", ("objective.terms.0.params.padding=rows",), True),
        ("att_kl", "masked", (), False),
    ],
)
def test_an_objective_reads_padding_from_its_stage_or_its_terms(objective, padding, extra, reads):
    """One rule runs the teacher at every step (its features table holds real tokens only): a
    token-level term whose loss counts padded positions, by the stage's padding or its own."""
    teacher, student = _pair()
    terms = terms_of(objective, teacher, student, init_layers=None, extra=extra)
    made = Objective(terms, student.config, teacher.config, padding=padding)
    assert made.reads_padding is reads
