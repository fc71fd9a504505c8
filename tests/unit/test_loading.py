"""DataLoader workers and pinned memory (`trainer.num_workers`): the same batches, masks included,
with any number of workers, from the start and from a resumed position."""

from __future__ import annotations

import os

import pytest
import torch

from kdbench.data.batches import corpus_loader, make_loader
from kdbench.data.glue import load_split, tokenize
from kdbench.data.masking import MaskingSpec
from kdbench.errors import ConfigError
from kdbench.planning.groups import data_spec, task_spec
from kdbench.planning.plan import make_plan
from kdbench.planning.specs import LoadingSpec
from kdbench.runtime.device import loading_spec
from kdbench.runtime.distributed import World
from tests.helpers import compose_config, tiny_overrides

CPU, CUDA = torch.device("cpu"), torch.device("cuda", 0)


@pytest.mark.parametrize(("cores", "workers"), [(16, 4), (3, 2), (2, 1), (1, 0)])
def test_auto_workers_leave_the_main_process_a_core_on_a_gpu(monkeypatch, cores, workers):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    assert loading_spec("auto", CUDA) == LoadingSpec(workers, pin_memory=True)
    assert loading_spec("auto", CPU) == LoadingSpec(0, pin_memory=False)
    assert loading_spec(3, CPU) == LoadingSpec(3, pin_memory=False)


def test_loader_options_keep_workers_between_epochs():
    assert LoadingSpec(2, True).options() == {
        "num_workers": 2,
        "pin_memory": True,
        "persistent_workers": True,
    }
    assert LoadingSpec().options() == {
        "num_workers": 0,
        "pin_memory": False,
        "persistent_workers": False,
    }


def test_a_bad_num_workers_is_refused(tiny_glue, tmp_path):
    with pytest.raises(ConfigError, match="trainer.num_workers=-1 must be auto or a number of"):
        make_plan(compose_config(tiny_overrides(tiny_glue, tmp_path, "trainer.num_workers=-1")))


def batches_of(loader, epoch: int, start: int = 0) -> list[dict]:
    loader.batch_sampler.set_epoch(epoch, start)
    return list(loader)


def same_value(x, y) -> bool:
    return torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y  # tensors, or host flags


def same_batches(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(
        x.keys() == y.keys() and all(same_value(x[k], y[k]) for k in x) for x, y in zip(a, b)
    )


def test_glue_batches_are_the_same_with_workers_and_resumed(tiny_glue):
    from kdbench.models.tiny import tiny_tokenizer

    cfg = compose_config(["task=sst2", f"data.glue_dir={tiny_glue}"])
    tokenizer = tiny_tokenizer(tiny_glue / "tok")
    task = task_spec(cfg.task)
    encoded = tokenize(load_split(task, "train", data_spec(cfg.data)), task, tokenizer, 64)
    loaders = [
        make_loader(
            encoded,
            tokenizer,
            5,
            shuffle=True,
            seed=3,
            group_by_length=True,
            loading=LoadingSpec(n),
        )
        for n in (0, 2)
    ]
    for epoch in (0, 1):
        inline, workers = (batches_of(loader, epoch) for loader in loaders)
        assert same_batches(inline, workers) and len(inline) == 10
    assert same_batches(batches_of(loaders[1], 1, 4), batches_of(loaders[0], 1)[4:])


def corpus_sequences(count: int = 40, length: int = 16) -> list[dict]:
    generator = torch.Generator().manual_seed(0)
    sequences = []
    for i in range(count):
        ids = torch.randint(5, 60, (length,), generator=generator)
        ids[0], ids[-1] = 2, 3
        mask = torch.ones(length, dtype=torch.long)
        if i == count - 1:  # the packed corpus's last sequence is padded
            ids[10:], mask[10:] = 0, 0
        sequences.append({"input_ids": ids, "attention_mask": mask})
    return sequences


def test_masked_corpus_batches_are_the_same_with_workers_and_resumed():
    masking = MaskingSpec(vocab_size=60, mask_token_id=4, special_ids=(0, 1, 2, 3))
    sequences = corpus_sequences()
    loaders = [
        corpus_loader(sequences, 2, 8, LoadingSpec(workers), World(), masking, 7)
        for workers in (0, 2)
    ]
    for epoch in (0, 1):
        inline, workers = (batches_of(loader, epoch) for loader in loaders)
        assert same_batches(inline, workers) and len(inline) == 20
        assert all(len(batch["mlm_positions"]) == len(batch["labels"]) for batch in inline)
    assert sum(len(batch["labels"]) for batch in inline) > 0
    assert same_batches(batches_of(loaders[1], 1, 5), batches_of(loaders[0], 1)[5:])
