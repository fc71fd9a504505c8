"""The throughput benchmark runs on the tiny model and reports what it measured."""

from __future__ import annotations

import json

from kdbench.bench import main


def test_bench_prints_one_measurement_per_objective(tiny_glue, tmp_path, capsys):
    main(["teacher=tiny", "student=tiny", "task=sst2", f"data.glue_dir={tiny_glue}", "trainer.batch_size=8",
          f"paths.run_dir={tmp_path}", "--objectives", "att_kl+val_kl,hid_seq", "--steps", "2"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["objective"] for r in rows] == ["att_kl+val_kl", "hid_seq"]
    assert all(r["examples_per_s"] > 0 and r["steps"] == 2 and r["tokens_per_s"] >= r["examples_per_s"] for r in rows)
