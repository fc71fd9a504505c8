"""The finite-loss guard, the hook every stage runs first: it checks each step's loss terms on the
device, with no host synchronisation until its verdict is read."""

from __future__ import annotations

import math

import torch

from kdbench.errors import KdbenchError
from kdbench.training.events import Hook


class NonFiniteLoss(KdbenchError):
    """A loss term became NaN or infinite."""


class FiniteLoss(Hook):
    """Every step's loss terms are checked on the device, before the optimizer's update. From the
    first step with a non-finite term on, `skip` is 1; it is the fused AdamW's `found_inf`, so the
    optimizer leaves the parameters and its own state untouched: the trained state stays that of
    the last good step. The first bad step's terms are kept on the device; `read` (one
    synchronisation, for the verdict and the values asked for) raises `NonFiniteLoss` naming that
    step and term. `Progress` reads the verdict before it gives any state to save, and this hook
    reads it at the stage's end, before the later hooks' `on_end`, so no saved state comes after
    a bad step.
    """

    def __init__(self, device: torch.device):
        self.skip = torch.zeros((), dtype=torch.float32, device=device)
        self.names: list[str] = []
        self.first: torch.Tensor | None = None  # [the bad step's place in `unread`, its terms...]
        # the steps checked since the last read: how many (on the device), and their (step, epoch)
        self.taken = torch.zeros((), dtype=torch.float32, device=device)
        self.unread: list[tuple[int, int]] = []

    def on_start(self, progress) -> None:
        # The fused kernel reads `found_inf` on the device and skips the update where it is 1: the
        # optimizer holds the guard's flag, so a bad step is skipped with no host synchronisation.
        if progress.optimizer.defaults["fused"]:
            progress.optimizer.found_inf = self.skip

    def before_update(self, progress) -> None:
        self.check(progress.losses, progress.step, progress.epoch)
        if not progress.optimizer.defaults["fused"]:
            self.read({}, progress.stage.name)  # only the fused optimizer skips on the device

    def on_end(self, progress) -> None:
        self.read({}, progress.stage.name)

    def check(self, values: dict[str, torch.Tensor], step: int, epoch: int) -> None:
        terms = torch.stack([value.float() for value in values.values()])
        if self.first is None:
            self.names, self.first = list(values), terms.new_zeros(len(values) + 1)
        bad = ~torch.isfinite(terms).all()
        first_bad = bad & (self.skip == 0)
        self.first.copy_(torch.where(first_bad, torch.cat([self.taken[None], terms]), self.first))
        self.skip.copy_(torch.maximum(self.skip, bad.float()))
        self.taken.add_(1)
        self.unread.append((step, epoch))

    def read(self, values: dict[str, torch.Tensor], stage: str) -> dict[str, float]:
        """`values` on the host, after the verdict on every step since the last read."""
        if self.first is None:
            return {name: float(value) for name, value in values.items()}
        asked = [value.float()[None] for value in values.values()]
        skip, place, *rest = torch.cat([self.skip[None], self.first, *asked]).tolist()
        first, current = rest[: len(self.names)], rest[len(self.names) :]
        if skip:
            step, epoch = self.unread[int(place)]
            name, value = next(
                (n, v) for n, v in zip(self.names, first, strict=True) if not math.isfinite(v)
            )
            raise NonFiniteLoss(
                f"loss term {name!r} became {value} at {stage} step {step} "
                f"(epoch {epoch}): lower the learning rate or use "
                "trainer.precision=fp32"
            )
        self.taken.zero_()
        self.unread.clear()
        return dict(zip(values, current, strict=True))
