"""The training loop and its hooks on a toy regression: when each hook runs, what it writes, and the
samplers' shared protocol (positioning at an epoch and a batch, as a resumed run does)."""

from __future__ import annotations

import itertools
import json

import pytest
import torch

from kdbench.data.batches import HeldoutBatches, ResumableSampler, SeededBatches, ShardedBatches
from kdbench.errors import DataError, KdbenchError
from kdbench.planning.stage_specs import OptimizerSpec
from kdbench.records.steplog import StepLog
from kdbench.runtime.distributed import World
from kdbench.training import hooks, loop
from kdbench.training.checkpoint import Checkpoints
from kdbench.training.guard import NonFiniteLoss
from kdbench.training.hooks import Checkpoint, Hook, LogLosses, StopOnSignal, standard_hooks
from kdbench.training.signals import Interrupted

OPTIMIZER = OptimizerSpec(
    lr=0.1, weight_decay=0.0, betas=(0.9, 0.999), eps=1e-8, warmup_ratio=0.0, max_grad_norm=None
)


def toy_stage(
    examples: int = 12, batch: int = 4, epochs: int = 2, accumulation: int = 1
) -> loop.Stage:
    """y = 3x on `examples` points, a one-weight model, `batch` examples per micro-batch."""
    xs = torch.linspace(-1, 1, examples)
    data = [{"input_ids": xs[i : i + 1], "labels": 3 * xs[i : i + 1]} for i in range(examples)]
    sampler = SeededBatches(torch.ones(examples), batch, shuffle=True, seed=0)
    loader = torch.utils.data.DataLoader(
        data, batch_sampler=sampler, generator=torch.Generator().manual_seed(0)
    )
    model = torch.nn.Linear(1, 1, bias=False)

    def step(b):
        loss = ((model(b["input_ids"]) - b["labels"]) ** 2).mean()
        return {"mse": loss, "total": loss}

    return loop.Stage(
        "toy",
        [model],
        loader,
        step,
        OPTIMIZER,
        torch.device("cpu"),
        epochs=epochs,
        accumulation=accumulation,
    )


class Recorder(Hook):
    def __init__(self):
        self.events = []

    def on_start(self, progress):
        self.events.append(("start", progress.step))

    def on_step(self, progress):
        self.events.append(("step", progress.step, progress.epoch, progress.batch))

    def on_epoch_end(self, progress):
        self.events.append(("epoch_end", progress.step, progress.epoch))

    def on_end(self, progress):
        self.events.append(("end", progress.step))


def test_hooks_run_at_their_events_in_order():
    recorder = Recorder()
    stats = loop.train(toy_stage(), [recorder])
    steps = [e for e in recorder.events if e[0] == "step"]
    assert recorder.events[0] == ("start", 0) and recorder.events[-1] == ("end", 6)
    assert [s[1] for s in steps] == [1, 2, 3, 4, 5, 6]  # 12 examples / 4 per step, 2 epochs
    assert [s[3] for s in steps] == [1, 2, 3, 1, 2, 3]  # micro-batches consumed in the epoch
    assert [e for e in recorder.events if e[0] == "epoch_end"] == [
        ("epoch_end", 3, 1),
        ("epoch_end", 6, 2),
    ]
    assert stats["examples_per_s"] > 0


def test_accumulation_takes_a_step_every_few_micro_batches():
    recorder = Recorder()
    loop.train(toy_stage(accumulation=3, epochs=2), [recorder])
    assert [e[3] for e in recorder.events if e[0] == "step"] == [
        3,
        3,
    ]  # one step per epoch of 3 micro-batches


def test_a_pass_over_the_data_without_a_whole_step_is_refused_not_repeated_forever():
    stage = toy_stage(accumulation=4, epochs=0)  # 3 micro-batches an epoch, 4 a step
    stage.max_steps = 2
    with pytest.raises(DataError, match="3 micro-batches, fewer than one step's 4"):
        loop.train(stage)


def test_the_loop_learns_the_toy_problem():
    stage = toy_stage(
        epochs=60
    )  # 180 Adam steps under a linear decay reach 3 from any start in [-1, 1]
    loop.train(stage)
    assert abs(stage.modules[0].weight.item() - 3.0) < 0.05


def gradient_norm(parameters) -> float:
    return torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in parameters])).item()


