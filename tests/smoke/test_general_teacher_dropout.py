"""The teacher's dropout in the task-agnostic (general) distillation (`trainer.teacher_dropout`,
TinyBERT's general_distill.py): on while it teaches, its outputs computed at every step, its
weights frozen; the held-out losses measured without it."""

from __future__ import annotations

import pytest
import torch

from kdbench.job import run
from kdbench.planning.plan import make_plan
from tests.helpers import agnostic_overrides, compose_config, write_tiny_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_tiny_corpus(tmp_path_factory.mktemp("corpus"))


def tensors(records: dict) -> list[torch.Tensor]:
    """A batch's records (by layer, then feature; or a tensor) as a flat list."""
    flat = []
    for value in records.values():
        flat += tensors(value) if isinstance(value, dict) else [value]
    return flat


def watch_the_teacher(monkeypatch) -> dict:
    """Notes, at each teacher forward, whether gradients are on (a training step, not a held-out
    evaluation) and whether the teacher is in train mode; and whether two forwards of the first
    training batch differ."""
    from kdbench.recipes import task_agnostic

    seen = {"calls": [], "differ": None, "teacher": None}
    real = task_agnostic.teacher_records_now

    def watched(recorder, *args):
        records_of = real(recorder, *args)
        seen["teacher"] = recorder.model

        def records(batch):
            seen["calls"].append((torch.is_grad_enabled(), recorder.model.training))
            first = records_of(batch)
            if seen["differ"] is None and torch.is_grad_enabled():
                again = tensors(records_of(batch))
                seen["differ"] = any(not torch.equal(a, b) for a, b in zip(tensors(first), again))
            return first

        return records

    monkeypatch.setattr(task_agnostic, "teacher_records_now", watched)
    return seen


def distilled(corpus, run_dir, monkeypatch, dropout: bool) -> tuple[dict, dict, object]:
    seen = watch_the_teacher(monkeypatch)
    cfg = compose_config(
        agnostic_overrides(
            corpus,
            run_dir,
            "objective=att_kl+hid_seq",
            f"trainer.teacher_dropout={str(dropout).lower()}",
        )
    )
    record = run(cfg)
    monkeypatch.undo()
    assert record["status"] == "completed"
    return record, seen, make_plan(cfg)


def test_the_general_teacher_teaches_with_dropout_on_request_and_stays_frozen(
    corpus, tmp_path, monkeypatch
):
    from kdbench.models.pretrained import pretrained_teacher
    from kdbench.recipes.task_agnostic import MLM_NUM_LABELS

    off, seen_off, _ = distilled(corpus, tmp_path / "off", monkeypatch, False)
    on, seen_on, plan = distilled(corpus, tmp_path / "on", monkeypatch, True)
    training = [mode for grads, mode in seen_on["calls"] if grads]
    heldout = [mode for grads, mode in seen_on["calls"] if not grads]
    assert len(training) >= 6 and all(training)  # every step's forward, with dropout
    assert heldout and not any(heldout)  # the held-out losses without it
    assert not any(mode for _, mode in seen_off["calls"])
    assert (seen_on["differ"], seen_off["differ"]) == (True, False)
    assert on["initial_heldout"] == off["initial_heldout"]  # the same student, measured alike
    assert on["metrics"] != off["metrics"]  # dropout changed what the student learnt
    teacher = seen_on["teacher"]
    fresh = pretrained_teacher(plan.teacher, MLM_NUM_LABELS, plan.trainer.teacher_seed, mlm=True)
    assert not any(p.requires_grad for p in teacher.parameters())
    weights = teacher.state_dict()
    assert all(torch.equal(weights[name], value) for name, value in fresh.state_dict().items())
