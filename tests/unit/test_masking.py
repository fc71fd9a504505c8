"""BERT-style MLM masking."""

from __future__ import annotations

import hashlib
import string
from dataclasses import replace

import numpy as np
import pytest
import torch
from transformers import BertTokenizerFast

from kdbench.data.masking import (
    MASKED_SHARE,
    MaskingSpec,
    mask_tokens,
    masked_shares,
    smoothed_token_weights,
)
from kdbench.runtime.distributed import World

PAD, UNK, CLS, SEP, MASK = range(5)
VOCAB = 30522
SPEC = MaskingSpec(VOCAB, MASK, (PAD, UNK, CLS, SEP, MASK))


@pytest.fixture(scope="module")
def tokenizer():
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *string.ascii_lowercase]
    tok = BertTokenizerFast(vocab={token: i for i, token in enumerate(vocab)})
    assert (tok.cls_token_id, tok.sep_token_id, tok.pad_token_id, tok.mask_token_id) == (
        CLS,
        SEP,
        PAD,
        MASK,
    )
    return tok


def random_batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (64, 128), generator=g)
    ids[:, 0], ids[:, -1] = CLS, SEP
    ids[:, 40] = SEP
    attention = torch.ones_like(ids)
    ids[::4, 100:] = PAD
    attention[::4, 100:] = 0
    return ids, attention


def seeded(seed: int, rows: int) -> list[torch.Generator]:
    """One generator per row, each seeded apart."""
    return [torch.Generator().manual_seed(seed * 100_003 + row) for row in range(rows)]


def test_masking_statistics_follow_bert():
    ids, attention = random_batch()
    masked, labels = mask_tokens(ids, SPEC, seeded(1, 64), attention_mask=attention)
    maskable = ~torch.isin(ids, torch.tensor([PAD, CLS, SEP]))
    chosen = labels != -100
    assert not (chosen & ~maskable).any()
    assert abs(chosen.sum().item() / maskable.sum().item() - 0.15) < 0.01
    assert torch.equal(labels[chosen], ids[chosen])
    assert torch.equal(masked[~chosen], ids[~chosen])
    n = chosen.sum().item()
    as_mask = (masked[chosen] == MASK).sum().item() / n
    kept = (masked[chosen] == ids[chosen]).sum().item() / n
    replaced = 1 - as_mask - kept
    assert abs(as_mask - 0.8) < 0.03 and abs(kept - 0.1) < 0.03 and abs(replaced - 0.1) < 0.03


def test_masking_is_seeded_and_fresh_each_call():
    ids, _ = random_batch()
    before = ids.clone()
    a, b = mask_tokens(ids, SPEC, seeded(3, 64)), mask_tokens(ids, SPEC, seeded(3, 64))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    g = seeded(3, 64)
    first, second = mask_tokens(ids, SPEC, g), mask_tokens(ids, SPEC, g)
    assert not torch.equal(first[1], second[1])
    assert torch.equal(ids, before)


def test_spec_from_tokenizer_masks_like_explicit_ids(tokenizer):
    ids = torch.randint(5, len(tokenizer), (4, 32), generator=torch.Generator().manual_seed(0))
    ids[:, 0] = CLS
    via_tok = mask_tokens(ids, MaskingSpec.from_tokenizer(tokenizer), seeded(0, 4))
    explicit = mask_tokens(
        ids, MaskingSpec(len(tokenizer), MASK, (PAD, UNK, CLS, SEP, MASK)), seeded(0, 4)
    )
    assert torch.equal(via_tok[0], explicit[0]) and torch.equal(via_tok[1], explicit[1])
    assert (via_tok[1][:, 0] == -100).all()


def test_smoothed_token_weights_are_counts_to_the_minus_smoothing():
    rows = np.array([[5, 5, 5, 5], [5, 6, 6, 7]])  # counts 5 -> 5, 6 -> 2, 7 -> 1, else 0 (as 1)
    weights = smoothed_token_weights(rows, 9, 0.7, chunk=1)
    expected = torch.tensor([1, 1, 1, 1, 1, 5**-0.7, 2**-0.7, 1, 1], dtype=torch.float)
    assert torch.allclose(weights, expected)


def test_frequency_smoothed_masking_draws_rare_tokens_more_often():
    common, rare = 10, 11
    ids = torch.full((400, 20), common)
    ids[:, 1::4] = rare  # a quarter of the tokens
    weights = torch.ones(VOCAB)
    weights[common], weights[rare] = 1.0, 3.0
    spec = MaskingSpec(VOCAB, MASK, (PAD, UNK, CLS, SEP, MASK), weights)
    _, labels = mask_tokens(ids, spec, seeded(0, 400))
    chosen = labels != -100
    assert (chosen.sum(-1) == 3).all()  # ceil(0.15 * 20) per row
    share = (labels[chosen] == rare).float().mean().item()  # about 5 * 3 / (15 + 5 * 3) = 0.5
    assert 0.45 < share < 0.55
    uniform = mask_tokens(ids, SPEC, seeded(0, 400))[1]
    assert abs((uniform[uniform != -100] == rare).float().mean().item() - 0.25) < 0.05


