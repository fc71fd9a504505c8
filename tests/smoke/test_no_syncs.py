"""No host synchronisation between log steps: every recipe's training steps, through the real
`loop.train`, make no call that would make a GPU's host wait for the device.

On the CPU nothing waits, so the calls themselves are counted: the Tensor methods that read a
tensor's values on the host (`item`, `tolist`, `cpu`, `numpy`, `__bool__`, `__float__`, `__int__`,
`__index__`) and the operators whose output shape depends on the values (`nonzero`,
`masked_select`, `unique`, a boolean index, ...), caught by a `TorchDispatchMode`. The data
pipeline (sampler and collator) runs on the host by design and is not counted. The reads of the
finite-loss verdict, one synchronisation each on a GPU, come at the log steps and the stage's end.
"""

from __future__ import annotations

import contextlib
import functools

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kdbench.job import run
from kdbench.measure import synthetic
from kdbench.measure.timing import PerStep
from kdbench.models.attention import attention_mask
from kdbench.records.steplog import StepLog
from kdbench.training import loop
from kdbench.training.hooks import Hook, LogLosses
from tests.helpers import (
    agnostic_overrides,
    compose_config,
    small_shapes,
    tiny_models,
    tiny_overrides,
    verdict_reads,
    write_tiny_corpus,
    write_tiny_glue,
)

HOST_READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__")
aten = torch.ops.aten
DATA_DEPENDENT = {
    aten.nonzero.default,
    aten.masked_select.default,
    aten._unique2.default,
    aten.unique_dim.default,
    aten.unique_consecutive.default,
    aten._local_scalar_dense.default,
    aten.argwhere.default,
}
INDEXING = {
    aten.index.Tensor,
    aten.index_put.default,
    aten.index_put_.default,
    aten._index_put_impl_.default,
}
LOG_EVERY = 3


class SyncCounter(TorchDispatchMode):
    """Counts synchronising calls (host reads, data-dependent shapes) while on and not paused."""

    def __init__(self):
        super().__init__()
        self.count, self.paused = 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self.paused and _data_dependent(func, args, kwargs):
            self.count += 1
        return func(*args, **kwargs)

    @contextlib.contextmanager
    def pause(self):
        self.paused += 1
        try:
            yield
        finally:
            self.paused -= 1

    def patched(self, name: str):
        """Tensor method `name`, counted once per call (not again for the operators it runs)."""
        method = getattr(torch.Tensor, name)

        @functools.wraps(method)
        def counted(tensor, *args, **kwargs):
            if not self.paused:
                self.count += 1
            with self.pause():
                return method(tensor, *args, **kwargs)

        return counted


def _data_dependent(func, args, kwargs) -> bool:
    if func in DATA_DEPENDENT:
        return True
    if func is aten.repeat_interleave.Tensor:
        return kwargs.get("output_size") is None
    if func in INDEXING:
        return any(i is not None and i.dtype == torch.bool for i in args[1])
    return False


class StepCounts(Hook):
    """Records, after every other hook of a step, the synchronising calls since the previous one."""

    def __init__(self, counter: SyncCounter, stage: str, counts: list):
        self.counter, self.stage, self.counts, self.seen = counter, stage, counts, 0

    def on_start(self, progress) -> None:
        self.seen = self.counter.count

    def on_step(self, progress) -> None:
        calls = self.counter.count - self.seen
        self.counts.append((self.stage, progress.step, progress.finished, calls))
        self.seen = self.counter.count


def counted_run(overrides: list[str], monkeypatch) -> list[tuple[str, int, bool, int]]:
    """Runs a config; per optimizer step of every stage: (stage, step, last, synchronising
    calls)."""
    counter, counts = SyncCounter(), []
    real_train = loop.train

    def train(stage, hooks=(), resume=None):
        stage.loader = HostLoader(stage.loader, counter)
        with counter:
            return real_train(stage, [*hooks, StepCounts(counter, stage.name, counts)], resume)

    for name in HOST_READS:
        monkeypatch.setattr(torch.Tensor, name, counter.patched(name))
    monkeypatch.setattr(loop, "train", train)
    record = run(compose_config(overrides))
    assert record["status"] == "completed", record.get("error")
    return counts


