"""The stop flag: phases name where a stop lands, checks raise it between batches and between a
model's blocks, a first Ctrl-C only asks, a second one stops at once."""

from __future__ import annotations

import os
import signal

import pytest
import torch

from kdbench.training import signals
from kdbench.training.signals import (
    Interrupted,
    StoppedAtOnce,
    check_stop,
    graceful_stop,
    phase,
    stop_between,
)


def test_a_check_without_a_stop_does_nothing_and_phases_nest():
    with graceful_stop():
        with phase("tokenisation"):
            check_stop()
            with phase("teacher_logits"):
                assert signals.current_phase() == "teacher_logits"
            assert signals.current_phase() == "tokenisation"
        assert signals.current_phase() == "setup"


def test_a_stop_signal_raises_at_the_next_check_naming_the_phase():
    with graceful_stop(), phase("teacher_features"):
        os.kill(os.getpid(), signal.SIGTERM)
        with pytest.raises(Interrupted, match="stopped by a signal in teacher_features") as stopped:
            check_stop()
    assert stopped.value.phase == "teacher_features" and stopped.value.exit_code == 0
    assert not signals.stop_requested()  # the flag lives only while the handlers are installed


def test_a_stop_lands_between_two_blocks_of_a_forward_pass():
    blocks = torch.nn.ModuleList(torch.nn.Linear(2, 2) for _ in range(3))
    ran = []
    for i, block in enumerate(blocks):
        block.register_forward_hook(lambda module, args, out, i=i: ran.append(i))
    blocks[0].register_forward_hook(lambda *args: os.kill(os.getpid(), signal.SIGTERM))
    with graceful_stop(), phase("augmentation"), stop_between(blocks), pytest.raises(Interrupted):
        x = torch.ones(1, 2)
        for block in blocks:
            x = block(x)
    assert ran == [0]
    assert all(not block._forward_pre_hooks for block in blocks)  # removed when the block closes


def test_the_first_ctrl_c_asks_to_stop_the_second_stops_at_once():
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN where pytest runs in the background
    with graceful_stop(), phase("evaluation"):
        os.kill(os.getpid(), signal.SIGINT)
        assert signals.stop_requested()
        with pytest.raises(StoppedAtOnce) as at_once:
            os.kill(os.getpid(), signal.SIGINT)
    assert at_once.value.phase == "evaluation"
    assert signal.getsignal(signal.SIGINT) is before  # restored
