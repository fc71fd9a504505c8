"""Batches: seeded, resumable samplers (GLUE examples by length; corpus sequences sharded over
processes) and their collators.

Every sampler the training loop iterates is a `ResumableSampler`: `len()` is a full epoch, and
`set_epoch(epoch, start_batch)` positions it so that a resumed run sees exactly the batches an
uninterrupted run would have seen from there.
"""

from __future__ import annotations

import abc

import torch
from torch.utils.data import DataLoader
from transformers import DataCollatorWithPadding

from kdbench.data.columns import column_array
from kdbench.data.masking import IGNORE_INDEX, MaskingSpec, mask_tokens
from kdbench.errors import DataError
from kdbench.planning.specs import LoadingSpec
from kdbench.runtime.distributed import World
from kdbench.training.signals import check_stop, phase

# A batch's host-side flag: whether any of its tokens is padding. The collator computes it on the
# host, where the mask is, so that no step reads the mask on the device
# (see `kdbench.models.attention.attention_mask`).
PADDED = "padded"
LOADERS = "loaders"  # the phase a run is in while it builds a loader


def has_padding(attention_mask: torch.Tensor) -> bool:
    """Whether a host-side [B, L] mask has a padded position."""
    return not bool(attention_mask.all())


class PaddingCollator(DataCollatorWithPadding):
    """Pads to the batch's longest example (dynamic padding), or to `max_length` with
    padding="max_length"; says whether the batch has padding (`PADDED`)."""

    def __call__(self, features):
        batch = dict(super().__call__(features))
        return batch | {PADDED: has_padding(batch["attention_mask"])}


class ResumableSampler(torch.utils.data.Sampler, abc.ABC):
    """A batch sampler the loop can position: what `kdbench.training.loop.train` calls on a loader's
    sampler."""

    @abc.abstractmethod
    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        """The next iteration yields epoch `epoch`'s batches from `start_batch` on."""

    @abc.abstractmethod
    def __len__(self) -> int:
        """Batches in a full epoch."""


