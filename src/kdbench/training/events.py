"""The events of the training loop, which a hook answers: `train` calls its hooks at the start,
before and after every optimizer update, after every pass over the data and at the end."""

from __future__ import annotations

from collections.abc import Iterable


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


class Hooks(Hook):
    """Hooks called in their order at every event."""

    def __init__(self, hooks: Iterable[Hook]):
        self.hooks = list(hooks)

    def on_start(self, progress) -> None:
        for hook in self.hooks:
            hook.on_start(progress)

    def before_update(self, progress) -> None:
        for hook in self.hooks:
            hook.before_update(progress)

    def on_step(self, progress) -> None:
        for hook in self.hooks:
            hook.on_step(progress)

    def on_epoch_end(self, progress) -> None:
        for hook in self.hooks:
            hook.on_epoch_end(progress)

    def on_end(self, progress) -> None:
        for hook in self.hooks:
            hook.on_end(progress)