@pytest.mark.parametrize("max_grad_norm", [None, 0.01])
def test_a_stage_clips_its_gradients_to_max_grad_norm_before_the_update(monkeypatch, max_grad_norm):
    """The global norm over every parameter, as torch's clip_grad_norm_ (and the HF Trainer)."""
    stage = toy_stage(epochs=1)
    stage.optimizer = OptimizerSpec(
        lr=0.1, weight_decay=0.0, warmup_ratio=0.0, max_grad_norm=max_grad_norm
    )
    before, updated = [], []

    class Before(Hook):
        def before_update(self, progress):
            before.append(gradient_norm(stage.modules[0].parameters()))

    real = torch.optim.AdamW.step

    def step(self, *args, **kwargs):
        updated.append(gradient_norm(p for group in self.param_groups for p in group["params"]))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", step)
    loop.train(stage, [Before()])
    assert len(updated) == len(before) == 3 and min(before) > 0.01  # y = 3x from w near 0
    expected = before if max_grad_norm is None else [max_grad_norm] * 3
    assert updated == pytest.approx(expected, rel=1e-4)


def test_checkpoints_every_n_steps_at_epoch_ends_and_done_at_the_end(tmp_path):
    saved = []
    checkpoints = Checkpoints(tmp_path / "ckpt", keep=100)
    real_save = checkpoints.save

    def save(state):
        saved.append((state["step"], state["epoch"], state["batch"], state["done"]))
        return real_save(state)

    checkpoints.save = save
    loop.train(toy_stage(), [Checkpoint(checkpoints, every=2, at_epochs=True)])
    # step 2 (every 2), epoch 1 ends at step 3, step 4, never at the last step 6 itself, then done
    assert saved == [(2, 0, 2, False), (3, 1, 0, False), (4, 1, 1, False), (6, 2, 0, True)]


def test_a_checkpoint_resumes_to_the_same_weights(tmp_path):
    checkpoints = Checkpoints(tmp_path / "ckpt", keep=100)
    first = toy_stage()
    loop.train(first, [Checkpoint(checkpoints, every=2, at_epochs=False)])
    states = [
        torch.load(p, weights_only=True) for p in sorted((tmp_path / "ckpt").glob("ckpt-*.pt"))
    ]
    mid_epoch = states[0]
    assert (mid_epoch["step"], mid_epoch["epoch"], mid_epoch["batch"]) == (2, 0, 2)
    resumed = toy_stage()  # other initial weights: the checkpoint replaces them
    loop.train(resumed, resume=mid_epoch)
    assert torch.equal(resumed.modules[0].weight, first.modules[0].weight)


def test_a_checkpoint_of_other_micro_batches_is_refused_with_the_fix(tmp_path):
    checkpoints = Checkpoints(tmp_path / "ckpt", keep=100)
    loop.train(
        toy_stage(batch=2, accumulation=2), [Checkpoint(checkpoints, every=2, at_epochs=False)]
    )
    state = torch.load(sorted((tmp_path / "ckpt").glob("ckpt-*.pt"))[0], weights_only=True)
    with pytest.raises(KdbenchError, match="took 2 micro-batches per step, this run takes 1"):
        loop.train(toy_stage(batch=4), resume=state)


def test_logging_every_n_steps_and_at_the_last(tmp_path):
    log = StepLog(tmp_path / "log.jsonl")
    loop.train(toy_stage(epochs=3), [LogLosses(log, every=4)])
    log.close()
    logged = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [row["step"] for row in logged] == [4, 8, 9]


