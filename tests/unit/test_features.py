"""Hooked features equal the model's own eager attention; forwards stop after the last needed
layer."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModel, BertConfig, RobertaConfig

from kdbench.objectives.features import FeatureRecorder, attention_scores


def _model(kind: str, attn: str):
    torch.manual_seed(0)
    common = dict(
        vocab_size=99,
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=37,
    )
    config = BertConfig(**common) if kind == "bert" else RobertaConfig(**common, pad_token_id=1)
    config._attn_implementation = attn
    return AutoModel.from_config(config, attn_implementation=attn).eval()


@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_hooked_scores_equal_eager_attention(kind):
    fast, eager = _model(kind, "sdpa"), _model(kind, "eager")
    eager.load_state_dict(fast.state_dict())
    ids = torch.randint(3, 99, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, 5:] = 0
    with FeatureRecorder(fast, {2: {"query", "key"}}) as recorder:
        recorder.forward(input_ids=ids, attention_mask=mask)
        scores = attention_scores(recorder.records[2], num_heads=4)
    reference = eager(input_ids=ids, attention_mask=mask, output_attentions=True).attentions[1]
    # the model's probabilities are softmax(scores + additive mask) over keys
    additive = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
    probabilities = torch.softmax(scores + additive, dim=-1)
    assert torch.allclose(probabilities, reference, atol=1e-5)


def test_forward_stops_after_the_last_needed_layer():
    model = _model("bert", "sdpa")
    ran = []
    for index, block in enumerate(model.encoder.layer):
        block.register_forward_hook(lambda m, i, o, index=index: ran.append(index))
    with FeatureRecorder(model, {1: {"hidden"}, 2: {"value", "hidden"}}, stop_after=2) as recorder:
        out = recorder.forward(input_ids=torch.randint(3, 99, (1, 5)))
    assert out is None and ran == [0, 1]
    assert set(recorder.records) == {1, 2} and recorder.records[2]["value"].shape == (1, 5, 32)


@pytest.mark.parametrize("wanted", [{"query", "key"}, {"value"}, {"query", "key", "value"}])
def test_forward_stops_after_the_last_needed_projection(wanted):
    """A last layer read at its projections only: its attention and feed-forward never run."""
    model = _model("bert", "sdpa")
    ran = []
    for name in ("attention.output", "intermediate", "output"):
        part = model.encoder.layer[1].get_submodule(name)
        part.register_forward_hook(lambda m, i, o, name=name: ran.append(name))
    ids = torch.randint(3, 99, (2, 5))
    with FeatureRecorder(model, {1: {"hidden"}, 2: wanted}, stop_after=2) as recorder:
        out = recorder.forward(input_ids=ids)
        stopped = recorder.records
    with FeatureRecorder(model, {1: {"hidden"}, 2: wanted}) as recorder:
        recorder.forward(input_ids=ids)
        full = recorder.records
    assert out is None and ran == [
        "attention.output",
        "intermediate",
        "output",
    ]  # from the full forward only
    assert stopped[2].keys() == wanted and all(
        torch.equal(stopped[2][k], full[2][k]) for k in wanted
    )


def test_hooks_are_removed_on_exit():
    model = _model("bert", "sdpa")
    with FeatureRecorder(model, {3: {"hidden", "query"}}, stop_after=3):
        pass
    assert all(not m._forward_hooks for m in model.modules())


def test_embedding_output_is_layer_zero():
    model = _model("bert", "sdpa")
    ids = torch.randint(3, 99, (1, 5))
    with FeatureRecorder(model, {0: {"hidden"}}) as recorder:
        out = recorder.forward(input_ids=ids, output_hidden_states=True)
    assert torch.equal(recorder.records[0]["hidden"], out.hidden_states[0])
