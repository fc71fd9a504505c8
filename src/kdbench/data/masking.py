"""BERT-style masked-language-model masking of token ids.

`MaskingSpec` holds what masking needs from a tokenizer; `mask_tokens` draws one mask over a batch of ids and
returns the masked ids with their MLM labels (`IGNORE_INDEX` where no prediction is asked for).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kdbench.errors import ConfigError

IGNORE_INDEX = -100


@dataclass(frozen=True)
class MaskingSpec:
    """What MLM masking needs from a tokenizer: the vocabulary size (random replacements are drawn uniformly
    from `range(vocab_size)`, as BERT), the [MASK] id, and the ids that are never chosen ([CLS], [SEP], [PAD], ...)."""

    vocab_size: int
    mask_token_id: int
    special_ids: tuple[int, ...]

    @classmethod
    def from_tokenizer(cls, tokenizer) -> MaskingSpec:
        if tokenizer.mask_token_id is None:
            raise ConfigError(f"tokenizer {tokenizer.name_or_path} has no mask token: MLM masking needs one")
        specials = set(tokenizer.all_special_ids)
        if tokenizer.pad_token_id is not None:
            specials.add(tokenizer.pad_token_id)
        return cls(len(tokenizer), int(tokenizer.mask_token_id), tuple(sorted(specials)))


def mask_tokens(
    input_ids: torch.Tensor,
    spec: MaskingSpec,
    *,
    mlm_probability: float = 0.15,
    generator: torch.Generator | None = None,
    attention_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's dynamic MLM masking; returns `(masked_input_ids, labels)` and leaves `input_ids` unchanged.

    Each position that is not one of `spec.special_ids` (and, when `attention_mask` is given, is attended) is
    chosen independently with probability `mlm_probability`; a chosen position becomes [MASK] with probability
    0.8, a token drawn uniformly from the whole vocabulary with probability 0.1, and stays as is otherwise.
    `labels` holds the original id at chosen positions and `IGNORE_INDEX` elsewhere. Randomness comes from
    `generator` (the default torch RNG when None), drawn on the generator's device; every call draws a fresh mask.
    """
    if not 0.0 < mlm_probability < 1.0:
        raise ConfigError(f"mlm_probability={mlm_probability} must be in (0, 1)")
    ids = torch.as_tensor(input_ids).long()
    device = generator.device if generator is not None else ids.device
    shape = ids.shape
    maskable = ~torch.isin(ids, torch.tensor(spec.special_ids, dtype=torch.long, device=ids.device))
    if attention_mask is not None:
        maskable &= torch.as_tensor(attention_mask, device=ids.device).bool()
    chosen = (torch.rand(shape, generator=generator, device=device) < mlm_probability).to(ids.device) & maskable
    action = torch.rand(shape, generator=generator, device=device).to(ids.device)
    random_ids = torch.randint(spec.vocab_size, shape, generator=generator, device=device).to(ids.device)
    masked = ids.clone()
    masked[chosen & (action < 0.8)] = spec.mask_token_id
    replace = chosen & (action >= 0.8) & (action < 0.9)
    masked[replace] = random_ids[replace]
    labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE_INDEX))
    return masked, labels
