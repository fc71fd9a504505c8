"""experiments/runs_from_sweep.py writes a sweep's records as one portable runs.jsonl, with
--predictions their per-example predictions beside it, where the report finds them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from kdbench.records.predictions import split_arrays, write_predictions
from kdbench.report.load import load_records
from tests.helpers import experiment_script
from tests.unit.report_helpers import write_run


def test_records_travel_without_machine_paths_and_their_predictions_with_them(tmp_path: Path):
    sweep, results = tmp_path / "multirun", tmp_path / "results" / "study"
    results.mkdir(parents=True)
    for seed in (1, 2):
        run = sweep / f"objective=att_kl,seed={seed}"
        teacher = {"teacher": {"finetuned_path": str(tmp_path / "teachers" / "rte_teacher")}}
        write_run(sweep, seed=seed, name=run.name, run_dir=str(run), config=teacher)
        if seed == 1:
            outputs, labels = np.array([[0.9, 0.1], [0.2, 0.8]]), np.array([0, 0])
            record = json.loads((run / "result.json").read_text()) | {"predictions": "p.npz"}
            (run / "result.json").write_text(json.dumps(record))
            write_predictions(run / "p.npz", {"": split_arrays(outputs, labels)})

    arguments = [str(sweep), str(results / "runs.jsonl"), "--predictions"]
    experiment_script("runs_from_sweep").main(arguments)

    text = (results / "runs.jsonl").read_text()
    assert str(tmp_path) not in text and "<local>/rte_teacher" in text
    by_seed = {r["seed"]: r for r in load_records(results / "runs.jsonl").records}
    assert by_seed[1]["predictions"] == "runs/rte-att_kl-4,8,12-seed1/p.npz"
    assert (results / by_seed[1]["predictions"]).read_bytes() == (
        sweep / "objective=att_kl,seed=1" / "p.npz"
    ).read_bytes()
    assert by_seed[2]["predictions"] is None
