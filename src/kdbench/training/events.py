"""The events of the training loop, which a hook answers: `train` calls its hooks at the start,
before and after every optimizer update, after every pass over the data and at the end, and when a
hook stops the stage after a step."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from kdbench.training.signals import Interrupted


class Hook:
    """A hook does nothing at an event unless it says otherwise."""

    def on_start(self, progress) -> None:
        pass

    def before_update(self, progress) -> None:
        """A step's gradients are in and `progress.losses` holds its terms; the optimizer has not
        applied them yet: the event at which a hook can still keep the update from happening (the
        finite-loss guard does, on the device). A host read here would make every step wait for
        the device."""

    def on_step(self, progress) -> None:
        pass

    def on_epoch_end(self, progress) -> None:
        pass

    def on_end(self, progress) -> None:
        pass

    def on_stopped(self, progress) -> None:
        """A hook raised `Interrupted` after the step `progress` holds (the stop hook, or an
        evaluation that a stop signal cut short): that step is the state to keep."""


class Hooks(Hook):
    """Hooks called in their order at every event; a stop that one of them raises after a step
    reaches every hook's `on_stopped` before it leaves the loop."""

    def __init__(self, hooks: Iterable[Hook]):
        self.hooks = list(hooks)

    def on_start(self, progress) -> None:
        for hook in self.hooks:
            hook.on_start(progress)

    def before_update(self, progress) -> None:
        for hook in self.hooks:
            hook.before_update(progress)

    def on_step(self, progress) -> None:
        with self.stopping(progress):
            for hook in self.hooks:
                hook.on_step(progress)

    def on_epoch_end(self, progress) -> None:
        with self.stopping(progress):
            for hook in self.hooks:
                hook.on_epoch_end(progress)

    def on_end(self, progress) -> None:
        with self.stopping(progress):
            for hook in self.hooks:
                hook.on_end(progress)

    def on_stopped(self, progress) -> None:
        for hook in self.hooks:
            hook.on_stopped(progress)

    @contextlib.contextmanager
    def stopping(self, progress):
        try:
            yield
        except Interrupted:
            self.on_stopped(progress)
            raise
