"""trainer.precision=auto and trainer.tf32 resolved for a device and a student: bf16 only where the
GPU has it natively and the student is wide enough for the matrix products to dominate, TF32 only
for fp32 matmuls on a GPU that has it, plain fp32 on the CPU (GPUs stood in for by their compute
capability)."""

from __future__ import annotations

import pytest
import torch

from kdbench.planning.plan import make_plan
from kdbench.runtime.precision import (
    BF16_MIN_WIDTH,
    apply_matmul_precision,
    native_bf16,
    resolve_precision,
    resolve_tf32,
)
from tests.helpers import compose_config, tiny_overrides

GPUS = {"H100": (9, 0), "A100": (8, 0), "T4": (7, 5), "V100": (7, 0)}
CUDA = torch.device("cuda", 0)


@pytest.fixture
def gpu(monkeypatch):
    """A stand-in CUDA GPU of a chosen compute capability."""

    def like(name: str) -> None:
        monkeypatch.setattr(torch.version, "hip", None)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: GPUS[name])

    return like


@pytest.mark.parametrize(
    ("name", "precision"), [("H100", "bf16"), ("A100", "bf16"), ("T4", "fp32"), ("V100", "fp32")]
)
def test_auto_precision_is_bf16_only_on_a_gpu_with_native_bf16(gpu, name, precision):
    gpu(name)
    assert resolve_precision("auto", CUDA, 768)[0] == precision
    assert resolve_precision("fp32", CUDA, 768)[0] == "fp32"
    assert resolve_precision("bf16", CUDA, 768)[0] == "bf16"


@pytest.mark.parametrize(("width", "precision"), [(384, "fp32"), (512, "fp32"), (768, "bf16")])
def test_auto_precision_takes_bf16_only_for_a_student_whose_matmuls_dominate(gpu, width, precision):
    gpu("H100")
    chosen, reason = resolve_precision("auto", CUDA, width)
    assert chosen == precision and str(width) in reason and str(BF16_MIN_WIDTH) in reason
    assert resolve_precision("bf16", CUDA, width) == ("bf16", "trainer.precision=bf16")


@pytest.mark.parametrize(
    ("name", "tf32"), [("H100", True), ("A100", True), ("T4", False), ("V100", False)]
)
def test_tf32_is_used_by_fp32_runs_on_a_gpu_that_has_it(gpu, name, tf32):
    gpu(name)
    assert resolve_tf32(True, CUDA, "fp32") is tf32
    assert resolve_tf32(False, CUDA, "fp32") is False
    assert resolve_tf32(True, CUDA, "bf16") is False  # a bf16 run's losses stay in full fp32


def test_the_cpu_computes_in_fp32_without_asking_cuda(monkeypatch):
    def no_cuda(*args, **kwargs):
        raise AssertionError("a CPU run asked CUDA")

    monkeypatch.setattr(torch.cuda, "get_device_capability", no_cuda)
    cpu = torch.device("cpu")
    assert not native_bf16(cpu)
    assert resolve_precision("auto", cpu, 768) == ("fp32", "auto: cpu has no native bf16")
    assert resolve_tf32(True, cpu, "fp32") is False


@pytest.mark.parametrize(
    ("name", "min_width", "precision", "tf32"),
    [("A100", 32, "bf16", False), ("A100", 768, "fp32", True), ("V100", 32, "fp32", False)],
)
def test_the_plan_resolves_the_default_precision_for_its_gpu_and_student(
    gpu, monkeypatch, tiny_glue, tmp_path, name, min_width, precision, tf32
):
    gpu(name)
    monkeypatch.setattr(
        "kdbench.runtime.precision.BF16_MIN_WIDTH", min_width
    )  # the tiny student: 32 wide
    cfg = compose_config(tiny_overrides(tiny_glue, tmp_path, "trainer.device=cuda"))
    assert cfg.trainer.precision == "auto" and cfg.trainer.tf32 is True
    plan = make_plan(cfg)
    assert (plan.precision, plan.tf32) == (precision, tf32)
    assert plan.precision_reason.startswith("auto: ")


def test_an_explicit_fp32_run_on_an_a100_uses_tf32_unless_told_not_to(gpu, tiny_glue, tmp_path):
    gpu("A100")
    overrides = tiny_overrides(tiny_glue, tmp_path, "trainer.device=cuda", "trainer.precision=fp32")
    assert make_plan(compose_config(overrides)).tf32 is True
    assert make_plan(compose_config([*overrides, "trainer.tf32=false"])).tf32 is False


@pytest.mark.parametrize("setting", ["task_specific", "task_agnostic", "finetune"])
def test_every_setting_defaults_to_auto_precision_and_tf32(setting):
    trainer = compose_config([f"setting={setting}"]).trainer
    assert (trainer.precision, trainer.tf32) == ("auto", True)


def test_matmul_precision_is_set_for_a_gpu_run_only():
    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    try:
        torch.set_float32_matmul_precision("highest")
        apply_matmul_precision(torch.device("cpu"), True)
        assert torch.get_float32_matmul_precision() == "highest"
        apply_matmul_precision(CUDA, True)
        assert torch.get_float32_matmul_precision() == "high" and torch.backends.cudnn.allow_tf32
        apply_matmul_precision(CUDA, False)
        assert torch.get_float32_matmul_precision() == "highest"
        assert not torch.backends.cudnn.allow_tf32
    finally:
        torch.set_float32_matmul_precision(before[0])
        torch.backends.cudnn.allow_tf32 = before[1]


def test_a_bad_tf32_is_refused(tiny_glue, tmp_path):
    from kdbench.errors import ConfigError

    with pytest.raises(ConfigError, match="trainer.tf32=2 must be true or false"):
        make_plan(compose_config(tiny_overrides(tiny_glue, tmp_path, "trainer.tf32=2")))
