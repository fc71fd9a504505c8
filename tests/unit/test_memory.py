"""stages.distillation.device_batch_size=auto: the largest micro-batch a GPU's memory holds under
the step's bound (`kdbench.measure.memory`), a divisor of the batch per process."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from kdbench.errors import ConfigError
from kdbench.measure import memory
from kdbench.measure.memory import StepMemory

GIB = 2**30


@pytest.mark.parametrize(
    ("count", "at_most", "expected"), [(1024, 300, 256), (96, 64, 48), (7, 6, 1), (8, 0.5, 0)]
)
def test_largest_divisor(count, at_most, expected):
    assert memory.largest_divisor(count, at_most) == expected


def test_the_micro_batch_fits_half_of_what_the_static_part_leaves():
    step = StepMemory(static=2 * GIB, student=60 * 2**20, teacher=4 * 2**20)
    # (80 - 2) GiB / 2 = 39 GiB hold 624 sequences of 64 MiB: the largest divisor of 1024 is 512
    assert memory.fitting_micro_batch(1024, step, 80 * GIB) == 512
    assert memory.fitting_micro_batch(1024, step, 24 * GIB) == 128


def test_a_step_too_large_for_the_device_names_its_size_and_the_fixes():
    step = StepMemory(static=15 * GIB, student=3 * GIB, teacher=0)
    with pytest.raises(ConfigError, match="needs up to 18.0 GiB of the device's 16.0 GiB: use a"):
        memory.fitting_micro_batch(64, step, 16 * GIB)


def test_auto_reads_the_cuda_device_memory_and_the_bound(monkeypatch):
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda device: SimpleNamespace(total_memory=80 * GIB)
    )
    step = StepMemory(static=2 * GIB, student=60 * 2**20, teacher=4 * 2**20)
    cuda = torch.device("cuda", 0)
    assert memory.device_batch("auto", 1024, cuda, lambda: step) == 512


def test_auto_off_a_gpu_is_at_most_64_and_builds_no_bound():
    def no_bound():
        raise AssertionError("the bound is only needed on a GPU")

    cpu = torch.device("cpu")
    assert [memory.device_batch("auto", n, cpu, no_bound) for n in (1024, 96, 8)] == [64, 48, 8]
    assert memory.device_batch(16, 1024, cpu, no_bound) == 16
