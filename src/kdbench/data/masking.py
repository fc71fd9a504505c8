"""BERT-style masked-language-model masking of token ids.

`MaskingSpec` holds what masking needs from a tokenizer; `mask_tokens` draws one mask over a batch
of ids, each row from its own generator, and returns the masked ids with their MLM labels
(`IGNORE_INDEX` where no prediction is asked for).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.distributed as dist

from kdbench.errors import ConfigError
from kdbench.objectives.tensors import LOGITS

if TYPE_CHECKING:  # the process layout; its module is not needed to read one
    from kdbench.runtime.distributed import World

# The batch key of a micro-batch's masked positions over the mean of its step's: a term that is a
# mean over them weighs that much more, so accumulated micro-batches give the step's mean
MASKED_SHARE = "masked_share"

IGNORE_INDEX = -100


@dataclass(frozen=True)
class MaskingSpec:
    """What MLM masking needs from a tokenizer: the vocabulary size (random replacements are drawn
    uniformly from `range(vocab_size)`, as BERT), the [MASK] id, and the ids that are never chosen
    ([CLS], [SEP], [PAD], ...)."""

    vocab_size: int
    mask_token_id: int
    special_ids: tuple[int, ...]
    # [V] float: positions drawn with these weights (DistilBERT's frequency smoothing);
    # None: uniformly
    token_weights: torch.Tensor | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_tokenizer(cls, tokenizer, token_weights: torch.Tensor | None = None) -> MaskingSpec:
        if tokenizer.mask_token_id is None:
            raise ConfigError(
                f"tokenizer {tokenizer.name_or_path} has no mask token: MLM masking needs one"
            )
        specials = set(tokenizer.all_special_ids)
        if tokenizer.pad_token_id is not None:
            specials.add(tokenizer.pad_token_id)
        specials = tuple(sorted(specials))
        return cls(len(tokenizer), int(tokenizer.mask_token_id), specials, token_weights)


def masks_inputs(terms, mask_inputs: str) -> bool:
    """Whether a task-agnostic run masks its inputs: those of objectives whose `terms` read MLM
    logits, or every objective's with trainer.mask_inputs=always (the study's released code)."""
    return mask_inputs == "always" or any(term.feature == LOGITS for term in terms)


def check_smoothing(trainer, terms, objective: str) -> None:
    """trainer.mlm_smoothing weighs which tokens are masked: refused where none is."""
    if trainer.mlm_smoothing is not None and not masks_inputs(terms, trainer.mask_inputs):
        raise ConfigError(
            f"trainer.mlm_smoothing={trainer.mlm_smoothing} weighs which tokens are masked, and "
            f"objective {objective} reads unmasked text: set trainer.mask_inputs=always to mask "
            "its input, or trainer.mlm_smoothing=null"
        )


def smoothed_token_weights(
    rows: np.ndarray, vocab_size: int, smoothing: float, chunk: int = 65536
) -> torch.Tensor:
    """DistilBERT's masking weights: max(count, 1) ** -smoothing of every token id in `rows`
    ([N, L] ids, read in chunks of rows): rarer tokens are masked more often (0.7 as released)."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for start in range(0, len(rows), chunk):
        ids = np.asarray(rows[start : start + chunk]).ravel()
        counts += np.bincount(ids, minlength=vocab_size)[:vocab_size]
    return torch.from_numpy(np.maximum(counts, 1).astype(np.float64) ** -smoothing).float()


def weighted_choice(
    ids: torch.Tensor,
    maskable: torch.Tensor,
    weights: torch.Tensor,
    mlm_probability: float,
    generator: torch.Generator,
) -> torch.Tensor:
    """[L] bool: ceil(mlm_probability * maskable tokens) of the row's [L] `ids` drawn without
    replacement, each with probability proportional to its token's weight (DistilBERT's masking)."""
    chosen = torch.zeros_like(maskable)
    count = math.ceil(mlm_probability * int(maskable.sum()))
    if count:
        row_weights = weights[ids] * maskable
        chosen[torch.multinomial(row_weights, count, replacement=False, generator=generator)] = True
    return chosen


