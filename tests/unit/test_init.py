"""Student initialisation copies exactly the chosen teacher layers; layer lists are validated
once."""

from __future__ import annotations

import json

import pytest
import torch

from kdbench.errors import ConfigError
from kdbench.models.anatomy import encoder_layers
from kdbench.models.layers import bottom, every_kth, resolve_init_layers
from kdbench.models.student import init_from_teacher
from kdbench.planning.specs import InitSpec
from tests.helpers import compose_config, tiny_models


def test_presets_match_the_paper():
    assert every_kth(12, 3) == [4, 8, 12]
    assert every_kth(6, 3) == [2, 4, 6]
    assert every_kth(12, 6) == [2, 4, 6, 8, 10, 12]
    assert bottom(12, 3) == [1, 2, 3]


def resolve(*overrides, teacher_layers=12, student_layers=3):
    cfg = compose_config(list(overrides))
    return resolve_init_layers(
        cfg.init.name, cfg.init.get("layers"), teacher_layers, student_layers
    )


def test_resolution_of_each_init_option():
    assert resolve("init=random") is None
    assert resolve("init=every_kth") == [4, 8, 12]
    assert resolve("init=bottom") == [1, 2, 3]
    assert resolve("init=layers", "init.layers=[1,8,12]") == [1, 8, 12]


@pytest.mark.parametrize(
    ("layers", "message"),
    [
        ("[4,8]", "has 2 entries but the student has 3 layers"),
        ("[4,8,13]", "layer 13 does not exist; the teacher has layers 1..12"),
        ("[0,8,12]", "layer 0 does not exist"),
        ("[8,8,12]", "strictly ascending"),
        ("[12,8,4]", "strictly ascending"),
    ],
)
def test_bad_layer_lists_are_refused(layers, message):
    with pytest.raises(ConfigError, match=message):
        resolve("init=layers", f"init.layers={layers}")


def test_every_kth_needs_a_divisible_depth():
    with pytest.raises(ConfigError, match="multiple"):
        resolve("init=every_kth", teacher_layers=12, student_layers=5)


def _tiny_pair():
    return tiny_models(compose_config(["teacher=tiny", "student=tiny"]))


def test_init_copies_exactly_the_chosen_layers():
    teacher, student = _tiny_pair()
    init_from_teacher(student, teacher, InitSpec("layers", (1, 4), copy_head=True))
    t_blocks, s_blocks = encoder_layers(teacher), encoder_layers(student)
    for s_index, t_layer in enumerate([1, 4]):
        for (name, s_param), t_param in zip(
            s_blocks[s_index].state_dict().items(), t_blocks[t_layer - 1].state_dict().values()
        ):
            assert torch.equal(s_param, t_param), name
    # ...and not a neighbour: block 0 must differ from teacher block 2
    assert not torch.equal(
        s_blocks[0].attention.self.query.weight, t_blocks[1].attention.self.query.weight
    )
    assert torch.equal(
        student.bert.embeddings.word_embeddings.weight,
        teacher.bert.embeddings.word_embeddings.weight,
    )
    assert torch.equal(student.classifier.weight, teacher.classifier.weight)


def test_embeddings_and_head_copies_are_optional():
    teacher, student = _tiny_pair()
    before = student.bert.embeddings.word_embeddings.weight.clone()
    init_from_teacher(
        student, teacher, InitSpec("layers", (2, 4), copy_embeddings=False, copy_head=False)
    )
    assert torch.equal(student.bert.embeddings.word_embeddings.weight, before)
    assert not torch.equal(student.classifier.weight, teacher.classifier.weight)


def test_by_default_the_task_head_starts_fresh_and_the_mlm_head_is_copied():
    """As the paper's code: embeddings and LM head from the teacher, the classifier and pooler
    not."""
    from kdbench.models.pretrained import pretrained_teacher
    from kdbench.models.student import build_student
    from kdbench.planning.groups import shape_spec, teacher_spec

    teacher, student = _tiny_pair()
    init_from_teacher(student, teacher, InitSpec("layers", (2, 4)))
    assert not torch.equal(student.classifier.weight, teacher.classifier.weight)
    assert not torch.equal(student.bert.pooler.dense.weight, teacher.bert.pooler.dense.weight)
    cfg = compose_config(["teacher=tiny", "student=tiny"])
    mlm_teacher = pretrained_teacher(teacher_spec(cfg.teacher), 2, 0, mlm=True)
    mlm_student = build_student(
        mlm_teacher.config, shape_spec(cfg.student, "student"), 2, 1, mlm=True
    )
    init_from_teacher(mlm_student, mlm_teacher, InitSpec("layers", (2, 4)))
    head, teacher_head = (
        mlm_student.cls.predictions.transform,
        mlm_teacher.cls.predictions.transform,
    )
    assert torch.equal(head.dense.weight, teacher_head.dense.weight)


def test_a_distillation_s_dropout_is_the_modules_own_and_the_saved_config_the_family_s(tmp_path):
    """trainer.student_dropout: the student distils with it; what it saves (what fine-tuning and its
    users load) keeps its family's dropout."""
    from kdbench.models.student import build_student
    from kdbench.planning.groups import shape_spec

    teacher, _ = _tiny_pair()
    shape = shape_spec(compose_config(["student=tiny"]).student, "student")
    student = build_student(teacher.config, shape, 2, 1, dropout=0.0).train()
    assert {m.p for m in student.modules() if isinstance(m, torch.nn.Dropout)} == {0.0}
    ids = torch.randint(5, 40, (2, 12))
    assert torch.equal(student(ids).logits, student(ids).logits)  # no dropout while it trains
    student.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    family = (teacher.config.hidden_dropout_prob, teacher.config.attention_probs_dropout_prob)
    assert (saved["hidden_dropout_prob"], saved["attention_probs_dropout_prob"]) == family
    assert family == (0.1, 0.1)


# (the teacher's heads and feed-forward size, the student's, the refusal)
UNCOPYABLE = {
    "feed-forward size": ((2, 64), (2, 128), r"feed-forward size 128 \(the teacher's 64\)"),
    "head count": ((4, 64), (2, 64), r"head count 2 \(the teacher's 4\).*num_heads=4"),
}


@pytest.mark.parametrize("differs", UNCOPYABLE)
@pytest.mark.parametrize("init", ["auto", "every_kth"])
def test_a_student_of_another_block_shape_takes_no_teacher_layers(init, differs):
    """Copying a layer needs its weights' shapes and its heads' split of them: the teacher's
    hidden and feed-forward sizes and head count. init=auto then starts the student randomly; an
    init that copies is refused by name."""
    from transformers import BertConfig

    from kdbench.planning.inits import init_spec
    from kdbench.planning.specs import ShapeSpec

    (heads, ffn), (student_heads, student_ffn), refusal = UNCOPYABLE[differs]
    teacher = BertConfig(
        hidden_size=32, num_hidden_layers=4, num_attention_heads=heads, intermediate_size=ffn
    )
    student = ShapeSpec("2x32", 2, 32, student_heads, student_ffn)
    cfg = compose_config([f"init={init}"])
    if init == "auto":
        assert init_spec(cfg.init, teacher, student).name == "random"
        return
    with pytest.raises(ConfigError, match=refusal):
        init_spec(cfg.init, teacher, student)