class HostLoader:
    """A loader whose batches are made (sampled, collated: on the host) with the counter paused."""

    def __init__(self, loader, counter: SyncCounter):
        self.loader, self.counter = loader, counter

    def __getattr__(self, name):
        return getattr(self.loader, name)

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        with self.counter.pause():
            batches = iter(self.loader)
        while True:
            with self.counter.pause():
                batch = next(batches, None)
            if batch is None:
                return
            yield batch


def between_log_steps(counts) -> dict[str, list[int]]:
    """Per stage, the synchronising calls of its steps that are not log steps."""
    found: dict[str, list[int]] = {}
    for stage, step, last, calls in counts:
        if step % LOG_EVERY and not last:
            found.setdefault(stage, []).append(calls)
    return found


@pytest.fixture(scope="module")
def tiny_glue(tmp_path_factory):
    return write_tiny_glue(tmp_path_factory.mktemp("glue"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_tiny_corpus(tmp_path_factory.mktemp("corpus"))


TRAINER = (
    f"trainer.log_every={LOG_EVERY}",
    "trainer.progress_bar=true",
    "trainer.checkpoint_every=0",
)


@pytest.mark.parametrize("objective,cache", [("att_kl+val_kl", 4), ("hid_seq", 0)])
def test_no_sync_between_log_steps_of_the_task_specific_stages(
    tiny_glue, tmp_path, monkeypatch, objective, cache
):
    monkeypatch.setenv("KDBENCH_CACHE", str(tmp_path / "cache"))  # the teacher is fine-tuned here
    overrides = tiny_overrides(
        tiny_glue,
        tmp_path,
        f"objective={objective}",
        "stages.teacher.epochs=1",
        f"trainer.teacher_features_gib={cache}",
        *TRAINER,
    )
    found = between_log_steps(counted_run(overrides, monkeypatch))
    assert set(found) == {"teacher", "intermediate", "prediction"}
    assert all(calls == 0 for stage in found.values() for calls in stage), found


@pytest.mark.parametrize("objective", ["att_kl+val_kl", "distilbert"])
def test_no_sync_between_log_steps_of_the_task_agnostic_recipe(
    corpus, tmp_path, monkeypatch, objective
):
    overrides = agnostic_overrides(
        corpus,
        tmp_path,
        f"objective={objective}",
        "stages.distillation.steps=7",
        "stages.distillation.eval_every=0",
        *TRAINER,
    )
    found = between_log_steps(counted_run(overrides, monkeypatch))
    assert set(found) == {"distillation"}
    assert all(calls == 0 for calls in found["distillation"]), found


@pytest.mark.parametrize("objective", ["att_kl+val_kl", "vanilla_kd"])
def test_a_stage_reads_its_verdict_only_at_its_log_steps_and_its_end(monkeypatch, objective):
    """The GPU tier's rule, counted on the CPU: the host reads the steps' losses and verdict once
    per log step and once after the last step, never between."""
    reads, steps = verdict_reads(monkeypatch), 5
    cpu = torch.device("cpu")
    with synthetic.distillation(objective, small_shapes(2), cpu, "fp32", steps) as stage:
        per_step = PerStep(reads)
        loop.train(stage, [LogLosses(StepLog(None), LOG_EVERY), per_step])
    logged = [int(step % LOG_EVERY == 0 or step == steps) for step in range(1, steps + 1)]
    assert (per_step.counts, per_step.at_end) == (logged, 1)


@pytest.mark.parametrize("padded", [True, False])
def test_the_mask_a_model_is_given_changes_none_of_its_outputs(tiny_glue, tmp_path, padded):
    teacher, _ = tiny_models(compose_config(tiny_overrides(tiny_glue, tmp_path)))
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, teacher.config.vocab_size, (3, 9), generator=generator)
    mask = torch.ones(3, 9, dtype=torch.long)
    if padded:
        mask[1, 5:], mask[2, 2:] = 0, 0
    given = attention_mask(teacher.eval(), mask, padded)
    assert (given is None) == (not padded) and (given is None or given.shape == (3, 1, 1, 9))
    reference = teacher.base_model(input_ids=ids, attention_mask=mask).last_hidden_state
    outputs = teacher.base_model(input_ids=ids, attention_mask=given).last_hidden_state
    assert torch.equal(outputs, reference)
