"""Graceful stops: SIGTERM / SIGUSR1 (SLURM pre-emption, a scheduler's warning) end a run at the next step.

Signals are process-wide, so the flag is too; `graceful_stop()` installs the handlers for the duration of a run
and restores the previous ones. The training loop checks `stop_requested()` after every optimizer step, writes
a checkpoint and raises `Interrupted`: re-running the same command resumes there.
"""

from __future__ import annotations

import contextlib
import signal
import threading

from kdbench.errors import KdbenchError

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
_requested = threading.Event()


class Interrupted(KdbenchError):
    """The run was asked to stop; its state is checkpointed."""

    exit_code = 0  # a clean, resumable stop (the scheduler requeues the job)


def stop_requested() -> bool:
    return _requested.is_set()


@contextlib.contextmanager
def graceful_stop():
    _requested.clear()
    if threading.current_thread() is not threading.main_thread():  # handlers can only be set there
        yield
        return
    previous = {sig: signal.signal(sig, lambda signum, frame: _requested.set()) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _requested.clear()
