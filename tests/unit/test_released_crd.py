"""The `crd` term as the study's released driver runs it (mainlp/How-to-distill-your-BERT,
task_specific_distillation/fairseq/criterions/sentence_prediction_tiny.py): every layer's [CLS]
with the embeddings' (`layers: every`, :253-260) and negatives distinct within a row where the
other-class pool allows (`params.replacement: false`, :78, :114), against hand checks and small
independent re-implementations."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
import torch

from kdbench.errors import ConfigError
from kdbench.objectives.contrastive import ContrastiveDistillation
from kdbench.objectives.terms import Objective
from tests.unit.test_terms import _pair, terms_of

LABELS = torch.tensor([0, 1, 2, 0, 1, 2, 0, 0, 1, 2, 2, 0, 1, 0, 2, 1, 0, 2, 1, 0])


def _module(labels=LABELS, num_negatives=5, replacement=False, seed=3):
    return ContrastiveDistillation(
        4, 4, labels, feat_dim=4, num_negatives=num_negatives, replacement=replacement, seed=seed
    )


def released_floyd(labels: list[int], anchor_class: int, uniforms: list[float]) -> list[int]:
    """K distinct other-class example ids from K uniforms in plain Python: the pool in kdbench's
    order (class by class, ids ascending), Floyd's draw over its positions."""
    pool = [
        i for i in sorted(range(len(labels)), key=labels.__getitem__) if labels[i] != anchor_class
    ]
    count, chosen = len(uniforms), []
    for i, u in enumerate(uniforms):
        top = len(pool) - count + i
        drawn = min(int(u * (top + 1)), top)
        chosen.append(top if drawn in chosen else drawn)
    return [pool[p] for p in chosen]


def test_distinct_negatives_repeat_nowhere_in_a_row_and_are_of_other_classes():
    module = _module(num_negatives=11)  # the smallest other-class pool holds 12
    assert module.distinct
    anchors = LABELS.repeat(50)
    drawn = module.sample_negatives(anchors)
    assert all(len(set(row.tolist())) == 11 for row in drawn)
    assert not (LABELS[drawn] == anchors[:, None]).any()


def test_distinct_negatives_are_floyds_draw_from_the_samplers_uniforms():
    module = _module(num_negatives=4)
    uniforms = torch.rand(6, 4, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    anchors = LABELS[:6]
    drawn = module.sample_negatives(anchors)
    expected = [
        released_floyd(LABELS.tolist(), int(c), u.tolist()) for c, u in zip(anchors, uniforms)
    ]
    assert drawn.tolist() == expected


def test_every_k_subset_is_equally_likely():
    labels = torch.tensor([0] * 5 + [1] * 5)  # class 0's pool: the five examples 5..9
    module = _module(labels, num_negatives=3)
    drawn = module.sample_negatives(torch.zeros(30000, dtype=torch.long))
    subsets = Counter(tuple(sorted(row.tolist())) for row in drawn)
    assert set(subsets) == set(itertools.combinations(range(5, 10), 3))
    assert all(abs(n / 30000 - 0.1) < 0.01 for n in subsets.values())


def test_a_pool_no_larger_than_k_draws_with_replacement_as_released():
    """sentence_prediction_tiny.py:78: replace = nce_k >= the smallest other-class pool (12)."""
    distinct, fallback = _module(num_negatives=11), _module(num_negatives=12)
    assert distinct.distinct and not fallback.distinct
    with_replacement = _module(num_negatives=12, replacement=True)
    anchors = LABELS[:8]
    assert torch.equal(
        fallback.sample_negatives(anchors), with_replacement.sample_negatives(anchors)
    )


def test_distinct_draws_advance_the_sampler_as_draws_with_replacement_and_resume():
    distinct, plain = _module(), _module(replacement=True)
    distinct.sample_negatives(LABELS[:7])
    plain.sample_negatives(LABELS[:7])
    assert torch.equal(distinct.sampler.get_state(), plain.sampler.get_state())
    resumed = _module(seed=99)
    resumed.load_state_dict(distinct.state_dict())
    assert torch.equal(resumed.sample_negatives(LABELS), distinct.sample_negatives(LABELS))


def test_every_layer_reads_each_sides_embeddings_and_every_layers_cls_in_order():
    teacher, student = _pair()
    student.eval()
    extra = ["objective.terms.0.layers=every", "objective.terms.0.params.replacement=false"]
    (term,) = terms_of("hid_cls_contrast", teacher, student, extra=extra)
    depths = (student.config.num_hidden_layers, teacher.config.num_hidden_layers)
    assert term.sides() == (list(range(depths[0] + 1)), list(range(depths[1] + 1)))
    labels = torch.tensor([0, 1, 0, 1, 1, 0])
    objective = Objective([term], student.config, teacher.config, labels)
    module = objective.loss_modules[term.name]
    assert module.student_head.in_features == (depths[0] + 1) * student.config.hidden_size
    assert module.teacher_head.in_features == (depths[1] + 1) * teacher.config.hidden_size
    seen = {}
    module.register_forward_pre_hook(lambda _, args: seen.update(inputs=args[:2]))
    ids = torch.randint(5, 60, (2, 7), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 7, dtype=torch.long)
    records = [
        _recorded(model, objective.needs(side), ids, mask)
        for model, side in ((student, "student"), (teacher, "teacher"))
    ]
    objective(*records, {"example": torch.tensor([0, 1]), "labels": labels[:2]})
    for model, got in zip((student, teacher), seen["inputs"]):
        with torch.no_grad():
            states = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        expected = torch.cat([h[:, 0] for h in states.hidden_states], dim=-1)
        assert torch.allclose(got, expected, atol=1e-6)


def _recorded(model, needs, ids, mask):
    from kdbench.objectives.features import FeatureRecorder

    with torch.no_grad(), FeatureRecorder(model, needs) as recorder:
        recorder.forward(input_ids=ids, attention_mask=mask)
        return recorder.records


@pytest.mark.parametrize(
    "objective, extra, message",
    [
        ("hid_cls", [], "layers=every concatenates each side's layers, which only a concatenating"),
        (
            "hid_cls_contrast",
            ["+objective.terms.0.embedding_pair=true"],
            "layers=every reads every layer and the embeddings of each side",
        ),
    ],
)
def test_every_layer_is_refused_where_it_says_nothing(objective, extra, message):
    teacher, student = _pair()
    with pytest.raises(ConfigError, match=message):
        terms_of(objective, teacher, student, extra=["++objective.terms.0.layers=every", *extra])