def mask_tokens(
    input_ids: torch.Tensor,
    spec: MaskingSpec,
    generators: Sequence[torch.Generator],
    *,
    mlm_probability: float = 0.15,
    attention_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's dynamic MLM masking of [B, L] `input_ids` on the CPU, row i drawn from
    `generators[i]`; returns `(masked_input_ids, labels)` and leaves `input_ids` unchanged.

    Each position that is not one of `spec.special_ids` (and, when `attention_mask` is given, is
    attended) is chosen independently with probability `mlm_probability` (with `spec.token_weights`:
    ceil(mlm_probability x maskable tokens) per row, drawn by `weighted_choice`); a chosen position
    becomes [MASK] with probability 0.8, a token drawn uniformly from the whole vocabulary with
    probability 0.1, and stays as is otherwise. `labels` holds the original id at chosen positions
    and `IGNORE_INDEX` elsewhere. A row's mask depends on its ids and its generator only (not on
    the batch it is in); every call draws a fresh mask.
    """
    if not 0.0 < mlm_probability < 1.0:
        raise ConfigError(f"mlm_probability={mlm_probability} must be in (0, 1)")
    ids = torch.as_tensor(input_ids).long()
    maskable = ~torch.isin(ids, torch.tensor(spec.special_ids, dtype=torch.long))
    if attention_mask is not None:
        maskable &= torch.as_tensor(attention_mask).bool()
    chosen, action, random_ids = draw_rows(ids, maskable, spec, mlm_probability, generators)
    masked = ids.clone()
    masked[chosen & (action < 0.8)] = spec.mask_token_id
    replace = chosen & (action >= 0.8) & (action < 0.9)
    masked[replace] = random_ids[replace]
    labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE_INDEX))
    return masked, labels


def draw_rows(
    ids: torch.Tensor,
    maskable: torch.Tensor,
    spec: MaskingSpec,
    mlm_probability: float,
    generators: Sequence[torch.Generator],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The random part of a mask over [B, L] `ids`, [B, L] each: the chosen positions, the action
    draws ([MASK] below 0.8, a random token below 0.9, else kept) and the random tokens. Row i's
    come from `generators[i]`, in that order; only the draws are made row by row."""
    if len(generators) != len(ids):
        raise ValueError(f"{len(generators)} generators for {len(ids)} rows: give one per row")
    length = ids.shape[1]
    uniform, action = torch.empty(ids.shape), torch.empty(ids.shape)
    random_ids, chosen = torch.empty_like(ids), torch.zeros_like(maskable)
    for row, generator in enumerate(generators):
        if spec.token_weights is None:
            torch.rand(length, generator=generator, out=uniform[row])
        else:
            draws = (spec.token_weights, mlm_probability, generator)
            chosen[row] = weighted_choice(ids[row], maskable[row], *draws)
        torch.rand(length, generator=generator, out=action[row])
        torch.randint(spec.vocab_size, (length,), generator=generator, out=random_ids[row])
    if spec.token_weights is None:
        chosen = (uniform < mlm_probability) & maskable
    return chosen, action, random_ids


def masked_shares(world: World, device: torch.device, accumulation: int):
    """How a step's micro-batches weigh (`Stage.weigh`): each masked one with `MASKED_SHARE`, its
    masked positions over the mean per micro-batch of the step's on every process, so that the MLM
    terms (each a mean over its micro-batch's masked positions) add up to the mean over the step's,
    as one batch of them would give. One micro-batch per step and process: as they are."""
    if accumulation * world.size == 1:
        return list

    def weigh(micro_batches: list[dict]) -> list[dict]:
        if "mlm_positions" not in micro_batches[0]:
            return micro_batches
        counts = [len(batch["mlm_positions"]) for batch in micro_batches]
        mean = mean_per_micro_batch(sum(counts), len(micro_batches), world, device)
        return [batch | {MASKED_SHARE: count / mean} for batch, count in zip(micro_batches, counts)]

    return weigh


def mean_per_micro_batch(count: int, micro_batches: int, world: World, device: torch.device):
    """The mean of `count` (this process's, over its `micro_batches`) per micro-batch of every
    process, at least the smallest positive float (a step without masked positions gives shares of
    0): a host number in one process; in several, a device tensor all-reduced without waiting."""
    per_step = micro_batches * world.size
    if not world.distributed:
        return max(count / per_step, torch.finfo().tiny)
    total = torch.tensor(float(count))
    if device.type == "cuda":  # a copy from pinned memory does not wait for the device
        total = total.pin_memory()
    total = total.to(device, non_blocking=True)
    dist.all_reduce(total)
    return (total / per_step).clamp_min(torch.finfo().tiny)