class SeededBatches(ResumableSampler):
    """Batches of example indices, reproducible per (seed, epoch), resumable mid-epoch.

    `shuffle`: a fresh seeded permutation each epoch. `group_by_length`: the permutation is cut into
    chunks of `megabatch` batches, each chunk sorted by length and split into batches whose order is
    shuffled again (batches of similar length, so dynamic padding wastes little). Without shuffling,
    batches are in length order (evaluation: the same examples, less padding). `set_epoch(epoch,
    start_batch)` positions the sampler (resume); `len()` is always the full epoch.
    """

    def __init__(
        self,
        lengths,
        batch_size: int,
        *,
        shuffle: bool,
        seed: int = 0,
        group_by_length: bool = False,
        megabatch: int = 50,
    ):
        self.lengths = torch.as_tensor(lengths)
        self.batch_size, self.shuffle, self.seed = batch_size, shuffle, seed
        self.group_by_length, self.megabatch = group_by_length, megabatch
        self.epoch, self.start_batch = 0, 0

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        self.epoch, self.start_batch = epoch, start_batch

    def batches(self, epoch: int) -> list[list[int]]:
        n = len(self.lengths)
        if not self.shuffle:
            order = torch.sort(self.lengths, descending=True, stable=True).indices
            return [chunk.tolist() for chunk in order.split(self.batch_size)]
        generator = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
        order = torch.randperm(n, generator=generator)
        if not self.group_by_length:
            return [chunk.tolist() for chunk in order.split(self.batch_size)]
        batches = []
        for chunk in order.split(self.batch_size * self.megabatch):
            by_length = chunk[torch.sort(self.lengths[chunk], descending=True, stable=True).indices]
            batches.extend(by_length.split(self.batch_size))
        shuffled = torch.randperm(len(batches), generator=generator)
        return [batches[i].tolist() for i in shuffled]

    def __iter__(self):
        yield from self.batches(self.epoch)[self.start_batch :]

    def __len__(self) -> int:
        return -(-len(self.lengths) // self.batch_size)


IN_PROCESS = LoadingSpec()  # no workers, no pinned memory


def make_loader(
    encoded,
    tokenizer,
    batch_size: int,
    *,
    shuffle: bool,
    seed: int = 0,
    group_by_length: bool = False,
    loading: LoadingSpec = IN_PROCESS,
    pad_to: int | None = None,
) -> DataLoader:
    """Batches padded to their own longest example (dynamic padding), or every one to `pad_to`
    tokens, from a seeded, resumable sampler, loaded as `loading` says (the same batches with any
    number of workers)."""
    with phase(LOADERS):
        check_stop()
        lengths = column_array(encoded, "length")
    sampler = SeededBatches(
        lengths,
        batch_size,
        shuffle=shuffle,
        seed=seed,
        group_by_length=group_by_length,
    )
    padding = {} if pad_to is None else {"padding": "max_length", "max_length": pad_to}
    collate = PaddingCollator(tokenizer, **padding)
    # A private generator: creating an iterator must not draw from the global RNG (dropout's), or a
    # resumed run would diverge from an uninterrupted one.
    return DataLoader(
        encoded,
        batch_sampler=sampler,
        collate_fn=collate,
        generator=torch.Generator().manual_seed(seed),
        **loading.options(),
    )


def eval_loaders(
    encoded_sets: dict, tokenizer, batch_size: int, loading: LoadingSpec = IN_PROCESS
) -> dict[str, DataLoader]:
    """`make_loader` of each evaluation set (by split suffix), in order, dynamically padded."""
    return {
        suffix: make_loader(encoded, tokenizer, batch_size, shuffle=False, loading=loading)
        for suffix, encoded in encoded_sets.items()
    }


class ShardedBatches(ResumableSampler):
    """This process's micro-batches of seeded global batches, as (epoch, example) keys.

    Global batch g is cut into `world_size * accumulation` micro-batches; process r takes
    micro-batches r, r + world_size, ...: one process with accumulation a sees the same
    micro-batches, in the same order of steps, as a processes with accumulation 1 (so their updates
    agree). The epoch travels with each key, so an example's mask depends only on (seed, epoch,
    example), never on how the batch was split.
    """

    def __init__(
        self,
        num_examples: int,
        global_batch: int,
        micro: int,
        world: World,
        seed: int,
    ):
        self.global_batches = SeededBatches(
            torch.zeros(num_examples), global_batch, shuffle=True, seed=seed
        )
        self.micro, self.world = micro, world
        self.accumulation = global_batch // world.size // micro

    def set_epoch(
        self, epoch: int, start_batch: int = 0
    ) -> None:  # start_batch counts this process's micro-batches
        self.global_batches.set_epoch(epoch, start_batch // self.accumulation)
        self.skip = start_batch % self.accumulation

    def __iter__(self):
        epoch, skip = self.global_batches.epoch, getattr(self, "skip", 0)
        for batch in self.global_batches:
            if len(batch) < self.global_batches.batch_size:
                # an epoch's incomplete last global batch is dropped (a step is always the full
                # batch)
                return
            for j in range(self.accumulation):
                if skip:
                    skip -= 1
                    continue
                start = (j * self.world.size + self.world.rank) * self.micro
                yield [(epoch, index) for index in batch[start : start + self.micro]]

    def __len__(self) -> int:
        # full global batches only: `__iter__` drops an epoch's incomplete last one
        full = len(self.global_batches.lengths) // self.global_batches.batch_size
        return full * self.accumulation


class KeyedCorpus(torch.utils.data.Dataset):
    """Packed sequences looked up by (epoch, example) keys, carrying the keys to the collator."""

    def __init__(self, sequences):
        self.sequences = sequences

    def __len__(self) -> int:
        return len(self.sequences)

    def __getitem__(self, key):
        epoch, index = key
        return {**self.sequences[index], "epoch": epoch, "example": index}


class CorpusCollator:
    """Stacks packed sequences; with `masking`, masks each one with its own (seed, epoch, example)
    RNG.

    A masked batch holds `mlm_positions` [M] (the masked positions as flat indices into the batch's
    B * L tokens, in row-major order) and `labels` [M] (their original ids, in that order): the MLM
    logits are computed there only, gathered by index (a boolean index's size would be read from the
    device). For soft targets at every attended token it also holds `attended_positions` [A] (the
    attended tokens' flat indices) and `masked_in_attended` [M] (where each masked one sits among
    them).
    """

    def __init__(self, masking: MaskingSpec | None, seed: int, mlm_probability: float = 0.15):
        self.masking, self.seed, self.mlm_probability = masking, seed, mlm_probability

    def example_key(self, epoch: int, example: int) -> int:
        """The seed of one example's mask in one epoch."""
        return ((self.seed * 1_000_003 + epoch) * 4_294_967_311 + example) % 2**63

    def __call__(self, examples):
        batch = {k: torch.stack([e[k] for e in examples]) for k in ("input_ids", "attention_mask")}
        batch[PADDED] = has_padding(batch["attention_mask"])
        if self.masking is None:
            return batch
        generators = [
            torch.Generator().manual_seed(self.example_key(e["epoch"], e["example"]))
            for e in examples
        ]
        masked, labels = mask_tokens(
            batch["input_ids"],
            self.masking,
            generators,
            mlm_probability=self.mlm_probability,
            attention_mask=batch["attention_mask"],
        )
        labels = labels.flatten()
        positions = torch.nonzero(labels != IGNORE_INDEX).squeeze(1)
        attended = batch["attention_mask"].flatten()
        rank = torch.cumsum(attended, 0) - 1  # each attended token's place among them
        return batch | {
            "input_ids": masked,
            "mlm_positions": positions,
            "labels": labels[positions],
            "attended_positions": torch.nonzero(attended).squeeze(1),
            "masked_in_attended": rank[positions],
        }


def corpus_loader(
    sequences,
    micro_batch: int,
    global_batch: int,
    loading: LoadingSpec,
    world: World,
    masking: MaskingSpec | None,
    seed: int,
) -> DataLoader:
    """This process's micro-batches of seeded global batches; masked per (seed, epoch, example) with
    `masking`, in the loader's workers (the same batches with any number of them)."""
    sampler = ShardedBatches(len(sequences), global_batch, micro_batch, world, seed)
    return keyed_loader(sequences, sampler, loading, masking, seed)


def keyed_loader(
    sequences, sampler, loading: LoadingSpec, masking: MaskingSpec | None, seed: int
) -> DataLoader:
    """The sequences by `sampler`'s (epoch, example) keys, masked per (seed, epoch, example)."""
    with phase(LOADERS):
        check_stop()
    return DataLoader(
        KeyedCorpus(sequences),
        batch_sampler=sampler,
        collate_fn=CorpusCollator(masking, seed),
        generator=torch.Generator().manual_seed(seed),  # not the global RNG, as in `make_loader`
        **loading.options(),
    )


class HeldoutBatches:
    """This process's share of the held-out sample: the held-out set's first `count` full
    micro-batches of `micro` sequences in corpus order (all of them, when it has fewer), micro-batch
    i evaluated by process i mod the number of processes. The sample is the same however many
    processes share it, each of its batches evaluated once."""

    def __init__(self, num_examples: int, micro: int, count: int, world: World):
        self.micro, self.available = micro, min(count, num_examples // micro)
        self.mine = range(world.rank, self.available, world.size)

    def __iter__(self):
        for i in self.mine:
            yield [(0, index) for index in range(i * self.micro, (i + 1) * self.micro)]

    def __len__(self) -> int:
        return len(self.mine)


def heldout_loader(
    sequences,
    micro: int,
    count: int,
    loading: LoadingSpec,
    world: World,
    masking: MaskingSpec | None,
) -> DataLoader:
    """This process's batches of the held-out sample (`HeldoutBatches`), masked as in epoch 0 of
    seed 0; refuses a held-out set without one full micro-batch: its loss would be a mean over no
    batch at all."""
    sampler = HeldoutBatches(len(sequences), micro, count, world)
    if sampler.available == 0:
        raise DataError(
            f"the corpus has {len(sequences)} held-out sequences, fewer than one held-out "
            f"batch of {micro} (what a process evaluates at once): raise "
            "corpus.heldout_fraction, add text or lower stages.distillation.device_batch_size"
        )
    return keyed_loader(sequences, sampler, loading, masking, 0)
