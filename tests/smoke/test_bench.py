"""The throughput benchmark runs on the tiny model and reports what it measured."""

from __future__ import annotations

import json

import pytest
import torch

from kdbench.bench import main
from tests.helpers import TINY_BENCH


def test_bench_prints_one_measurement_per_objective(tiny_glue, tmp_path, capsys, monkeypatch):
    applied = []
    monkeypatch.setattr("kdbench.bench.apply_matmul_precision", lambda *a: applied.append(a))
    main(
        [
            "teacher=tiny",
            "student=tiny",
            "task=sst2",
            f"data.glue_dir={tiny_glue}",
            "stages.intermediate.batch_size=8",
            f"paths.run_dir={tmp_path}",
            "--objectives",
            "att_kl+val_kl,hid_seq",
            "--steps",
            "2",
        ]
    )
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["objective"] for r in rows] == ["att_kl+val_kl", "hid_seq"]
    assert applied == [(torch.device("cpu"), False)] * 2  # the plan's, as a run applies it
    assert all(r["tf32"] is False for r in rows)
    assert all(
        r["examples_per_s"] > 0 and r["steps"] == 2 and r["tokens_per_s"] >= r["examples_per_s"]
        for r in rows
    )


def test_the_task_agnostic_mode_runs_the_loop_and_reports_flops_and_mfu(capsys):
    main(
        [
            "--mode",
            "agnostic",
            *TINY_BENCH,
            "--batch",
            "4",
            "--steps",
            "1",
            "--warmup",
            "1",
            "--objectives",
            "att_kl,vanilla_kd",
            "--profile",
            "att_kl",
        ]
    )
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["objective"] for r in rows] == ["att_kl", "vanilla_kd"]
    profile = rows[0]["profile"]  # on the CPU the operators' own time
    assert "profile" not in rows[1] and len(profile["by_op"]) == 12
    assert profile["busy_ms"] >= sum(ms for _, ms in profile["by_op"]) > 0
    assert all(name.startswith("aten::") for name, _ in profile["by_op"])
    assert {"aten::mm", "aten::addmm"} & {name for name, _ in profile["by_op"]}
    for row in rows:
        assert row["examples_per_s"] > 0 and row["tokens_per_s"] == row["examples_per_s"] * 16
        assert (
            row["flops_per_example"] > 0
            and 0 < row["mfu"] < 1
            and row["peak_source"].startswith("measured cpu")
        )
        assert row["workers"] == 0  # auto: a run on a CPU masks in its main process
        assert any("scaled_dot_product" in kernel for kernel in row["attention_kernels"])
    assert (
        rows[1]["flops_per_example"] > rows[0]["flops_per_example"]
    )  # the MLM heads and the whole models


def host_row(capsys, *options: str) -> dict:
    """The host mode's line for one optimizer step after one untimed one, with `options`."""
    main(["--mode", "host", "--steps", "1", "--warmup", "1", *options])
    return json.loads(capsys.readouterr().out)


def test_the_host_mode_reports_the_time_per_micro_step_and_its_target(capsys):
    row = host_row(capsys, "--micro-batch", "4", "--batch", "8")
    assert (
        row["micro_steps"] == 2
        and row["micro_step_ms"] > 0
        and row["host_ms"] >= row["micro_step_ms"]
    )
    # half of 64 sequences' GPU time at 40 % of an H100 SXM's 989 bf16 TFLOP/s
    assert row["target_host_ms"] == pytest.approx(
        0.5e3 * 64 * row["paper_flops_per_example"] / (0.4 * 989e12)
    )
    assert row["target_host_ms_at_micro_batch"] == pytest.approx(row["target_host_ms"] * 4 / 64)
    assert row["collate_ms_4x128"] > 0 and row["workers"] == 0 and row["precision"] == "bf16"


def test_the_host_mode_with_workers_counts_no_collation_on_the_main_thread(capsys):
    row = host_row(
        capsys, "--micro-batch", "4", "--batch", "8", "--workers", "1", "--objectives", "vanilla_kd"
    )
    assert (
        row["workers"] == 1
        and row["collate_ms_4x128"] == 0
        and row["host_ms"] == row["micro_step_ms"] > 0
    )


def test_the_host_mode_holds_the_micro_batch_auto_chooses_on_an_80_gb_h100(capsys):
    from kdbench.measure import memory, synthetic
    from kdbench.measure.bench_host import TARGET_MEMORY

    row = host_row(capsys, "--workers", "1")  # att_kl, the paper's 1024 sequences per step
    bound = synthetic.step_memory("att_kl", synthetic.Shapes(), "bf16")
    micro = memory.fitting_micro_batch(1024, bound, TARGET_MEMORY)
    assert row["micro_batch"] == micro > 64 and row["micro_steps"] == 1024 // micro
    assert row["target_host_ms_at_micro_batch"] == pytest.approx(row["target_host_ms"] * micro / 64)


