"""Devices, data parallelism and resume: each process's GPU whether it sees its node's GPUs or only
its own, one device's CUDA RNG stream in a checkpoint, the parameters a loss never reaches frozen
before DDP wraps a model."""

from __future__ import annotations

import pytest
import torch

from kdbench.errors import ConfigError
from kdbench.objectives.features import FeatureRecorder
from kdbench.runtime import distributed
from kdbench.runtime.distributed import World
from kdbench.training import checkpoint
from kdbench.training.reach import freeze_unreached, freeze_unreached_by_step

CUDA = torch.device("cuda")


@pytest.mark.parametrize(
    ("visible", "local_rank", "index"), [(8, 3, 3), (2, 1, 1), (1, 3, 0), (1, 0, 0)]
)
def test_each_process_drives_its_own_gpu(monkeypatch, visible, local_rank, index):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: visible)
    chosen = distributed.device_for(World(local_rank, 4, local_rank), CUDA)
    assert chosen == torch.device("cuda", index)


def test_more_processes_than_visible_gpus_are_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ConfigError, match="LOCAL_RANK=3 sees 2 GPUs"):
        distributed.device_for(World(3, 4, 3), CUDA)


def test_a_single_process_or_the_cpu_keeps_its_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert distributed.device_for(World(), torch.device("cuda", 2)) == torch.device("cuda", 2)
    assert distributed.device_for(World(1, 2, 1), torch.device("cpu")) == torch.device("cpu")


@pytest.fixture
def cuda_rng(monkeypatch):
    """Stand-in CUDA RNG functions recording the device each is called for (a state per device)."""
    states, calls = {}, []

    def get(device="cuda"):
        calls.append(("get", torch.device(device)))
        return states.get(torch.device(device), torch.zeros(8, dtype=torch.uint8))

    def put(state, device="cuda"):
        calls.append(("set", torch.device(device)))
        states[torch.device(device)] = state

    def every_device(*args):
        raise AssertionError("every visible device's RNG was read or written")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state", get)
    monkeypatch.setattr(torch.cuda, "set_rng_state", put)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", every_device)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", every_device)
    return states, calls


def test_a_checkpoint_keeps_and_restores_its_own_devices_cuda_rng_only(cuda_rng):
    states, calls = cuda_rng
    mine = torch.device("cuda", 1)
    states[mine] = torch.full((8,), 7, dtype=torch.uint8)
    saved = checkpoint.rng_state(mine)
    assert torch.equal(saved["cuda"], states[mine]) and calls == [("get", mine)]
    other = torch.device("cuda", 0)  # a resumed rank whose cluster binds it one GPU: cuda:0
    checkpoint.set_rng_state(saved, other)
    assert torch.equal(states[other], saved["cuda"]) and calls[-1] == ("set", other)


def test_a_cpu_run_keeps_no_cuda_rng_even_where_cuda_is_available(cuda_rng):
    _, calls = cuda_rng
    saved = checkpoint.rng_state(torch.device("cpu"))
    checkpoint.set_rng_state(saved, torch.device("cpu"))
    assert set(saved) == {"torch"} and calls == []


def tiny_mlm_student():
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
    )
    return BertForMaskedLM(config)


def test_what_a_forward_stopped_at_layer_one_never_reaches_is_frozen():
    student = tiny_mlm_student()
    ids = torch.randint(5, 50, (2, 8))
    with FeatureRecorder(student, {1: {"query", "hidden"}}, stop_after=1) as recorder:
        recorder.forward(input_ids=ids)
        loss = recorder.records[1]["hidden"].sum() + recorder.records[1]["query"].sum()
    frozen = freeze_unreached(student, loss)
    assert frozen and all(name.startswith(("bert.encoder.layer.1.", "cls.")) for name in frozen)
    assert any(name.startswith("cls.") for name in frozen)  # the MLM head (less the tied decoder)
    trainable = {name for name, param in student.named_parameters() if param.requires_grad}
    assert not trainable & set(frozen)
    assert {
        "bert.embeddings.word_embeddings.weight",
        "bert.encoder.layer.0.output.dense.weight",
    } <= trainable


def test_a_whole_forward_freezes_nothing_and_the_probe_draws_from_no_rng_stream():
    student = tiny_mlm_student()
    student.train()  # dropout draws from the RNG
    batch = {"input_ids": torch.randint(5, 50, (2, 8))}

    def step(batch):
        logits = student(**batch).logits
        return {"total": logits.float().pow(2).mean()}

    before = torch.get_rng_state()
    assert freeze_unreached_by_step(student, step, batch, torch.device("cpu")) == []
    assert torch.equal(torch.get_rng_state(), before)
    assert all(param.requires_grad for param in student.parameters())


def test_ddp_keeps_gradients_in_its_buckets_and_searches_for_no_unused_parameter(tmp_path):
    import torch.distributed as dist

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        wrapped = distributed.wrap(torch.nn.Linear(3, 2), World(0, 2, 0), torch.device("cpu"))
        assert wrapped.gradient_as_bucket_view and not wrapped.find_unused_parameters
        assert not wrapped.static_graph
    finally:
        dist.destroy_process_group()
