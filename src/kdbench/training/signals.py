"""Graceful stops: SIGTERM / SIGUSR1 (SLURM pre-emption, a scheduler's warning) and a first Ctrl-C
end a run at the next safe point, in any phase.

Signals are process-wide, so the flag is too; `graceful_stop()` installs the handlers for the
duration of a run and restores the previous ones. The training loop checks the flag after every
optimizer step, writes a checkpoint and raises `Interrupted` (a dev or held-out evaluation between
steps that a stop cuts short leaves that step's checkpoint too: `Hooks.on_stopped`); every other
long phase (tokenisation, the teacher's evaluation, its logits and features tables, augmentation,
the final evaluation, the final held-out losses) runs inside `phase(name)` and calls `check_stop()`
before each unit of work (a batch, a shard, a model's block: `stop_between`), which raises
`Interrupted` naming the phase. Those phases write their cache entries whole or not at all, so a
stop leaves no partial entry; re-running the same command resumes (a stopped phase starts again). A
second Ctrl-C raises `StoppedAtOnce` at once.

Under submitit (hydra/launcher=submitit_slurm or submitit_local) the job process already has a
handler for the pre-emption signal (SUBMITIT_PREEMPT_SIGNAL, USR2 by default) that requeues the job
and exits at once. Left alone it would exit in the middle of a step, losing everything since the
last periodic checkpoint, so that signal is caught too, and once the checkpoint is written and the
record says "stopped", `Interrupted.hand_over` gives it to submitit's handler, which requeues the
job; the requeued job resumes from the checkpoint.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from kdbench.errors import KdbenchError

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
_requested = threading.Event()
_phase = ["setup"]  # the phase under way, as `phase` names it
SIGINT_EXIT = 130  # the shell's code for a process ended by Ctrl-C (a second one stops at once)
TEST_DELAY_ENV = "KDBENCH_TEST_PHASE_DELAY"  # tests only: see `_test_delay`


class Interrupted(KdbenchError):
    """The run was asked to stop in `phase`; its state is checkpointed where it has one."""

    exit_code = 0  # a clean, resumable stop (the scheduler requeues the job)

    def __init__(self, message: str, phase: str):
        super().__init__(message)
        self.phase = phase
        self.scheduler_handler: Callable[[], None] | None = None

    def hand_over(self) -> None:
        """Let the scheduler's own pre-emption handler run now (submitit: requeue the job and
        exit)."""
        if self.scheduler_handler is not None:
            self.scheduler_handler()


class StoppedAtOnce(KeyboardInterrupt):
    """A second Ctrl-C: the run ends at once, in `phase`, without a checkpoint of this moment."""

    def __init__(self, phase: str):
        super().__init__(phase)
        self.phase = phase


def stop_requested() -> bool:
    return _requested.is_set()


def current_phase() -> str:
    return _phase[0]


def enter_phase(name: str) -> str:
    """Names the work under way (a stop is recorded as stopped in `name`); returns the name it
    replaces."""
    outer, _phase[0] = _phase[0], name
    return outer


@contextlib.contextmanager
def phase(name: str):
    """`name` is the phase while the block runs."""
    outer = enter_phase(name)
    try:
        yield
    finally:
        enter_phase(outer)


def check_stop() -> None:
    """Before each unit of work (a batch, a shard) of a long phase outside the training loop: raises
    `Interrupted` when a stop was asked. Local to this process: these phases hold no collective
    operation (a data-parallel run's processes agree on a stop before their first one:
    `kdbench.training.hooks.stopped_together`)."""
    _test_delay()
    if stop_requested():
        raise stopped_in_phase()


def stopped_in_phase() -> Interrupted:
    """The stop of the phase under way, whose work is not kept."""
    return Interrupted(
        f"stopped by a signal in {current_phase()}; nothing of it is kept: re-run the same "
        "command (same run directory) to resume (the phase starts again)",
        current_phase(),
    )


@contextlib.contextmanager
def stop_between(blocks):
    """While open, `check_stop()` runs before each of `blocks` (a model's transformer blocks) too:
    one batch of a large model on a CPU takes many seconds."""
    handles = [
        block.register_forward_pre_hook(lambda module, args: check_stop()) for block in blocks
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _test_delay() -> None:
    """KDBENCH_TEST_PHASE_DELAY=PHASE:SECONDS:FILE (tests only) makes a tiny run's phase observable:
    at its first check the process writes PHASE to FILE, and it sleeps SECONDS before each check in
    the phase."""
    value = os.environ.get(TEST_DELAY_ENV)
    if value:
        name, seconds, marker = value.split(":", 2)
        if name == current_phase():
            if not Path(marker).exists():
                Path(marker).write_text(name)
            time.sleep(float(seconds))


def requeue_signal() -> signal.Signals | None:
    """The signal on which a job scheduler's handler checkpoints and requeues the job (submitit's
    convention)."""
    return getattr(signal, f"SIG{os.environ.get('SUBMITIT_PREEMPT_SIGNAL', 'USR2')}", None)


def _note(line: str) -> None:
    os.write(2, f"{line}\n".encode())  # unbuffered: safe inside a signal handler


@contextlib.contextmanager
def graceful_stop(on_stop: Callable[[], None] | None = None):
    """Stop signals set the flag (and call `on_stop`, e.g. to pass the stop on to a child process)
    while open."""
    _requested.clear()
    enter_phase("setup")
    if threading.current_thread() is not threading.main_thread():  # handlers can only be set there
        yield
        return
    received: list[int] = []

    def on_signal(signum, frame):
        if signum == signal.SIGINT and signal.SIGINT in received:
            raise StoppedAtOnce(current_phase())
        if signum == signal.SIGINT:
            _note("kdbench: stopping at the next safe point (Ctrl-C again to stop at once)")
        received.append(signum)
        _requested.set()
        if on_stop is not None:
            on_stop()

    previous = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
    requeue = requeue_signal()
    if requeue is not None and requeue not in previous and callable(signal.getsignal(requeue)):
        previous[requeue] = signal.signal(
            requeue, on_signal
        )  # a scheduler listens: chain to it after the checkpoint
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
