"""What `kdbench.measure.timing` counts as a host-device synchronisation: each report of CUDA's
sync debug mode, and nothing else (fabricated warnings stand for CUDA's here), told apart by
optimizer step."""

from __future__ import annotations

import warnings

from kdbench.measure.timing import SYNC_WARNING, PerStep, reported_synchronisations

TRIGGERED = " (Triggered internally at /pytorch/c10/cuda/CUDAFunctions.cpp:157.)"
PROTOTYPE = (
    "Synchronization debug mode is a prototype feature and does not yet detect all synchronizing "
    "operations (Triggered internally at /pytorch/torch/csrc/cuda/Module.cpp:1003.)"
)


def synchronise() -> None:
    """One synchronising call: every report comes from this one line, as a loop's would."""
    warnings.warn(SYNC_WARNING + TRIGGERED, UserWarning, stacklevel=1)


def test_every_sync_report_counts_and_nothing_else_does():
    with warnings.catch_warnings(record=True) as passed_on:
        warnings.simplefilter("once")  # what would show a report once per line, or once at all
        with reported_synchronisations() as seen:
            warnings.warn(PROTOTYPE, UserWarning, stacklevel=1)
            warnings.warn("an unrelated warning about synchronization", UserWarning, stacklevel=1)
            for _ in range(3):
                synchronise()
    assert seen == [SYNC_WARNING + TRIGGERED] * 3
    assert [str(w.message) for w in passed_on] == [
        PROTOTYPE,
        "an unrelated warning about synchronization",
    ]


def test_reports_are_told_apart_by_step_and_the_end():
    with reported_synchronisations() as seen:
        per_step = PerStep(seen)
        synchronise()  # before the stage starts: not a step's
        per_step.on_start(None)
        for reports in (0, 2, 0, 1):
            for _ in range(reports):
                synchronise()
            per_step.on_step(None)
        synchronise()
        per_step.on_end(None)
    assert (per_step.counts, per_step.at_end) == ([0, 2, 0, 1], 1)