def test_the_logged_learning_rate_is_the_one_the_step_applied(tmp_path):
    stage = toy_stage()  # 6 steps, 3 of them warming up
    stage.optimizer = OptimizerSpec(lr=1.0, weight_decay=0.0, warmup_ratio=0.5)
    log = StepLog(tmp_path / "log.jsonl")
    loop.train(stage, [LogLosses(log, every=1)])
    log.close()
    logged = [json.loads(line)["lr"] for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    applied = [0.0, 1 / 3, 2 / 3, 1.0, 2 / 3, 1 / 3]  # test_stage_schedules' linear rates
    assert logged == pytest.approx(applied)


def test_a_stop_signal_checkpoints_then_interrupts(tmp_path, monkeypatch):
    answers = itertools.chain([False], itertools.repeat(True))  # a signal during the first step
    monkeypatch.setattr(hooks, "stop_requested", lambda: next(answers))
    checkpoints = Checkpoints(tmp_path / "ckpt")
    with pytest.raises(Interrupted, match="toy step 1"):
        loop.train(toy_stage(), [StopOnSignal(checkpoints)])
    state, _ = checkpoints.latest()
    assert (state["step"], state["done"]) == (1, False)


class CutShort(Hook):
    """Stands in for a dev evaluation that a stop signal cuts short, at `event` from `step` on."""

    def __init__(self, event: str, step: int):
        self.event, self.step = event, step

    def evaluate(self, event: str, progress) -> None:
        if event == self.event and progress.step >= self.step:
            raise Interrupted("stopped by a signal in evaluation", "evaluation")

    def on_step(self, progress):
        self.evaluate("on_step", progress)

    def on_epoch_end(self, progress):
        self.evaluate("on_epoch_end", progress)

    def on_end(self, progress):
        self.evaluate("on_end", progress)


@pytest.mark.parametrize(
    ("event", "kept"),
    [
        ("on_step", (2, 0, 2, False)),
        ("on_epoch_end", (3, 1, 0, False)),  # the first epoch's end
        ("on_end", (6, 2, 0, False)),  # not done: the end's evaluation is still to come
    ],
)
def test_a_stop_that_cuts_an_evaluation_short_checkpoints_the_step_it_follows(
    tmp_path, event, kept
):
    checkpoints = Checkpoints(tmp_path / "ckpt")
    with pytest.raises(Interrupted, match="in evaluation"):
        loop.train(toy_stage(), [CutShort(event, 2), StopOnSignal(checkpoints)])
    state, _ = checkpoints.latest()
    assert (state["step"], state["epoch"], state["batch"], state["done"]) == kept


def test_a_stop_signal_during_the_setup_stops_before_the_first_step(tmp_path, monkeypatch):
    monkeypatch.setattr(hooks, "stop_requested", lambda: True)
    stage = toy_stage()
    before = [p.detach().clone() for module in stage.modules for p in module.parameters()]
    with pytest.raises(Interrupted, match="before toy step 1") as stopped:
        loop.train(stage, [StopOnSignal(Checkpoints(tmp_path / "ckpt"))])
    after = [p for module in stage.modules for p in module.parameters()]
    assert stopped.value.phase == "toy"
    assert all(torch.equal(b, a) for b, a in zip(before, after, strict=True))
    assert not (tmp_path / "ckpt").exists() or not any((tmp_path / "ckpt").iterdir())


def test_a_non_finite_loss_names_the_term_and_step():
    stage = toy_stage()
    stage.step = lambda b: {
        "mse": torch.tensor(float("nan")),
        "total": torch.tensor(1.0, requires_grad=True),
    }
    with pytest.raises(NonFiniteLoss, match="'mse' became nan at toy step 0"):
        loop.train(stage)


def test_a_non_finite_step_is_skipped_on_the_device_and_named_at_the_next_read():
    stage, calls, weights = toy_stage(epochs=1), {"n": 0}, []
    real_step = stage.step

    def step(batch):
        calls["n"] += 1
        losses = real_step(batch)
        return {k: v * float("nan") for k, v in losses.items()} if calls["n"] == 2 else losses

    class Weights(Hook):
        def on_step(self, progress):
            weights.append(stage.modules[0].weight.detach().clone())

    stage.step, initial = step, stage.modules[0].weight.detach().clone()
    with pytest.raises(NonFiniteLoss, match="'mse' became nan at toy step 1 "):
        loop.train(stage, [Weights()])  # no hook reads the values: the end's verdict names the step
    assert len(weights) == 3 and not torch.equal(weights[0], initial)  # the first step trained
    # the skipped steps keep the last good state
    assert torch.equal(weights[1], weights[0]) and torch.equal(weights[2], weights[0])


def test_before_each_update_the_hooks_see_the_step_s_losses_after_the_guard_s_check():
    seen = []

    class BeforeUpdate(Hook):
        def before_update(self, progress):
            seen.append((progress.step, sorted(progress.losses), progress.guard.unread[-1]))

    loop.train(toy_stage(epochs=1), [BeforeUpdate()])
    assert seen == [(step, ["mse", "total"], (step, 0)) for step in range(3)]


def test_standard_hooks_are_log_evaluate_checkpoint_stop_progress(tmp_path):
    from kdbench.planning.trainer_specs import TrainerSpec

    trainer = TrainerSpec(
        name="t",
        device="cpu",
        precision="fp32",
        log_every=1,
        checkpoint_every=1,
    )
    hooks = standard_hooks(
        trainer, StepLog(None), Checkpoints(tmp_path), after_step=lambda step: None
    )
    assert [type(h).__name__ for h in hooks] == [
        "LogLosses",
        "EveryStep",
        "Checkpoint",
        "StopOnSignal",
        "ProgressBar",
    ]


# ------------------------------------------------------------------------------------ the sampler
# protocol


def samplers():
    lengths = torch.randint(1, 50, (37,), generator=torch.Generator().manual_seed(0))
    return [
        SeededBatches(lengths, 4, shuffle=True, seed=1),
        SeededBatches(lengths, 4, shuffle=True, seed=1, group_by_length=True),
        SeededBatches(lengths, 4, shuffle=False),
        ShardedBatches(
            37, 8, 2, World(0, 1, 0), seed=1
        ),  # 4 micro-batches of 2 per global batch of 8
        ShardedBatches(
            37, 8, 2, World(1, 2, 1), seed=1
        ),  # rank 1 of 2: 2 micro-batches per global batch
    ]


@pytest.mark.parametrize("sampler", samplers(), ids=lambda s: type(s).__name__)
def test_every_sampler_resumes_at_any_batch_of_any_epoch(sampler):
    assert isinstance(sampler, ResumableSampler)
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        full = list(sampler)
        assert len(full) == len(sampler)  # ShardedBatches: full global batches only
        for start in range(len(full) + 1):
            sampler.set_epoch(epoch, start)
            assert list(sampler) == full[start:]


@pytest.mark.parametrize(("sequences", "count"), [(40, 5), (40, 4), (14, 4), (4000, 50), (9, 2)])
def test_the_heldout_sample_is_the_same_batches_once_on_any_number_of_processes(sequences, count):
    """The first `count` full micro-batches of 4 in corpus order (fewer when there are fewer),
    each in exactly one process, whatever their number (more processes than batches too)."""
    sample = [list(range(i * 4, i * 4 + 4)) for i in range(min(count, sequences // 4))]
    for size in (1, 2, 3, 8):
        shares = [list(HeldoutBatches(sequences, 4, count, World(r, size, r))) for r in range(size)]
        dealt = sorted([index for _, index in batch] for share in shares for batch in share)
        assert dealt == sample, size
        assert all(epoch == 0 for share in shares for batch in share for epoch, _ in batch)


def test_a_sampler_must_say_how_to_resume():
    class Unpositionable(ResumableSampler):
        def __iter__(self):
            yield [0]

        def __len__(self):
            return 1

    with pytest.raises(TypeError, match="set_epoch"):
        Unpositionable()


@pytest.mark.parametrize(
    ("schedule", "warmup", "expected"),
    [
        ("linear", 0.5, [0.0, 1 / 3, 2 / 3, 1.0, 2 / 3, 1 / 3]),  # 3 warm-up steps of 6, then decay
        (
            "constant",
            0.5,
            [1.0] * 6,
        ),  # TinyBERT's intermediate stage: the warm-up ratio is not used
    ],
)
def test_stage_schedules(schedule, warmup, expected):
    stage = toy_stage()
    stage.optimizer = OptimizerSpec(
        lr=1.0,
        weight_decay=0.0,
        betas=(0.9, 0.999),
        eps=1e-8,
        warmup_ratio=warmup,
        max_grad_norm=None,
        schedule=schedule,
    )
    progress = loop.start(stage, None)
    rates = []
    for _ in range(6):
        rates.append(progress.optimizer.param_groups[0]["lr"])
        progress.optimizer.step()
        progress.scheduler.step()
    assert rates == pytest.approx(expected)


@pytest.mark.parametrize("weight_decay_on", ["matrices", "every"])
def test_weight_decay_on_every_decays_biases_and_layer_norms_too(weight_decay_on):
    """A step of zero gradients moves only what weight decay shrinks: the matrix always, the
    bias and the LayerNorm's weight and bias with "every" alone."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.LayerNorm(3))
    model[1].weight.data.fill_(2.0)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    groups = loop.parameter_groups([model], 0.1, weight_decay_on)
    optimizer = torch.optim.AdamW(groups, lr=0.5)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    moved = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    shrunk = {name: torch.allclose(p, 0.95 * before[name]) for name, p in model.named_parameters()}
    every = {"0.weight", "0.bias", "1.weight", "1.bias"} - {"1.bias"}  # LayerNorm's bias is 0
    assert moved == (every if weight_decay_on == "every" else {"0.weight"})
    assert all(shrunk[name] for name in moved)
