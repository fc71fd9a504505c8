"""Objectives from config: layer mappings, validation, and terms computed from hooked features."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from kdbench.errors import ConfigError
from kdbench.models.layers import resolve_pairs
from kdbench.objectives import losses as F
from kdbench.objectives.features import FeatureRecorder, attention_scores
from kdbench.objectives.tensors import LOGITS, split_heads
from kdbench.objectives.term_specs import build_terms
from kdbench.objectives.terms import Objective
from tests.helpers import compose_config, tiny_models


def test_mappings():
    assert resolve_pairs("init", [2, 4, 6], 3, 6) == [(1, 2), (2, 4), (3, 6)]
    assert resolve_pairs("init", None, 3, 12) == [(1, 4), (2, 8), (3, 12)]  # random init: uniform
    assert resolve_pairs("uniform", [1, 2, 3], 3, 12) == [(1, 4), (2, 8), (3, 12)]
    assert resolve_pairs("last", [1, 2, 3], 3, 12) == [(3, 12)]
    assert resolve_pairs("embeddings", None, 3, 12) == [(0, 0)]
    assert resolve_pairs([1, 8, 12], None, 3, 12) == [(1, 1), (2, 8), (3, 12)]
    with pytest.raises(ConfigError, match="unknown layer mapping 'top'"):
        resolve_pairs("top", None, 3, 12)
    with pytest.raises(ConfigError, match="strictly ascending"):
        resolve_pairs([8, 1, 12], None, 3, 12)


@pytest.mark.parametrize("init", [[1, 2, 3], [1, 8, 12], [4, 8, 12], None])
def test_fixed_mapping_reads_every_kth_teacher_layer_whatever_the_init(init):
    assert resolve_pairs("fixed", init, 3, 12) == [(1, 4), (2, 8), (3, 12)]
    six_layer_init = [1, 2, 3] if init else None
    assert resolve_pairs("fixed", six_layer_init, 3, 6) == [(1, 2), (2, 4), (3, 6)]


def test_fixed_mapping_composes_for_attention_objectives():
    teacher, student = _pair()
    for objective in ("att_kl", "att_mse"):
        terms = terms_of(
            objective, teacher, student, init_layers=(1, 2), extra=["objective.mapping=fixed"]
        )
        assert [term.pairs for term in terms] == [[(1, 2), (2, 4)]]


def _pair(student="tiny", heads=None):
    cfg = compose_config(["teacher=tiny", f"student={student}"])
    if heads:
        cfg.student.num_heads = heads
    teacher, student = tiny_models(cfg)
    return teacher.eval(), student


def terms_of(objective, teacher, student, init_layers=(2, 4), regression=False, extra=()):
    cfg = compose_config([f"objective={objective}", *extra])
    specs = OmegaConf.to_container(cfg.objective.terms, resolve=True)
    return build_terms(
        cfg.objective.name,
        specs,
        cfg.objective.mapping,
        list(init_layers) if init_layers else None,
        student.config,
        teacher.config,
        regression=regression,
        agnostic=False,
        teacher_has_mlm_head=False,
    )


@pytest.mark.parametrize("objective", ["hid_cls", "hid_seq"])
def test_released_hidden_terms_add_the_embedding_pair_and_learn_no_projection(objective):
    teacher, student = _pair()
    (default,) = terms_of(objective, teacher, student)
    assert default.pairs == [(1, 2), (2, 4)] and default.projected
    (released,) = terms_of(
        objective,
        teacher,
        student,
        extra=["objective.terms.0.projection=false", "objective.terms.0.embedding_pair=true"],
    )
    assert released.pairs == [(0, 0), (1, 2), (2, 4)] and not released.projected
    assert not list(Objective([released], student.config, teacher.config).parameters())


def test_raw_hidden_comparison_needs_equal_widths():
    teacher, student = _pair(student="3x384")
    message = "projection=false compares raw hidden states, which needs the student's width 384"
    with pytest.raises(ConfigError, match=message + " to equal the teacher's 32"):
        terms_of(
            "hid_seq",
            teacher,
            student,
            init_layers=(1, 2, 3),
            extra=["objective.terms.0.projection=false"],
        )


def test_head_mismatch_suggests_minilm_v2():
    teacher, student = _pair(heads=2)
    with pytest.raises(ConfigError, match="student has 2 heads and the teacher 4.*minilm_v2"):
        terms_of("att_kl+val_kl", teacher, student)
    assert terms_of("minilm_v2", teacher, student)  # relations work for any head count


def test_contrastive_refuses_regression():
    teacher, student = _pair()
    with pytest.raises(ConfigError, match="needs a classification task"):
        terms_of("hid_cls_contrast", teacher, student, regression=True)


def test_weights_are_overridable_and_terms_named():
    teacher, student = _pair()
    terms = terms_of("att_kl+val_kl", teacher, student, extra=["objective.terms.0.weight=2"])
    assert [(t.name, t.weight, t.pairs) for t in terms] == [
        ("att_kl", 2.0, [(1, 2), (2, 4)]),
        ("val_kl", 1.0, [(1, 2), (2, 4)]),
    ]
    tiny = terms_of("tinybert", teacher, student, init_layers=None)
    expected = [("emb_mse", [(0, 0)]), ("att_mse", [(1, 2), (2, 4)]), ("hid_mse", [(1, 2), (2, 4)])]
    assert [(t.name, t.pairs) for t in tiny] == expected


def _records(model, needs, ids, mask):
    with FeatureRecorder(model, needs) as recorder:
        out = recorder.forward(input_ids=ids, attention_mask=mask)
        return {**recorder.records, LOGITS: out.logits}


@pytest.fixture
def batch():
    torch.manual_seed(0)
    ids = torch.randint(5, 60, (3, 9))
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[1, 6:] = 0
    mask[2, 3:] = 0
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "labels": torch.tensor([0, 1, 1]),
        "example": torch.arange(3),
    }


def test_att_kl_val_kl_terms_equal_the_functions_on_eager_features(batch):
    teacher, student = _pair()
    terms = terms_of("att_kl+val_kl", teacher, student)
    objective = Objective(terms, student.config, teacher.config)
    s = _records(student, objective.needs("student"), batch["input_ids"], batch["attention_mask"])
    with torch.no_grad():
        t = _records(
            teacher, objective.needs("teacher"), batch["input_ids"], batch["attention_mask"]
        )
    losses = objective(s, t, batch)
    mask = batch["attention_mask"]
    expected_att = sum(
        F.att_kl(attention_scores(s[i], 4), attention_scores(t[j], 4), mask)
        for i, j in [(1, 2), (2, 4)]
    )
    expected_val = sum(
        F.val_kl(split_heads(s[i]["value"], 4), split_heads(t[j]["value"], 4), mask)
        for i, j in [(1, 2), (2, 4)]
    )
    assert torch.allclose(losses["att_kl"], expected_att) and torch.allclose(
        losses["val_kl"], expected_val
    )
    assert torch.allclose(losses["total"], expected_att + expected_val)
    losses["total"].backward()
    assert all(p.grad is None for p in teacher.parameters())
    assert student.bert.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0


def test_identity_projection_makes_hidden_loss_zero_for_a_copy(batch):
    teacher, _ = _pair()
    terms = terms_of("hid_seq", teacher, teacher, init_layers=(1, 2, 3, 4))
    objective = Objective(terms, teacher.config, teacher.config)
    with torch.no_grad():
        records = _records(
            teacher, objective.needs("teacher"), batch["input_ids"], batch["attention_mask"]
        )
        assert objective(records, records, batch)["hid_mse"].item() == pytest.approx(0.0, abs=1e-10)


def test_last_layer_stops_early_unless_logits_are_needed():
    teacher, student = _pair()
    att = Objective(terms_of("att_kl", teacher, student), student.config, teacher.config)
    assert (att.last_layer("student"), att.last_layer("teacher")) == (2, 4)
    distil = Objective(terms_of("distilbert", teacher, student), student.config, teacher.config)
    assert distil.uses_logits and distil.last_layer("teacher") is None


@pytest.mark.parametrize(
    "objective_name", ["att_kl+val_kl", "att_mse+hid_seq", "minilm_v2", "tinybert"]
)
def test_recomputed_losses_give_the_same_losses_and_gradients(batch, objective_name):
    """trainer.recompute_losses trades memory for time only: losses and gradients are unchanged."""
    teacher, student = _pair()
    results = []
    for recompute in (False, True):
        student.zero_grad(set_to_none=True)
        torch.manual_seed(0)
        objective = Objective(
            terms_of(objective_name, teacher, student, init_layers=None),
            student.config,
            teacher.config,
            recompute=recompute,
        )
        s = _records(
            student, objective.needs("student"), batch["input_ids"], batch["attention_mask"]
        )
        with torch.no_grad():
            t = _records(
                teacher, objective.needs("teacher"), batch["input_ids"], batch["attention_mask"]
            )
        losses = objective(s, t, batch)
        losses["total"].backward()
        grads = {
            n: p.grad.clone()
            for n, p in [*student.named_parameters(), *objective.named_parameters()]
            if p.grad is not None
        }
        results.append(({k: v.item() for k, v in losses.items()}, grads))
    (plain_losses, plain_grads), (recomputed_losses, recomputed_grads) = results
    assert recomputed_losses == plain_losses
    assert plain_grads.keys() == recomputed_grads.keys() and plain_grads
    assert all(torch.equal(plain_grads[n], recomputed_grads[n]) for n in plain_grads)


def test_value_relations_scaled_by_the_teacher_run_unfused():
    teacher, student = _pair()
    own, by_teacher = (
        terms_of(
            "att_kl+val_kl", teacher, student, extra=[f"objective.terms.1.params.scale_by={s}"]
        )
        for s in ("own", "teacher")
    )
    objective = Objective(own, student.config, teacher.config)
    assert objective._runs_fused(own[1]) and not objective._runs_fused(by_teacher[1])
    assert by_teacher[1].params == {"scale_by": "teacher", "padding": "masked"}


def test_soft_targets_at_every_attended_token_and_mlm_at_the_masked():
    teacher, student = _pair()
    setting = dict(regression=False, agnostic=True, teacher_has_mlm_head=True)
    terms = build_terms(
        "distilbert",
        [
            {
                "name": "mlm_kd",
                "loss": "mlm_kd",
                "feature": "logits",
                "weight": 5.0,
                "params": {"temperature": 2.0},
                "positions": "attended",
            },
            {"name": "mlm", "loss": "mlm", "feature": "logits", "weight": 2.0},
        ],
        "last",
        None,
        student.config,
        teacher.config,
        **setting,
    )
    objective = Objective(terms, student.config, teacher.config)
    assert objective.logit_positions == "attended"
    attention = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    torch.manual_seed(0)
    s, t = torch.randn(5, 7), torch.randn(5, 7)  # attended: (0,0) (0,1) (0,2) (1,0) (1,1)
    labels = torch.tensor([3, 6])  # masked: (0,1) and (1,0), the 2nd and 4th attended tokens
    batch = {
        "attention_mask": attention,
        "mlm_positions": torch.tensor([1, 4]),
        "labels": labels,
        "attended_positions": torch.tensor([0, 1, 2, 4, 5]),
        "masked_in_attended": torch.tensor([1, 3]),
    }
    losses = objective({LOGITS: s}, {LOGITS: t}, batch)
    soft = -(torch.softmax(t / 2, -1) * torch.log_softmax(s / 2, -1)).sum(-1).mean() * 4
    hard = torch.nn.functional.cross_entropy(s[[1, 3]], labels)  # (0,1) and (1,0) are masked
    assert torch.allclose(losses["mlm_kd"], 5 * soft) and torch.allclose(losses["mlm"], 2 * hard)
    with pytest.raises(ConfigError, match="positions=attended reads MLM soft targets"):
        build_terms(
            "x",
            [{"loss": "mlm", "feature": "logits", "positions": "attended"}],
            "last",
            None,
            student.config,
            teacher.config,
            **setting,
        )


def test_the_teachers_an_mlm_objective_is_sent_to_have_an_mlm_head():
    from kdbench.planning.hydra_config import group_options

    teacher, student = _pair()
    with pytest.raises(ConfigError, match="has no MLM head") as refused:
        build_terms(
            "vanilla_kd",
            [{"name": "mlm", "loss": "mlm", "feature": "logits", "weight": 1.0}],
            "last",
            None,
            student.config,
            teacher.config,
            regression=False,
            agnostic=True,
            teacher_has_mlm_head=False,
        )
    named = [t for t in group_options("teacher") if t in str(refused.value)]
    assert named
    for option in named:  # each one a user can take with an MLM objective
        assert compose_config([f"teacher={option}"]).teacher.has_mlm_head, option