def test_modes_other_than_stage1_take_no_overrides(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--mode", "agnostic", "teacher=tiny"])
    assert exit_info.value.code == 2 and "takes no Hydra overrides" in capsys.readouterr().err


@pytest.mark.parametrize("micro", ["0", "3", "two"])
def test_a_micro_batch_that_does_not_divide_the_batch_is_refused_in_one_line(micro):
    with pytest.raises(SystemExit) as exit_info:
        main(["--mode", "host", "--micro-batch", micro, "--batch", "8"])
    assert exit_info.value.code == f"--micro-batch {micro}: give auto or a divisor of --batch 8"


def test_compile_in_the_task_agnostic_mode_compiles_both_models_blocks(capsys, monkeypatch):
    compiled = []
    monkeypatch.setattr(
        "kdbench.measure.synthetic.compile_blocks",
        lambda *models, backend: compiled.append((len(models), backend)),
    )
    main(["--mode", "agnostic", *TINY_BENCH, "--batch", "2", "--steps", "1", "--compile"])
    row = json.loads(capsys.readouterr().out)
    assert compiled == [(2, "inductor")] and row["compile_backend"] == "inductor"


def test_compile_in_stage1_mode_is_trainer_compile(monkeypatch):
    seen = []
    monkeypatch.setattr(
        "kdbench.bench.measure_stage1", lambda overrides, *_: seen.append(overrides)
    )
    monkeypatch.setattr("kdbench.bench.json.dumps", str)
    main(["teacher=tiny", "--compile", "--objectives", "hid_seq"])
    assert seen == [["teacher=tiny", "trainer.compile=true", "objective=hid_seq"]]


def test_compile_in_the_host_mode_times_the_compiled_step(capsys, monkeypatch):
    compiled = []
    monkeypatch.setattr(
        "kdbench.measure.synthetic.compile_blocks",
        lambda *models, backend: compiled.append((len(models), backend)),
    )
    row = host_row(capsys, "--micro-batch", "4", "--batch", "8", "--compile")
    assert compiled == [(2, "inductor")] and row["compile_backend"] == "inductor"
    assert row["micro_step_ms"] > 0


def test_the_task_agnostic_mode_loads_as_a_run_on_the_device_does(monkeypatch):
    from kdbench.planning.specs import LoadingSpec

    seen = []
    measure = lambda *args: seen.append(args[4].loading) or {}  # noqa: E731
    monkeypatch.setattr("kdbench.bench.measure_agnostic", measure)
    monkeypatch.setattr("kdbench.bench.apply_matmul_precision", lambda *a: None)
    monkeypatch.setattr("kdbench.runtime.device.cpu_cores", lambda: 16)
    monkeypatch.setattr("kdbench.bench.json.dumps", str)
    options = ["--mode", "agnostic", "--micro-batch", "64", "--precision", "bf16"]
    main([*options, "--device", "cuda"])
    main([*options, "--device", "cuda", "--workers", "2"])
    main([*options, "--device", "cpu"])
    assert seen == [LoadingSpec(4, pin_memory=True), LoadingSpec(2, pin_memory=True), LoadingSpec()]


def test_workers_that_are_not_a_count_are_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--mode", "agnostic", "--workers", "two"])
    error = capsys.readouterr().err.splitlines()[-1]
    assert exit_info.value.code == 2
    assert error.endswith("give a count of worker processes or auto, not 'two'")


@pytest.mark.parametrize(("options", "tf32"), [([], True), (["--no-tf32"], False)])
def test_the_task_agnostic_mode_computes_fp32_matmuls_as_a_run_does(monkeypatch, options, tf32):
    applied = []
    monkeypatch.setattr("kdbench.bench.apply_matmul_precision", lambda *a: applied.append(a))
    monkeypatch.setattr("kdbench.runtime.precision.native_bf16", lambda device: True)
    monkeypatch.setattr("kdbench.bench.measure_agnostic", lambda *args: {})
    monkeypatch.setattr("kdbench.bench.json.dumps", lambda row: applied.append(row) or "")
    cuda = ["--device", "cuda", "--micro-batch", "64", "--precision", "fp32"]
    main(["--mode", "agnostic", *cuda, *options])
    main(["--mode", "agnostic", *cuda[:-1], "bf16"])  # a bf16 run's float32 losses: full fp32
    cuda_device = torch.device("cuda")
    assert applied == [(cuda_device, tf32), {"tf32": tf32}, (cuda_device, False), {"tf32": False}]