@pytest.mark.parametrize("padded", [False, True])
def test_the_corpus_collator_gives_flat_mlm_positions_and_says_whether_the_batch_is_padded(padded):
    from kdbench.data.batches import PADDED, CorpusCollator, KeyedCorpus

    ids, attention = random_batch()
    attention = attention if padded else torch.ones_like(attention)
    sequences = [
        {"input_ids": i, "attention_mask": a} for i, a in zip(ids[:8], attention[:8], strict=True)
    ]
    corpus = KeyedCorpus(sequences)
    batch = CorpusCollator(SPEC, seed=3)([corpus[(0, index)] for index in range(8)])
    chosen = torch.zeros(8 * 128, dtype=torch.bool)
    chosen[batch["mlm_positions"]] = True
    assert batch[PADDED] is padded and batch["mlm_positions"].dtype == torch.long
    assert torch.equal(batch["mlm_positions"], chosen.nonzero().squeeze(1))  # flat, row-major
    assert torch.equal(batch["labels"], ids[:8].flatten()[batch["mlm_positions"]])  # original ids
    unchosen = ~chosen.view(8, 128)
    assert torch.equal(batch["input_ids"][unchosen], ids[:8][unchosen])  # only those change
    attended = batch["attention_mask"].flatten().nonzero().squeeze(1)
    assert torch.equal(batch["attended_positions"], attended)
    assert torch.equal(
        batch["attended_positions"][batch["masked_in_attended"]], batch["mlm_positions"]
    )


@pytest.mark.parametrize("weighted", [False, True])
def test_a_rows_mask_depends_on_its_ids_and_generator_not_on_its_batch(weighted):
    ids, attention = random_batch()
    weights = torch.rand(VOCAB, generator=torch.Generator().manual_seed(0)) + 0.1
    spec = replace(SPEC, token_weights=weights if weighted else None)
    batch = mask_tokens(ids, spec, seeded(5, 64), attention_mask=attention)
    for row in (0, 1, 63):  # row 0 is padded
        rows = slice(row, row + 1)
        alone = mask_tokens(ids[rows], spec, seeded(5, 64)[rows], attention_mask=attention[rows])
        assert torch.equal(alone[0][0], batch[0][row]) and torch.equal(alone[1][0], batch[1][row])


def test_one_generator_per_row_is_required():
    ids, _ = random_batch()
    with pytest.raises(ValueError, match="63 generators for 64 rows: give one per row"):
        mask_tokens(ids, SPEC, seeded(0, 63))


def test_the_corpus_collator_draws_each_examples_mask_from_its_seed_epoch_and_index():
    """The masks of a fixed batch, as digests: they stay those the collator has drawn since masks
    were seeded per example (runs resumed or repeated mask alike)."""
    from kdbench.data.batches import CorpusCollator, KeyedCorpus

    ids, attention = random_batch()
    corpus = KeyedCorpus([{"input_ids": i, "attention_mask": a} for i, a in zip(ids, attention)])
    weights = torch.rand(VOCAB, generator=torch.Generator().manual_seed(0)) + 0.1
    digests = []
    for spec in (SPEC, replace(SPEC, token_weights=weights)):
        batch = CorpusCollator(spec, seed=3)([corpus[(2, index)] for index in range(0, 64, 3)])
        digest = hashlib.sha256()
        for key in ("input_ids", "mlm_positions", "labels", "masked_in_attended"):
            digest.update(batch[key].numpy().tobytes())
        digests.append((digest.hexdigest()[:16], len(batch["labels"])))
    assert digests == [("83ec718a39593f8c", 380), ("e3e23853c195a3cc", 394)]


def test_a_steps_masked_micro_batches_weigh_their_share_of_its_masked_positions():
    """Shares count / mean count per micro-batch: host numbers in one process (nothing for the
    device to wait on), 0 for a step without masked positions; unmasked batches as they are."""
    weigh = masked_shares(World(), torch.device("cpu"), accumulation=3)
    micro_batches = [{"mlm_positions": torch.arange(n)} for n in (2, 5, 8)]
    shares = [batch[MASKED_SHARE] for batch in weigh(micro_batches)]
    assert shares == pytest.approx([0.4, 1.0, 1.6]) and all(type(s) is float for s in shares)
    empty = weigh([{"mlm_positions": torch.arange(0)} for _ in range(3)])
    assert [batch[MASKED_SHARE] for batch in empty] == [0.0, 0.0, 0.0]
    unmasked = [{"input_ids": torch.zeros(2, 4)}] * 3
    assert weigh(unmasked) == unmasked
    assert masked_shares(World(), torch.device("cpu"), accumulation=1) is list
