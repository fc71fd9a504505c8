"""Graceful stops: SIGTERM / SIGUSR1 (SLURM pre-emption, a scheduler's warning) end a run at the next step.

Signals are process-wide, so the flag is too; `graceful_stop()` installs the handlers for the duration of a run
and restores the previous ones. The training loop checks `stop_requested()` after every optimizer step, writes
a checkpoint and raises `Interrupted`: re-running the same command resumes there.

Under submitit (hydra/launcher=submitit_slurm or submitit_local) the job process already has a handler for the
pre-emption signal (SUBMITIT_PREEMPT_SIGNAL, USR2 by default) that requeues the job and exits at once. Left
alone it would exit in the middle of a step, losing everything since the last periodic checkpoint, so that
signal is caught too, and once the checkpoint is written and the record says "interrupted", `Interrupted.hand_over`
gives it to submitit's handler, which requeues the job; the requeued job resumes from the checkpoint.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import threading
from collections.abc import Callable

from kdbench.errors import KdbenchError

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
_requested = threading.Event()


class Interrupted(KdbenchError):
    """The run was asked to stop; its state is checkpointed."""

    exit_code = 0  # a clean, resumable stop (the scheduler requeues the job)

    def __init__(self, message: str):
        super().__init__(message)
        self.scheduler_handler: Callable[[], None] | None = None

    def hand_over(self) -> None:
        """Let the scheduler's own pre-emption handler run now (submitit: requeue the job and exit)."""
        if self.scheduler_handler is not None:
            self.scheduler_handler()


def stop_requested() -> bool:
    return _requested.is_set()


def requeue_signal() -> signal.Signals | None:
    """The signal on which a job scheduler's handler checkpoints and requeues the job (submitit's convention)."""
    return getattr(signal, f"SIG{os.environ.get('SUBMITIT_PREEMPT_SIGNAL', 'USR2')}", None)


@contextlib.contextmanager
def graceful_stop():
    _requested.clear()
    if threading.current_thread() is not threading.main_thread():  # handlers can only be set there
        yield
        return
    received: list[int] = []

    def on_signal(signum, frame):
        received.append(signum)
        _requested.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
    requeue = requeue_signal()
    if requeue is not None and requeue not in previous and callable(signal.getsignal(requeue)):
        previous[requeue] = signal.signal(requeue, on_signal)  # a scheduler listens: chain to it after the checkpoint
    try:
        yield
    except Interrupted as exc:
        if received and received[0] == requeue and requeue in previous:
            exc.scheduler_handler = functools.partial(previous[requeue], requeue, None)
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _requested.clear()
