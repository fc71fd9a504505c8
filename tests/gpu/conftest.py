"""The GPU tier: every test here is marked `gpu` and skipped without CUDA (so it is collected on the
CPU).

It imports neither Hydra, omegaconf nor datasets: it runs with torch, transformers and kdbench
alone."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.gpu)
            if not torch.cuda.is_available():
                item.add_marker(skip)
